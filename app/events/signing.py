"""The signature scheme: ``X-Switchboard-Signature: v1=<hex HMAC-SHA256(secret,
"<X-Switchboard-Timestamp>.<body>")>``. Events Switchboard sends are signed with it, and
webhook callers that can sign use the same scheme (app/webhooks/signatures.py)."""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Switchboard-Signature"
TIMESTAMP_HEADER = "X-Switchboard-Timestamp"


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``v1=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + digest.hexdigest()
