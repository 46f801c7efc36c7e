"""Where Switchboard may send session data: the outbound URL policy (policy.py, pure rules)
and the HTTP transport that enforces it on every connection (transport.py)."""
