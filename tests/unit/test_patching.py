"""A PATCH validated where it touches the session gives what validating the whole session
after the patch gave: the same stored columns for every patch the whole accepts, the same
422 for every patch it refuses (app/sessions/patching.py). The reference below is the
PATCH as it was before, validating the whole editable view."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.common.validation import MAX_JSON_DEPTH, validate_input
from app.errors import ValidationFailed
from app.sessions.patching import _OPEN_OBJECTS, patched
from app.sessions.schemas import (
    CoordinationMetadata,
    PatchedContent,
    Session,
    SessionEditable,
    SessionState,
)
from app.sessions.state import evolve, merge_patch, resolve_mirrored, show_mirrors, storage_json

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)

# Stored as the service stores them: every field, defaults filled in (SessionState's dump).
EMPTY_STATE: dict[str, Any] = {
    "active_process": None,
    "conversation_context": {"summary": None, "last_intent": None, "topics": [], "turn_count": 0},
    "pending_actions": [],
    "agent_outputs": {},
    "user_preferences": {
        "language": None,
        "communication_style": None,
        "notification_channel": None,
        "timezone": None,
    },
}
FULL_STATE: dict[str, Any] = {
    **EMPTY_STATE,
    "active_process": "onboarding",
    "conversation_context": {
        "summary": "s",
        "last_intent": "plan",
        "topics": ["a", "b"],
        "turn_count": 4,
        "mood": {"calm": True},
    },
    "pending_actions": [
        {
            "id": "p1",
            "type": "call_back",
            "description": None,
            "priority_score": 10,
            "status": "pending",
            "created_at": "2026-11-01T12:00:00Z",
            "attempts": 0,
            "reason": None,
            "claimed_at": None,
        }
    ],
    "agent_outputs": {"plan": {"steps": [1, {"deep": [2]}]}, "flag": False, "n": 1.5},
}
EMPTY_METADATA: dict[str, Any] = {
    "complexity_score": None,
    "estimated_completion_time": None,
    "resource_requirements": [],
}
FULL_METADATA: dict[str, Any] = {
    "complexity_score": 12.5,
    "estimated_completion_time": 300,
    "resource_requirements": ["gpu", "db"],
}


def session(
    state: dict[str, Any],
    metadata: dict[str, Any],
    *,
    status: str = "active",
    progress: int = 20,
    priority: str = "high",
) -> Session:
    """A session as the repository reads it: the mirrored copies shown."""
    shown_state, shown_metadata = show_mirrors(state, metadata, progress, priority)
    return Session(
        session_id=uuid.UUID(int=1),
        user_id=uuid.UUID(int=2),
        session_type="multi_agent_chat",
        status=status,
        priority=priority,
        current_agent="Make_Plan_Agent",
        agent_sequence=[{"agent_name": "A", "execution_order": 1, "status": "completed"}],
        session_state=shown_state,
        coordination_metadata=shown_metadata,
        progress_percentage=progress,
        preserve=False,
        version=3,
        created_at=NOW,
        updated_at=NOW,
        last_activity_at=NOW,
        expires_at=NOW,
        completed_at=NOW if status == "completed" else None,
    )


def whole(current: Session, patch: dict[str, Any]) -> tuple[Any, ...]:
    """The PATCH before: the whole editable view validated after the patch (what it
    stores), or its 422 (detail and fields)."""
    view = {
        "session_state": current.session_state,
        "coordination_metadata": current.coordination_metadata,
        "progress_percentage": current.progress_percentage,
        "priority": current.priority,
        "current_agent": current.current_agent,
        "preserve": current.preserve,
        "status": "active" if current.status == "completed" else current.status,
    }
    merged = merge_patch(view, patch)
    try:
        merged["progress_percentage"] = resolve_mirrored(
            patch,
            "progress_percentage",
            "session_state",
            "progress_percentage",
            current.progress_percentage,
        )
        merged["priority"] = resolve_mirrored(
            patch, "priority", "coordination_metadata", "session_priority", current.priority
        )
        editable = validate_input(SessionEditable, merged, what="session after this patch")
    except ValidationFailed as exc:
        return ("422", exc.detail, exc.extensions.get("errors"))
    return (
        evolve(editable.session_state, progress_percentage=None).model_dump(
            mode="json", exclude={"progress_percentage"}
        ),
        evolve(editable.coordination_metadata, session_priority=None).model_dump(
            mode="json", exclude={"session_priority"}
        ),
        editable.current_agent,
        editable.progress_percentage,
        editable.priority,
        editable.preserve,
        current.status if current.status == "completed" else editable.status,
    )


def now_(current: Session, patch: dict[str, Any]) -> tuple[Any, ...]:
    """This PATCH: what it stores, or its 422."""
    try:
        content = patched(current, patch)
    except ValidationFailed as exc:
        return ("422", exc.detail, exc.extensions.get("errors"))
    state, sequence, metadata = storage_json(content)
    assert sequence == current.agent_sequence
    return (
        state,
        metadata,
        content.current_agent,
        content.progress_percentage,
        content.priority,
        content.preserve,
        content.status,
    )


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"n": value}
    return value


PATCHES: list[dict[str, Any]] = [
    {},
    {"priority": "low"},
    {"progress_percentage": 0},
    {"session_state": {"progress_percentage": 55}},
    {"coordination_metadata": {"session_priority": "urgent"}},
    {"progress_percentage": 60, "session_state": {"progress_percentage": 61}},
    {"current_agent": None},
    {"current_agent": "x" * 101},
    {"preserve": True},
    {"preserve": None},
    {"status": "idle"},
    {"status": None},
    {"status": "completed"},
    {"session_state": {"agent_outputs": {"bench": 1}}},
    {"session_state": {"agent_outputs": {"plan": {"steps": None, "more": [3]}}}},
    {"session_state": {"agent_outputs": {"plan": None, "flag": None}}},
    {"session_state": {"agent_outputs": [1]}},
    {"session_state": {"agent_outputs": None}},
    {"session_state": {"agent_outputs": {"x": nested(MAX_JSON_DEPTH - 2)}}},
    {"session_state": {"agent_outputs": {"x": nested(MAX_JSON_DEPTH - 1)}}},
    {"session_state": {"agent_outputs": {"plan": {"x": nested(MAX_JSON_DEPTH - 3)}}}},
    {"session_state": {"agent_outputs": {"plan": {"x": nested(MAX_JSON_DEPTH - 2)}}}},
    {"session_state": {"user_preferences": {"theme": nested(MAX_JSON_DEPTH)}}},
    {"session_state": {"conversation_context": {"turn_count": None, "mood": None}}},
    {"session_state": {"conversation_context": {"turn_count": "3"}}},
    {"session_state": {"conversation_context": None}},
    {"session_state": {"conversation_context": {"summary": "y" * 4001}}},
    {"session_state": {"pending_actions": [{"type": "t"}]}},
    {"session_state": {"pending_actions": [{"type": "t", "task_id": "k", "status": "done"}]}},
    {"session_state": {"pending_actions": [{"no_type": True}]}},
    {"session_state": {"pending_actions": [{"type": "t"}] * 1001}},
    {"session_state": {"pending_actions": None}},
    {"session_state": {"active_process": 5, "mystery": 1}},
    {"session_state": {"mystery": None}},
    {"session_state": {"active_process": None}},
    {"session_state": None},
    {"session_state": [1]},
    {"session_state": "x"},
    {"coordination_metadata": None},
    {"coordination_metadata": 3},
    {"coordination_metadata": {"complexity_score": 7}},
    {"coordination_metadata": {"complexity_score": "high", "estimated_completion_time": -1}},
    {"coordination_metadata": {"resource_requirements": ["r"] * 101}},
    {"coordination_metadata": {"resource_requirements": [nested(3)]}},
    {"coordination_metadata": {"mystery": {"deep": nested(300)}}},
    {
        "status": "expired",
        "priority": "meh",
        "progress_percentage": 101,
        "coordination_metadata": {"estimated_completion_time": -1},
        "session_state": {"active_process": 5},
    },
]
SESSIONS = {
    "empty": session(EMPTY_STATE, EMPTY_METADATA),
    "full": session(FULL_STATE, FULL_METADATA, priority="normal", progress=0),
    "idle": session(FULL_STATE, EMPTY_METADATA, status="idle"),
    "completed": session(EMPTY_STATE, FULL_METADATA, status="completed"),
}


@pytest.mark.parametrize("name", SESSIONS)
@pytest.mark.parametrize("patch", PATCHES)
def test_a_patch_stores_or_refuses_what_validating_the_whole_did(
    name: str, patch: dict[str, Any]
) -> None:
    current = SESSIONS[name]
    if current.status == "completed" and set(patch) - {"preserve"}:
        pytest.skip("a completed session takes only preserve (409, tested through the API)")
    assert now_(current, patch) == whole(current, patch)


def test_a_patch_of_a_member_takes_the_lean_path_and_carries_the_rest() -> None:
    """Not validated whole: the stored members it does not name are the very objects read."""
    current = SESSIONS["full"]
    content = patched(current, {"session_state": {"agent_outputs": {"bench": 1}}})
    assert isinstance(content, PatchedContent)
    assert content.session_state["pending_actions"] is current.session_state["pending_actions"]
    outputs = content.session_state["agent_outputs"]
    assert outputs["plan"] is current.session_state["agent_outputs"]["plan"]
    assert outputs["bench"] == 1
    assert (
        content.coordination_metadata["resource_requirements"]
        is (current.coordination_metadata["resource_requirements"])
    )


def test_a_stored_member_a_rule_now_refuses_is_carried_until_a_patch_names_it() -> None:
    state = {**FULL_STATE, "pending_actions": [{"type": "x", "description": "d" * 5000}]}
    current = session(state, FULL_METADATA)
    content = patched(current, {"priority": "low"})
    assert storage_json(content)[0]["pending_actions"] == state["pending_actions"]
    with pytest.raises(ValidationFailed) as refused:
        patched(current, {"session_state": {"pending_actions": state["pending_actions"]}})
    assert refused.value.extensions["errors"] == [
        {
            "field": "session_state.pending_actions.0.description",
            "message": "String should have at most 4000 characters",
        }
    ]


# JSON values a patch may hold, and patches of the members' members built from them.
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 200),
    st.floats(-1, 1, allow_nan=False),
    st.text(max_size=4),
)
_values = st.recursive(
    _leaves,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "n", "type"]), inner, max_size=3)
    ),
    max_leaves=8,
)
_state_members = st.sampled_from(
    [
        "active_process",
        "conversation_context",
        "pending_actions",
        "agent_outputs",
        "user_preferences",
        "progress_percentage",
        "mystery",
    ]
)
_metadata_members = st.sampled_from(
    [
        "session_priority",
        "complexity_score",
        "estimated_completion_time",
        "resource_requirements",
        "mystery",
    ]
)
_patches = st.fixed_dictionaries(
    {},
    optional={
        "session_state": st.dictionaries(_state_members, _values, max_size=3) | _values,
        "coordination_metadata": st.dictionaries(_metadata_members, _values, max_size=3),
        "progress_percentage": st.none() | st.integers(-1, 101) | st.text(max_size=2),
        "priority": st.sampled_from([None, "low", "urgent", "meh"]),
        "current_agent": st.none() | st.text(max_size=3),
        "preserve": st.none() | st.booleans() | st.integers(0, 1),
        "status": st.sampled_from([None, "active", "idle", "completed"]),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(patch=_patches, name=st.sampled_from(["empty", "full", "idle"]))
def test_any_patch_stores_or_refuses_what_validating_the_whole_did(
    patch: dict[str, Any], name: str
) -> None:
    current = SESSIONS[name]
    assert now_(current, patch) == whole(current, patch)


def test_the_lean_path_knows_every_rule_that_spans_members() -> None:
    """A PATCH validates only the members it names, which is sound while no rule of the
    session's models looks at two members at once: the only model-level rule is the depth
    check, which the lean path makes on the patch itself. A new model validator (or a
    constraint on agent_outputs) must be looked at here before the lean path trusts it."""
    assert list(SessionState.__pydantic_decorators__.model_validators) == ["_bounded_depth"]
    assert list(CoordinationMetadata.__pydantic_decorators__.model_validators) == []
    assert sorted(_OPEN_OBJECTS) == ["agent_outputs"]
