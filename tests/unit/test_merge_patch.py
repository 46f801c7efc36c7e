"""Session content rules: RFC 7396 merge patch, the mirrored fields, execution steps."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from app.errors import ValidationFailed
from app.sessions.sequence import EMPTY, AgentSequence, sequence_of
from app.sessions.state import (
    close_current_execution,
    merge_patch,
    resolve_mirrored,
    show_mirrors,
    start_execution,
    strip_mirrors,
)

NOW = datetime(2026, 11, 1, 12, 30, tzinfo=UTC)

# RFC 7396, Appendix A ("Example Test Cases"), in order: original, patch, result.
RFC_7396_APPENDIX_A: list[tuple[Any, Any, Any]] = [
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


@pytest.mark.parametrize(
    ("original", "patch", "expected"),
    RFC_7396_APPENDIX_A,
    ids=[f"appendix-a-{number}" for number in range(1, len(RFC_7396_APPENDIX_A) + 1)],
)
def test_merge_patch_matches_rfc_7396_appendix_a(original: Any, patch: Any, expected: Any) -> None:
    assert merge_patch(original, patch) == expected


@pytest.mark.parametrize(("original", "patch", "expected"), RFC_7396_APPENDIX_A)
def test_merge_patch_leaves_its_inputs_untouched(original: Any, patch: Any, expected: Any) -> None:
    original_before, patch_before = copy.deepcopy(original), copy.deepcopy(patch)
    merge_patch(original, patch)
    assert original == original_before
    assert patch == patch_before


def test_merge_patch_leaves_nested_inputs_untouched() -> None:
    original = {"keep": {"deep": [1, 2]}, "change": {"x": 1, "y": 2}, "drop": {"z": 3}}
    patch = {"change": {"x": None, "w": {"new": [4]}}, "drop": None, "list": [5]}
    original_before, patch_before = copy.deepcopy(original), copy.deepcopy(patch)

    result = merge_patch(original, patch)

    assert result == {
        "keep": {"deep": [1, 2]},
        "change": {"y": 2, "w": {"new": [4]}},
        "list": [5],
    }
    assert original == original_before
    assert patch == patch_before


def test_merge_patch_result_does_not_share_values_with_the_patch() -> None:
    patch: dict[str, Any] = {"list": [1], "obj": {"inner": [2]}}
    result = merge_patch({}, patch)
    result["list"].append("changed")
    result["obj"]["inner"].append("changed")
    assert patch == {"list": [1], "obj": {"inner": [2]}}


def test_show_mirrors_copies_progress_and_priority_in() -> None:
    state, metadata = {"step": "intro"}, {"channel": "web"}
    shown_state, shown_metadata = show_mirrors(state, metadata, 40, "high")
    assert shown_state == {"step": "intro", "progress_percentage": 40}
    assert shown_metadata == {"channel": "web", "session_priority": "high"}
    assert (state, metadata) == ({"step": "intro"}, {"channel": "web"})


@pytest.mark.parametrize(
    ("state", "metadata"),
    [
        ({}, {}),
        ({"step": "intro", "nested": {"a": [1]}}, {"channel": "web"}),
        ({"progress": "not the mirror"}, {"priority": "not the mirror either"}),
    ],
)
def test_strip_mirrors_undoes_show_mirrors(state: dict[str, Any], metadata: dict[str, Any]) -> None:
    shown = show_mirrors(state, metadata, 75, "urgent")
    assert strip_mirrors(*shown) == (state, metadata)


def test_strip_mirrors_removes_only_the_mirrored_keys() -> None:
    state = {"progress_percentage": 10, "session_priority": "kept in state"}
    metadata = {"session_priority": "low", "progress_percentage": "kept in metadata"}
    assert strip_mirrors(state, metadata) == (
        {"session_priority": "kept in state"},
        {"progress_percentage": "kept in metadata"},
    )
    assert state == {"progress_percentage": 10, "session_priority": "kept in state"}


PROGRESS = ("progress_percentage", "session_state", "progress_percentage")
PRIORITY = ("priority", "coordination_metadata", "session_priority")


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"progress_percentage": 60}, 60),  # outer only
        ({"session_state": {"progress_percentage": 70}}, 70),  # inner used
        ({"progress_percentage": 60, "session_state": {"progress_percentage": 60}}, 60),
        ({"progress_percentage": 60, "session_state": {"other": 1}}, 60),
        ({"progress_percentage": 60, "session_state": {"progress_percentage": None}}, 60),
        ({"progress_percentage": 0}, 0),  # a falsy value is still a value
        ({"session_state": {"progress_percentage": 0}}, 0),
        ({}, 25),  # untouched: the current value stays
        ({"session_state": {"other": 1}}, 25),
        ({"session_state": {"progress_percentage": None}}, 25),  # removing the mirror only
        ({"session_state": None}, 25),
        ({"progress_percentage": None}, None),  # explicit null: validation names it
    ],
)
def test_resolve_mirrored_progress(patch: dict[str, Any], expected: Any) -> None:
    assert resolve_mirrored(patch, *PROGRESS, current=25) == expected


def test_resolve_mirrored_priority_inner_used() -> None:
    patch = {"coordination_metadata": {"session_priority": "urgent"}}
    assert resolve_mirrored(patch, *PRIORITY, current="normal") == "urgent"


@pytest.mark.parametrize(
    ("args", "patch"),
    [
        (PROGRESS, {"progress_percentage": 60, "session_state": {"progress_percentage": 61}}),
        (PRIORITY, {"priority": "high", "coordination_metadata": {"session_priority": "low"}}),
    ],
)
def test_resolve_mirrored_rejects_disagreement(
    args: tuple[str, str, str], patch: dict[str, Any]
) -> None:
    with pytest.raises(ValidationFailed) as raised:
        resolve_mirrored(patch, *args, current=None)
    _, container, inner = args
    assert raised.value.extensions["errors"][0]["field"] == f"{container}.{inner}"
    assert raised.value.status == 422


def steps(*raw: dict[str, Any]) -> AgentSequence:
    """A sequence as a session row holds it (its steps typed where they are read)."""
    return AgentSequence.stored(list(raw))


def plain(sequence: AgentSequence) -> list[dict[str, Any]]:
    """Steps as JSON, leaving out the fields never set."""
    return [step.model_dump(mode="json", exclude_none=True) for step in sequence]


def sequence_of_steps() -> AgentSequence:
    """A handoff history: one finished step, an older step left running, the current one."""
    return steps(
        {"agent_name": "A", "execution_order": 1, "status": "completed"},
        {"agent_name": "B", "execution_order": 2, "status": "executing"},
        {"agent_name": "C", "execution_order": 3, "status": "pending"},
        {"agent_name": "D", "execution_order": 4, "status": "failed"},
    )


def test_close_current_execution_closes_only_the_newest_running_step() -> None:
    sequence = sequence_of_steps()
    before = plain(sequence)

    closed = close_current_execution(
        sequence, now=NOW, outcome="completed", output_summary="done", next_agent="E"
    )

    assert plain(sequence) == before
    assert plain(closed[:2]) == before[:2]
    assert plain(closed)[3] == before[3]
    assert plain(closed)[2] == {
        "agent_name": "C",
        "execution_order": 3,
        "status": "completed",
        "completion_time": "2026-11-01T12:30:00Z",
        "output_summary": "done",
        "next_agent": "E",
    }


def test_close_current_execution_omits_absent_summary_and_next_agent() -> None:
    sequence = steps({"agent_name": "A", "execution_order": 1, "status": "executing"})
    closed = close_current_execution(
        sequence, now=NOW, outcome="failed", output_summary=None, next_agent=None
    )
    assert plain(closed) == [
        {
            "agent_name": "A",
            "execution_order": 1,
            "status": "failed",
            "completion_time": "2026-11-01T12:30:00Z",
        }
    ]
    assert plain(sequence) == [{"agent_name": "A", "execution_order": 1, "status": "executing"}]


def test_close_current_execution_without_a_running_step_changes_nothing() -> None:
    sequence = steps({"agent_name": "A", "execution_order": 1, "status": "completed"})
    closed = close_current_execution(
        sequence, now=NOW, outcome="failed", output_summary="x", next_agent="B"
    )
    assert closed == sequence
    assert closed is not sequence
    assert (
        close_current_execution(
            EMPTY, now=NOW, outcome="failed", output_summary=None, next_agent=None
        )
        == EMPTY
    )


def test_closing_twice_walks_back_through_running_steps() -> None:
    once = close_current_execution(
        sequence_of_steps(), now=NOW, outcome="completed", output_summary=None, next_agent=None
    )
    twice = close_current_execution(
        once, now=NOW, outcome="failed", output_summary=None, next_agent=None
    )
    assert [step.status for step in twice] == ["completed", "failed", "completed", "failed"]


def test_start_execution_appends_the_next_order() -> None:
    sequence = sequence_of_steps()
    before = plain(sequence)

    started = start_execution(sequence, "E", NOW)

    assert plain(sequence) == before
    assert plain(started[:-1]) == before
    assert plain(started)[-1] == {
        "agent_name": "E",
        "execution_order": 5,
        "status": "executing",
        "start_time": "2026-11-01T12:30:00Z",
    }


def test_start_execution_numbers_from_one_and_increments() -> None:
    sequence = start_execution(EMPTY, "A", NOW)
    sequence = start_execution(sequence, "B", NOW)
    sequence = start_execution(sequence, "C", NOW)
    assert [(step.agent_name, step.execution_order) for step in sequence] == [
        ("A", 1),
        ("B", 2),
        ("C", 3),
    ]


def test_start_execution_follows_the_highest_order_not_the_length() -> None:
    # Orders need not be dense or sorted (history may have been trimmed or reordered).
    sequence = steps(
        {"agent_name": "A", "execution_order": 7, "status": "completed"},
        {"agent_name": "B", "execution_order": 3, "status": "completed"},
    )
    assert start_execution(sequence, "C", NOW)[-1].execution_order == 8


def test_handoff_closes_then_starts() -> None:
    sequence = start_execution(EMPTY, "A", NOW)
    later = datetime(2026, 11, 1, 12, 31, tzinfo=UTC)
    handed_off = start_execution(
        close_current_execution(
            sequence, now=later, outcome="completed", output_summary="ok", next_agent="B"
        ),
        "B",
        later,
    )
    assert [(s.agent_name, s.status, s.execution_order) for s in handed_off] == [
        ("A", "completed", 1),
        ("B", "executing", 2),
    ]
    assert sequence[0].status == "executing"


def test_a_stored_step_that_is_not_valid_is_a_422_naming_it() -> None:
    with pytest.raises(ValidationFailed) as raised:
        sequence_of([{"agent_name": "", "execution_order": 1, "status": "completed"}])
    assert raised.value.extensions["errors"][0]["field"] == "agent_sequence.0.agent_name"
