"""Pure session-content rules: RFC 7396 merge patch, mirrored fields, execution steps."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from app.errors import ValidationFailed
from app.sessions.state import (
    close_current_execution,
    merge_patch,
    resolve_mirrored,
    show_mirrors,
    start_execution,
    strip_mirrors,
)

# RFC 7396, Appendix A: target, patch, result.
RFC_7396_EXAMPLES: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("target", "patch", "expected"), RFC_7396_EXAMPLES)
def test_merge_patch_follows_rfc_7396(target: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(target, patch) == expected


def test_merge_patch_does_not_touch_its_inputs() -> None:
    target = {"a": {"b": 1}, "list": [1]}
    patch = {"a": {"c": 2}, "list": [2]}
    result = merge_patch(target, patch)
    result["list"].append(3)
    assert target == {"a": {"b": 1}, "list": [1]}
    assert patch == {"a": {"c": 2}, "list": [2]}


def test_mirrors_round_trip() -> None:
    state, metadata = show_mirrors({"x": 1}, {"y": 2}, 40, "high")
    assert state == {"x": 1, "progress_percentage": 40}
    assert metadata == {"y": 2, "session_priority": "high"}
    assert strip_mirrors(state, metadata) == ({"x": 1}, {"y": 2})


def test_resolve_mirrored() -> None:
    field = ("progress_percentage", "session_state", "progress_percentage")
    assert resolve_mirrored({"progress_percentage": 5}, *field, current=1) == 5
    assert resolve_mirrored({"session_state": {"progress_percentage": 7}}, *field, current=1) == 7
    assert resolve_mirrored({}, *field, current=1) == 1
    assert resolve_mirrored({"progress_percentage": None}, *field, current=1) is None
    same = {"progress_percentage": 5, "session_state": {"progress_percentage": 5}}
    assert resolve_mirrored(same, *field, current=1) == 5
    with pytest.raises(ValidationFailed):
        resolve_mirrored(
            {"progress_percentage": 5, "session_state": {"progress_percentage": 6}},
            *field,
            current=1,
        )


def test_execution_steps() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    sequence = start_execution([], "A", now)
    sequence = start_execution(sequence, "B", now)
    assert [(s["agent_name"], s["execution_order"]) for s in sequence] == [("A", 1), ("B", 2)]
    before = [dict(s) for s in sequence]
    closed = close_current_execution(
        sequence, now=now, outcome="failed", output_summary="x", next_agent="C"
    )
    assert sequence == before  # the input is untouched
    assert closed[0]["status"] == "executing"  # only the newest running step closes
    assert (closed[1]["status"], closed[1]["output_summary"], closed[1]["next_agent"]) == (
        "failed",
        "x",
        "C",
    )
    assert (
        close_current_execution(
            closed, now=now, outcome="completed", output_summary=None, next_agent=None
        )[0]["status"]
        == "completed"
    )
