"""API keys: random, shown once, stored only as SHA-256 digests, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import tempfile
from pathlib import Path

logger = logging.getLogger("switchboard.auth")

KEY_PREFIX = "sb_"


def generate_key() -> str:
    """A new API key with 256 bits of entropy."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> bytes:
    """The digest stored and looked up in place of the key."""
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()


def same_digest(a: bytes, b: bytes) -> bool:
    """Constant-time comparison of two digests."""
    return hmac.compare_digest(a, b)


class UnusableAdminKey(Exception):
    """The admin key file exists but holds no usable key."""


def load_or_create_admin_key(path: Path) -> str:
    """Read the admin key from ``path``, generating it (mode 0600) on first use."""
    if path.exists():
        key = path.read_text(encoding="utf-8").strip()
        if len(key) < 16:
            raise UnusableAdminKey(
                f"{path} holds no usable admin key (at least 16 characters): fix it, or "
                "delete it to have a new one generated"
            )
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = generate_key()
    # Write a private temporary file, then link it into place: link() fails when the name
    # exists, so two processes starting together agree on one key, and neither can read a
    # file the other has created but not yet written.
    fd, temporary = tempfile.mkstemp(prefix=".admin-key-", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(key + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)
        except FileExistsError:
            return load_or_create_admin_key(path)
    finally:
        os.unlink(temporary)
    logger.warning("generated a new admin key in %s (mode 0600)", path)
    return key
