"""Opaque keyset cursors: base64url of a small JSON array, validated on the way back in."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar
from uuid import UUID

import orjson
from litestar.params import QueryParameter

from app.errors import BadRequest

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
# The query parameters of every paged list: its size and the previous page's next_cursor.
PageLimit = Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT, description="Page size.")]
PageCursor = Annotated[
    str | None, QueryParameter(max_length=512, description="next_cursor of the previous page.")
]
# The "cursor" of a first page in newest-first (time, id) order: after every real row.
FIRST_PAGE = (datetime(9999, 12, 31, tzinfo=UTC), UUID(int=(1 << 128) - 1))
# The same for rows keyed by (time, id, second id), such as an event's deliveries.
FIRST_PAGE_OF_PAIRS = (*FIRST_PAGE, FIRST_PAGE[1])

SortKey = tuple[datetime, UUID] | tuple[datetime, UUID, UUID]


def encode_cursor(values: Sequence[Any]) -> str:
    """Pack the sort key of the last row of a page."""
    raw = orjson.dumps(list(values), default=str)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def cut_page(
    items: list[T], limit: int, sort_key: Callable[[T], SortKey]
) -> tuple[list[T], str | None]:
    """Trim a ``limit + 1`` fetch to a page; the cursor of the next page if there is one.
    ``sort_key`` must be unique per row, or rows sharing the last key would be skipped."""
    if len(items) <= limit:
        return items, None
    page = items[:limit]
    key = sort_key(page[-1])
    return page, encode_cursor([key[0].isoformat(), *(str(ident) for ident in key[1:])])


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


def _time_and_ids(values: list[Any]) -> tuple[datetime, list[UUID]]:
    try:
        when = datetime.fromisoformat(str(values[0]))
        idents = [UUID(str(value)) for value in values[1:]]
        if when.tzinfo is None:
            raise ValueError("naive time")
        # A far-out offset can push the instant past year 9999; the driver would overflow.
        when = when.astimezone(UTC)
    except (ValueError, OverflowError):
        raise BadRequest("The cursor is not one this server issued.", parameter="cursor") from None
    return when, idents


def decode_time_id_cursor(cursor: str) -> tuple[datetime, UUID]:
    """A (created_at, id) cursor, as used by newest-first lists."""
    when, (ident,) = _time_and_ids(decode_cursor(cursor, 2))
    return when, ident


def decode_time_id_id_cursor(cursor: str) -> tuple[datetime, UUID, UUID]:
    """A (created_at, id, second id) cursor, for rows one id alone does not tell apart."""
    when, (first, second) = _time_and_ids(decode_cursor(cursor, 3))
    return when, first, second
