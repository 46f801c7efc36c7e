"""Opaque keyset cursors: base64url of a small JSON array, validated on the way back in."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from app.errors import BadRequest

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


def encode_cursor(values: Sequence[Any]) -> str:
    """Pack the sort key of the last row of a page."""
    raw = orjson.dumps(list(values), default=str)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


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
    except ValueError:
        raise BadRequest("The cursor is not one this server issued.", parameter="cursor") from None
    if when.tzinfo is None:
        raise BadRequest("The cursor is not one this server issued.", parameter="cursor")
    return when, ident
