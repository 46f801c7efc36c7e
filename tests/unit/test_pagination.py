"""Keyset cursors: what the server issues decodes back exactly; anything else is a 400."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID, uuid4

import orjson
import pytest

from app.common.pagination import (
    FIRST_PAGE,
    FIRST_PAGE_OF_PAIRS,
    cut_page,
    decode_cursor,
    decode_time_id_cursor,
    decode_time_id_id_cursor,
    encode_cursor,
)
from app.errors import BadRequest

SOME_ID = UUID("0190f5b2-7c4e-7a1b-8f3e-1234567890ab")
SOME_TIME = "2026-05-01T12:00:00+00:00"


def raw_cursor(payload: bytes) -> str:
    """A cursor around arbitrary bytes, encoded the way the server encodes its own."""
    return base64.urlsafe_b64encode(payload).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "values",
    [
        [],
        ["a"],
        [SOME_TIME, str(SOME_ID)],
        [1, "two", None, True, 2.5, {"k": [1]}],
        ["ünïcödé ✓", "with/slashes+and=equals"],
    ],
)
def test_encode_decode_cursor_round_trip(values: list[Any]) -> None:
    cursor = encode_cursor(values)
    assert decode_cursor(cursor, len(values)) == values


def test_encoded_cursor_is_unpadded_url_safe_base64() -> None:
    for length in range(1, 12):
        cursor = encode_cursor(["x" * length, "?>?>?>"])
        assert "=" not in cursor
        assert set(cursor) <= set(
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
        )
        assert decode_cursor(cursor, 2) == ["x" * length, "?>?>?>"]


@pytest.mark.parametrize(
    "when",
    [
        datetime(2026, 5, 1, 12, tzinfo=UTC),
        datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC),
        datetime(2026, 5, 1, 12, tzinfo=timezone(timedelta(hours=-5, minutes=-30))),
    ],
)
def test_time_id_cursor_round_trip(when: datetime) -> None:
    ident = uuid4()
    decoded = decode_time_id_cursor(encode_cursor([when.isoformat(), str(ident)]))
    assert decoded == (when, ident)  # the same instant, given back in UTC


def test_cut_page_cursor_leads_to_the_next_page() -> None:
    base = datetime(2026, 5, 1, tzinfo=UTC)
    rows = [(base - timedelta(minutes=n), uuid4()) for n in range(5)]
    page, cursor = cut_page(rows, 3, lambda row: row)
    assert page == rows[:3]
    assert cursor is not None
    assert decode_time_id_cursor(cursor) == rows[2]


def test_cut_page_with_a_two_id_key_leads_to_the_next_page() -> None:
    # Rows sharing time and first id (an event's deliveries) stay apart by the second id.
    when, event = datetime(2026, 5, 1, tzinfo=UTC), uuid4()
    rows = [(when, event, UUID(int=n)) for n in (3, 2, 1)]
    page, cursor = cut_page(rows, 1, lambda row: row)
    assert page == rows[:1]
    assert cursor is not None
    assert decode_time_id_id_cursor(cursor) == rows[0]
    with pytest.raises(BadRequest):
        decode_time_id_cursor(cursor)  # a cursor of one list is not one of another
    with pytest.raises(BadRequest):
        decode_time_id_id_cursor(encode_cursor([SOME_TIME, str(SOME_ID)]))
    with pytest.raises(BadRequest):
        decode_time_id_id_cursor(encode_cursor([SOME_TIME, str(SOME_ID), "not-a-uuid"]))
    assert rows[0] < FIRST_PAGE_OF_PAIRS  # the first page starts after every real row


@pytest.mark.parametrize("count", [0, 2, 3])
def test_cut_page_without_more_rows_has_no_cursor(count: int) -> None:
    rows = [(datetime(2026, 5, 1, tzinfo=UTC), uuid4()) for _ in range(count)]
    assert cut_page(rows, 3, lambda row: row) == (rows, None)


def test_first_page_sorts_after_every_real_row() -> None:
    when, ident = FIRST_PAGE
    assert when.tzinfo is not None
    assert when > datetime(9999, 1, 1, tzinfo=UTC)
    assert ident == UUID("ffffffff-ffff-ffff-ffff-ffffffffffff")


TAMPERED = {
    "not base64": "!!!",
    "not base64 either": "%%%%",
    "one base64 character": "A",
    "non-ascii": "ü" * 8,
    "lone surrogate": "\ud800abc",
    "empty": "",
    "not json": raw_cursor(b"not json"),
    "truncated json": raw_cursor(b'["2026-05-01T12:00:00+00:00", "0190'),
    "json object": raw_cursor(b'{"a": 1}'),
    "json string": raw_cursor(b'"2026-05-01T12:00:00+00:00"'),
    "json number": raw_cursor(b"12"),
    "json null": raw_cursor(b"null"),
    "no values": encode_cursor([]),
    "one value": encode_cursor([SOME_TIME]),
    "three values": encode_cursor([SOME_TIME, str(SOME_ID), "extra"]),
    "bad uuid": encode_cursor([SOME_TIME, "not-a-uuid"]),
    "short uuid": encode_cursor([SOME_TIME, str(SOME_ID)[:-1]]),
    "uuid as number": encode_cursor([SOME_TIME, 5]),
    "uuid as null": encode_cursor([SOME_TIME, None]),
    "uuid as list": encode_cursor([SOME_TIME, [str(SOME_ID)]]),
    "naive datetime": encode_cursor(["2026-05-01T12:00:00", str(SOME_ID)]),
    "date only": encode_cursor(["2026-05-01", str(SOME_ID)]),
    "bad datetime": encode_cursor(["yesterday", str(SOME_ID)]),
    "datetime as number": encode_cursor([1714564800, str(SOME_ID)]),
    "datetime as null": encode_cursor([None, str(SOME_ID)]),
    "swapped": encode_cursor([str(SOME_ID), SOME_TIME]),
    "deeply nested": raw_cursor(b"[" * 2000 + b"]" * 2000),
    # Valid ISO times whose UTC instant lies outside what datetime (and PostgreSQL's
    # driver) can hold: once a 422 carrying the driver's OverflowError text.
    "past year 9999 in UTC": encode_cursor(["9999-12-31T23:59:59-23:59", str(SOME_ID)]),
    "before year 1 in UTC": encode_cursor(["0001-01-01T00:00:00+23:59", str(SOME_ID)]),
}


@pytest.mark.parametrize("cursor", list(TAMPERED.values()), ids=list(TAMPERED))
def test_tampered_time_id_cursor_is_bad_request(cursor: str) -> None:
    with pytest.raises(BadRequest) as raised:
        decode_time_id_cursor(cursor)
    assert raised.value.status == 400
    assert raised.value.extensions == {"parameter": "cursor"}


@pytest.mark.parametrize("arity", [1, 3])
def test_decode_cursor_checks_arity(arity: int) -> None:
    with pytest.raises(BadRequest):
        decode_cursor(encode_cursor(["a", "b"]), arity)


def test_server_cursor_bytes_are_plain_json() -> None:
    # The cursor is opaque to clients but not secret: it is just the row's sort key.
    cursor = encode_cursor([SOME_TIME, str(SOME_ID)])
    padded = cursor + "=" * (-len(cursor) % 4)
    assert orjson.loads(base64.urlsafe_b64decode(padded)) == [SOME_TIME, str(SOME_ID)]


def test_cursor_times_come_back_in_utc() -> None:
    when, _ = decode_time_id_cursor(encode_cursor(["2026-05-01T14:00:00+02:00", str(SOME_ID)]))
    assert when == datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert when.utcoffset() == timedelta(0)
