"""The console's sign-in: a signed, expiring cookie that names the key by its digest.

The cookie holds the SHA-256 digest of the key the operator signed in with (never the key),
a CSRF token and an expiry, signed with HMAC-SHA256. Every request resolves the digest
through ``AgentService.authenticate``, the check the API's middleware makes: a disabled
agent, a rotated key or a new admin key ends the console session too."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

import orjson

COOKIE_NAME = "sb_console"
# The sign-in form's own double-submit token (there is no session to bind it to yet).
LOGIN_COOKIE_NAME = "sb_console_login"
COOKIE_PATH = "/console"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def derive_secret(admin_key: str, configured: str | None) -> bytes:
    """The signing key: the configured secret, else one derived from the admin key."""
    if configured:
        return hashlib.sha256(b"switchboard-console-secret\x00" + configured.encode()).digest()
    return hmac.new(admin_key.encode(), b"switchboard-console-session", hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    """What a valid cookie says: whose key, the CSRF token, and until when."""

    key_digest: bytes
    csrf: str
    expires_at: int  # seconds since the epoch


class SessionSigner:
    """Makes and checks console cookies."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, body: str) -> str:
        return _b64(hmac.new(self._secret, body.encode(), hashlib.sha256).digest())

    def issue(self, key_digest: bytes, now: datetime, seconds: int) -> tuple[str, ConsoleSession]:
        """A new session for ``key_digest`` lasting ``seconds`` and its cookie value."""
        session = ConsoleSession(
            key_digest=key_digest,
            csrf=secrets.token_urlsafe(32),
            expires_at=int(now.timestamp()) + seconds,
        )
        body = _b64(
            orjson.dumps({"k": _b64(key_digest), "c": session.csrf, "e": session.expires_at})
        )
        return f"{body}.{self._mac(body)}", session

    def read(self, value: str | None, now: datetime) -> tuple[ConsoleSession | None, bool]:
        """The session a cookie carries, and whether it was one of ours that has expired.
        A missing, altered or malformed cookie is (None, False)."""
        if not value or value.count(".") != 1:
            return None, False
        body, mac = value.split(".")
        if not hmac.compare_digest(mac, self._mac(body)):
            return None, False
        try:
            fields = orjson.loads(_unb64(body))
            session = ConsoleSession(
                key_digest=_unb64(str(fields["k"])),
                csrf=str(fields["c"]),
                expires_at=int(fields["e"]),
            )
        except (ValueError, KeyError, TypeError):
            return None, False
        if session.expires_at <= now.timestamp():
            return None, True
        return session, False


def same_token(sent: str | None, expected: str) -> bool:
    """Constant-time comparison of a form's CSRF token with the expected one."""
    return bool(sent) and hmac.compare_digest(str(sent).encode(), expected.encode())
