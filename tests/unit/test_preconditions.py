"""Optimistic-concurrency preconditions: If-Match parsing, base_version, and how they combine."""

from __future__ import annotations

from typing import Any

import pytest

from app.common.preconditions import (
    body_base_version,
    etag,
    merge_preference,
    merged_write,
    parse_if_match,
    required_base_versions,
)
from app.errors import BadRequest, PreconditionRequired, ValidationFailed


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ('"3"', {3}),
        ('"1", "2"', {1, 2}),
        ('"1","2","1"', {1, 2}),
        (' "7" ', {7}),
        ('"0"', {0}),
        ('"007"', {7}),
        ('"' + "9" * 18 + '"', {10**18 - 1}),
        ("*", None),
        (" * ", None),
        (None, None),
    ],
)
def test_parse_if_match_accepts(header: str | None, expected: set[int] | None) -> None:
    assert parse_if_match(header) == expected


@pytest.mark.parametrize(
    "header",
    [
        "3",  # unquoted
        "3, 4",
        'W/"3"',  # weak tags never match under If-Match
        '"1", W/"2"',
        '"' + "1" * 20 + '"',  # more digits than any version has
        '"4611686018427387904"',  # one past the largest version (2**62 - 1)
        '"' + "9" * 19 + '"',
        '"abc"',
        '"-1"',
        '"1.5"',
        '"1',
        '1"',
        '""',
        "",
        " ",
        '"1",',
        ',"1"',
        '"1" "2"',
        '"1", *',
        "**",
        "garbage",
        '"\u0663"',  # ARABIC-INDIC DIGIT THREE: a digit to \\d and int(), not to HTTP
        '"\uff17"',  # FULLWIDTH DIGIT SEVEN
        '\u00a0"3"',  # only SP and HTAB are optional whitespace
    ],
)
def test_parse_if_match_rejects(header: str) -> None:
    with pytest.raises(BadRequest):
        parse_if_match(header)


def test_etag_parses_back_to_its_version() -> None:
    assert etag(42) == '"42"'
    assert parse_if_match(etag(42)) == {42}


def test_neither_header_nor_body_is_precondition_required() -> None:
    with pytest.raises(PreconditionRequired):
        required_base_versions(None, None)


def test_body_only() -> None:
    assert required_base_versions(None, 5) == {5}


@pytest.mark.parametrize(("header", "expected"), [('"4"', {4}), ('"4", "6"', {4, 6})])
def test_header_only(header: str, expected: set[int]) -> None:
    assert required_base_versions(header, None) == expected


def test_header_wildcard_means_any_version_where_allowed() -> None:
    assert required_base_versions("*", None) is None
    with pytest.raises(BadRequest):
        required_base_versions("*", None, wildcard_ok=False)


@pytest.mark.parametrize(("header", "body"), [('"4"', 4), ('"3", "4"', 4), ("*", 4)])
def test_header_and_body_agreeing(header: str, body: int) -> None:
    assert required_base_versions(header, body) == {body}


@pytest.mark.parametrize(("header", "body"), [('"4"', 5), ('"3", "4"', 5)])
def test_header_and_body_disagreeing(header: str, body: int) -> None:
    with pytest.raises(BadRequest):
        required_base_versions(header, body)


def test_malformed_header_is_rejected_even_with_a_body_version() -> None:
    with pytest.raises(BadRequest):
        required_base_versions("4", 4)


@pytest.mark.parametrize(
    "value",
    [True, False, "5", "", 0, -1, -(1 << 70), 5.0, 1.5, float("nan"), 1 << 62, [5], {"v": 5}],
)
def test_body_base_version_rejects(value: Any) -> None:
    with pytest.raises(ValidationFailed) as raised:
        body_base_version(value)
    assert raised.value.extensions["errors"][0]["field"] == "base_version"


@pytest.mark.parametrize("value", [1, 5, (1 << 62) - 1])
def test_body_base_version_accepts_positive_integers(value: int) -> None:
    assert body_base_version(value) == value


def test_body_base_version_absent() -> None:
    assert body_base_version(None) is None


@pytest.mark.parametrize(
    ("prefer", "expected"),
    [
        (None, None),
        ("merge=auto", True),
        ("merge=strict", False),
        ("return=minimal, merge=auto", True),
        ('MERGE="auto"; strength=high', True),
        ("merge=auto, merge=strict", False),  # the last one named wins
        ("merge=sometimes", None),  # a value the server does not know is ignored
        ("respond-async", None),
        ("", None),
    ],
)
def test_the_merge_preference_is_read_from_prefer(
    prefer: str | None, expected: bool | None
) -> None:
    assert merge_preference(prefer) is expected


def test_a_write_was_merged_when_it_did_not_replace_its_base() -> None:
    assert merged_write({3}, 5)
    assert not merged_write({4}, 5)
    assert not merged_write({2, 4}, 5)
    assert not merged_write(None, 5)
