"""Authentication (API keys) and authorisation (admin vs. agent roles)."""
