"""Preconditions, cursors, the named-query loader and API keys."""

from __future__ import annotations

import re
import stat
from datetime import UTC, datetime
from pathlib import Path
from uuid import uuid4

import pytest

from app.auth.keys import UnusableAdminKey, generate_key, hash_key, load_or_create_admin_key
from app.common.pagination import decode_time_id_cursor, encode_cursor
from app.common.preconditions import body_base_version, parse_if_match, required_base_versions
from app.db.queries import QUERIES, parse_named_queries
from app.errors import BadRequest, PreconditionRequired, ValidationFailed


@pytest.mark.parametrize(
    ("header", "expected"),
    [('"3"', {3}), ('"1", "2"', {1, 2}), ("*", None), (None, None), (' "7" ', {7})],
)
def test_if_match_parsing(header: str | None, expected: set[int] | None) -> None:
    assert parse_if_match(header) == expected


@pytest.mark.parametrize("header", ["3", 'W/"3"', '"abc"', '"1', "", '"12345678901234567890"'])
def test_if_match_garbage(header: str) -> None:
    with pytest.raises(BadRequest):
        parse_if_match(header)


def test_required_base_versions() -> None:
    with pytest.raises(PreconditionRequired):
        required_base_versions(None, None)
    assert required_base_versions(None, 4) == {4}
    assert required_base_versions('"4"', None) == {4}
    assert required_base_versions('"4"', 4) == {4}
    with pytest.raises(BadRequest):
        required_base_versions('"4"', 5)


@pytest.mark.parametrize("value", [True, "1", 0, -2, 1.5, 1 << 62])
def test_body_base_version_rejects_non_positive_integers(value: object) -> None:
    with pytest.raises(ValidationFailed):
        body_base_version(value)


def test_body_base_version_accepts() -> None:
    assert body_base_version(5) == 5
    assert body_base_version(None) is None


def test_cursor_round_trip() -> None:
    when, ident = datetime(2026, 5, 1, 12, tzinfo=UTC), uuid4()
    assert decode_time_id_cursor(encode_cursor([when.isoformat(), str(ident)])) == (when, ident)


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!",
        encode_cursor([1, 2, 3]),
        encode_cursor(["2026-01-01T00:00:00+00:00", "not-a-uuid"]),
        # A fixed id: a random one in a test id differs between pytest-xdist workers.
        encode_cursor(["2026-01-01T00:00:00", "f9aa40e4-a8e7-4d66-af8d-938f01771842"]),  # naive
        "eyJhIjogMX0",  # {"a": 1}
    ],
)
def test_tampered_cursors_are_400(cursor: str) -> None:
    with pytest.raises(BadRequest):
        decode_time_id_cursor(cursor)


def test_named_query_parser() -> None:
    parsed = parse_named_queries("-- name: a\nSELECT 1;\n\n-- name: b\nSELECT $1\n", "x.sql")
    assert parsed == {"a": "SELECT 1", "b": "SELECT $1"}
    with pytest.raises(ValueError, match="twice"):
        parse_named_queries("-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n", "x.sql")
    with pytest.raises(ValueError, match="empty"):
        parse_named_queries("-- name: a\n\n-- name: b\nSELECT 1\n", "x.sql")


def test_every_named_query_uses_contiguous_dollar_parameters() -> None:
    count = 0
    for name, query_file in QUERIES.files().items():
        for query in query_file.names():
            text = getattr(query_file, query)
            assert "{" not in re.sub(r"'[^']*'", "", text), (name, query)
            assert "%s" not in text, (name, query)
            numbers = sorted({int(n) for n in re.findall(r"\$(\d+)", text)})
            assert numbers == list(range(1, len(numbers) + 1)), (name, query, numbers)
            count += 1
    assert count > 100


def test_keys() -> None:
    first, second = generate_key(), generate_key()
    assert first != second
    assert len(first) > 40
    assert hash_key(first) == hash_key(first)
    assert len(hash_key(first)) == 32


def test_admin_key_file(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "admin.key"
    key = load_or_create_admin_key(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_admin_key(path) == key
    path.write_text("short\n")
    with pytest.raises(UnusableAdminKey):
        load_or_create_admin_key(path)
