"""Optional HMAC signatures for webhook callers that can sign (n8n can, with a Code node or
the Crypto node): ``X-Switchboard-Timestamp: <unix seconds>`` and
``X-Switchboard-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>.<raw body>")>``, the same
scheme Switchboard uses for the events it sends."""

from __future__ import annotations

import hmac
from datetime import datetime

from app.errors import Unauthorized
from app.events.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from app.settings import WebhookSettings

# Unix seconds in 12 digits reach the year 33658. Anything longer is not a timestamp, and
# turning an arbitrarily long digit string into a number overflows (or hits Python's
# int-from-text digit limit): bad input, not a server error.
MAX_TIMESTAMP_DIGITS = 12


def verify_signature(
    settings: WebhookSettings,
    headers: dict[str, str],
    body: bytes,
    now: datetime,
) -> bool:
    """True if the call was signed and the signature holds; 401 if it is wrong, stale, or
    missing while required. An unsigned call without a requirement passes (False)."""
    signature = headers.get(SIGNATURE_HEADER.lower())
    timestamp = headers.get(TIMESTAMP_HEADER.lower())
    if signature is None and timestamp is None:
        if settings.require_signature:
            raise Unauthorized("This endpoint needs a signed request (X-Switchboard-Signature).")
        return False
    if settings.secret is None:
        raise Unauthorized("Signed requests are not configured on this server.")
    if signature is None or timestamp is None:
        raise Unauthorized("Send both X-Switchboard-Timestamp and X-Switchboard-Signature.")
    # isdigit() alone takes superscripts and other scripts' digits, which int() refuses.
    if not (timestamp.isascii() and timestamp.isdigit()) or len(timestamp) > MAX_TIMESTAMP_DIGITS:
        raise Unauthorized(
            f"X-Switchboard-Timestamp must be Unix seconds: 1 to {MAX_TIMESTAMP_DIGITS} digits."
        )
    age = abs(now.timestamp() - int(timestamp))
    if age > settings.signature_tolerance.total_seconds():
        raise Unauthorized("The signature timestamp is too old (or in the future): a replay?")
    expected = sign(settings.secret, int(timestamp), body)
    if not hmac.compare_digest(expected, signature.strip()):
        raise Unauthorized("The signature does not match the body.")
    return True
