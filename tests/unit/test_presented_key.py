"""Which API key a request presents, read from its raw ASGI headers (app/auth/middleware.py)."""

from __future__ import annotations

import pytest

from app.auth.middleware import presented_key


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], None),
        ([(b"authorization", b"Bearer sb_key")], "sb_key"),
        ([(b"authorization", b"bearer   sb_key  ")], "sb_key"),
        ([(b"authorization", b"Basic abc")], None),
        ([(b"authorization", b"Bearer ")], None),
        # A non-empty Authorization decides, even when X-API-Key is there too.
        ([(b"x-api-key", b"sb_other"), (b"authorization", b"Token x")], None),
        ([(b"authorization", b"Bearer sb_first"), (b"authorization", b"Bearer sb_2")], "sb_first"),
        # An empty Authorization counts as none: X-API-Key is read.
        ([(b"authorization", b""), (b"x-api-key", b"sb_key")], "sb_key"),
        ([(b"x-api-key", b"  sb_key ")], "sb_key"),
        ([(b"x-api-key", b"   ")], None),
        ([(b"x-api-key", b"sb_first"), (b"x-api-key", b"sb_second")], "sb_first"),
    ],
)
def test_the_key_a_request_presents(
    headers: list[tuple[bytes, bytes]], expected: str | None
) -> None:
    """As Litestar's header lookup read them: the first of each name, latin-1."""
    assert presented_key(headers) == expected
