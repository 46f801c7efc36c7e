"""Agent registry: names, hashed API keys and roles."""
