"""Opaque keyset cursors: base64url of a small JSON array, validated on the way back in."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

import orjson

from app.errors import BadRequest

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
# The "cursor" of a first page in newest-first (time, id) order: after every real row.
FIRST_PAGE = (datetime(9999, 12, 31, tzinfo=UTC), UUID(int=(1 << 128) - 1))


def encode_cursor(values: Sequence[Any]) -> str:
    """Pack the sort key of the last row of a page."""
    raw = orjson.dumps(list(values), default=str)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def cut_page(
    items: list[T], limit: int, sort_key: Callable[[T], tuple[datetime, UUID]]
) -> tuple[list[T], str | None]:
    """Trim a ``limit + 1`` fetch to a page; the cursor of the next page if there is one."""
    if len(items) <= limit:
        return items, None
    page = items[:limit]
    when, ident = sort_key(page[-1])
    return page, encode_cursor([when.isoformat(), str(ident)])


def decode_cursor(cursor: str, arity: int) -> list[Any]:
    """Unpack a cursor made by :func:`encode_cursor`; 400 if it was tampered with."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        values = orjson.loads(base64.urlsafe_b64decode(padded.encode()))
    except (ValueError, binascii.Error, orjson.JSONDecodeError):
        raise BadRequest("The cursor is not one this server issued.", parameter="cursor") from None
    if not isinstance(values, list) or len(values) != arity:
        raise BadRequest("The cursor is not one this server issued.", parameter="cursor")
    return values


def decode_time_id_cursor(cursor: str) -> tuple[datetime, UUID]:
    """A (created_at, id) cursor, as used by newest-first lists."""
    created_at, row_id = decode_cursor(cursor, 2)
    try:
        when, ident = datetime.fromisoformat(str(created_at)), UUID(str(row_id))
        if when.tzinfo is None:
            raise ValueError("naive time")
        # A far-out offset can push the instant past year 9999; the driver would overflow.
        when = when.astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadRequest("The cursor is not one this server issued.", parameter="cursor") from None
    return when, ident
