"""Every rule a PATCH of a session enforces, pinned through the API: the status, the
problem's detail and the fields it names, nothing written; and what a valid PATCH stores
(every field of the seed's shape, the defaults filled in). Written against the PATCH that
validated the whole session after every patch, so they hold the one that validates what
the patch touches (app/sessions/service.py, ``patched``) to the same answers."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import httpx
import orjson
import pytest

from app.common.validation import MAX_JSON_DEPTH
from tests.integration.helpers import (
    assert_problem,
    create_session,
    if_match,
    store_content_a_rule_now_refuses,
)

INVALID = "The session after this patch is not valid."
NESTED_TOO_DEEP = f"Value error, nested more than {MAX_JSON_DEPTH} levels deep"


def nested(levels: int) -> Any:
    """A value ``levels`` objects deep."""
    value: Any = "leaf"
    for _ in range(levels):
        value = {"n": value}
    return value


async def stored_content(database_url: str, sid: str) -> dict[str, Any]:
    """The session's content columns as PostgreSQL holds them (no mirrored copies)."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT session_state::text AS state, coordination_metadata::text AS metadata "
            "FROM session_coordination WHERE session_id = $1",
            UUID(sid),
        )
    finally:
        await conn.close()
    assert row is not None
    return {"state": orjson.loads(row["state"]), "metadata": orjson.loads(row["metadata"])}


STORED = {
    "session_state": {
        "active_process": "onboarding",
        "conversation_context": {"summary": "s", "topics": ["a"], "turn_count": 2, "mood": "ok"},
        "pending_actions": [{"type": "call_back", "id": "p1"}],
        "agent_outputs": {"plan": {"steps": [1, 2]}, "keep": True},
        "user_preferences": {"language": "de", "theme": "dark"},
    },
    "coordination_metadata": {"complexity_score": 3.5, "resource_requirements": ["gpu"]},
    "progress_percentage": 20,
    "priority": "high",
    "current_agent": "Make_Plan_Agent",
}

# (patch, the fields the 422 names in order, with their messages)
REFUSED: list[tuple[str, dict[str, Any], list[dict[str, str]]]] = [
    (
        "progress-above-100",
        {"progress_percentage": 101},
        [{"field": "progress_percentage", "message": "Input should be less than or equal to 100"}],
    ),
    (
        "progress-below-0",
        {"progress_percentage": -1},
        [
            {
                "field": "progress_percentage",
                "message": "Input should be greater than or equal to 0",
            }
        ],
    ),
    (
        "progress-as-text",
        {"progress_percentage": "50"},
        [{"field": "progress_percentage", "message": "Input should be a valid integer"}],
    ),
    (
        "progress-null",
        {"progress_percentage": None},
        [{"field": "progress_percentage", "message": "Input should be a valid integer"}],
    ),
    (
        "progress-through-the-mirror-above-100",
        {"session_state": {"progress_percentage": 101}},
        [
            {
                "field": "session_state.progress_percentage",
                "message": "Input should be less than or equal to 100",
            },
            {
                "field": "progress_percentage",
                "message": "Input should be less than or equal to 100",
            },
        ],
    ),
    (
        "priority-unknown",
        {"priority": "meh"},
        [{"field": "priority", "message": "Input should be 'low', 'normal', 'high' or 'urgent'"}],
    ),
    (
        "priority-null",
        {"priority": None},
        [{"field": "priority", "message": "Input should be 'low', 'normal', 'high' or 'urgent'"}],
    ),
    (
        "priority-through-the-mirror",
        {"coordination_metadata": {"session_priority": "meh"}},
        [
            {
                "field": "coordination_metadata.session_priority",
                "message": "Input should be 'low', 'normal', 'high' or 'urgent'",
            },
            {"field": "priority", "message": "Input should be 'low', 'normal', 'high' or 'urgent'"},
        ],
    ),
    (
        "status-completed",
        {"status": "completed"},
        [{"field": "status", "message": "Input should be 'active', 'idle' or 'escalated'"}],
    ),
    (
        "status-null",
        {"status": None},
        [{"field": "status", "message": "Field required"}],
    ),
    (
        "preserve-null",
        {"preserve": None},
        [{"field": "preserve", "message": "Field required"}],
    ),
    (
        "preserve-as-number",
        {"preserve": 1},
        [{"field": "preserve", "message": "Input should be a valid boolean"}],
    ),
    (
        "current-agent-empty",
        {"current_agent": ""},
        [{"field": "current_agent", "message": "String should have at least 1 character"}],
    ),
    (
        "current-agent-too-long",
        {"current_agent": "a" * 101},
        [{"field": "current_agent", "message": "String should have at most 100 characters"}],
    ),
    (
        "state-not-an-object",
        {"session_state": [1]},
        [
            {
                "field": "session_state",
                "message": "Input should be an object",
            }
        ],
    ),
    (
        "state-unknown-key",
        {"session_state": {"mystery": 1}},
        [{"field": "session_state.mystery", "message": "Extra inputs are not permitted"}],
    ),
    (
        "state-turn-count-as-text",
        {"session_state": {"conversation_context": {"turn_count": "3"}}},
        [
            {
                "field": "session_state.conversation_context.turn_count",
                "message": "Input should be a valid integer",
            }
        ],
    ),
    (
        "state-pending-action-without-type",
        {"session_state": {"pending_actions": [{"no_type": True}]}},
        [{"field": "session_state.pending_actions.0.type", "message": "Field required"}],
    ),
    (
        "state-too-many-pending-actions",
        {"session_state": {"pending_actions": [{"type": "t"}] * 1001}},
        [
            {
                "field": "session_state.pending_actions",
                "message": "List should have at most 1000 items after validation, not 1001",
            }
        ],
    ),
    (
        "state-agent-outputs-not-an-object",
        {"session_state": {"agent_outputs": [1]}},
        [{"field": "session_state.agent_outputs", "message": "Input should be an object"}],
    ),
    (
        "state-nested-past-the-limit",
        {"session_state": {"agent_outputs": {"x": nested(MAX_JSON_DEPTH - 1)}}},
        [{"field": "session_state", "message": NESTED_TOO_DEEP}],
    ),
    (
        "state-nested-past-the-limit-inside-a-stored-object",
        {"session_state": {"agent_outputs": {"plan": {"deeper": nested(MAX_JSON_DEPTH - 2)}}}},
        [{"field": "session_state", "message": NESTED_TOO_DEEP}],
    ),
    (
        "state-nested-past-the-limit-in-an-open-model",
        {"session_state": {"user_preferences": {"extra": nested(MAX_JSON_DEPTH - 1)}}},
        [{"field": "session_state", "message": NESTED_TOO_DEEP}],
    ),
    (
        "metadata-score-as-text",
        {"coordination_metadata": {"complexity_score": "high"}},
        [
            {
                "field": "coordination_metadata.complexity_score",
                "message": "Input should be a valid number",
            }
        ],
    ),
    (
        "metadata-too-many-resources",
        {"coordination_metadata": {"resource_requirements": ["r"] * 101}},
        [
            {
                "field": "coordination_metadata.resource_requirements",
                "message": "List should have at most 100 items after validation, not 101",
            }
        ],
    ),
    (
        "metadata-unknown-key",
        {"coordination_metadata": {"mystery": 1}},
        [{"field": "coordination_metadata.mystery", "message": "Extra inputs are not permitted"}],
    ),
    (
        "several-at-once-in-field-order",
        {
            "status": "expired",
            "priority": "meh",
            "progress_percentage": 101,
            "coordination_metadata": {"estimated_completion_time": -1},
            "session_state": {"active_process": 5},
        },
        [
            {"field": "session_state.active_process", "message": "Input should be a valid string"},
            {
                "field": "coordination_metadata.estimated_completion_time",
                "message": "Input should be greater than or equal to 0",
            },
            {
                "field": "progress_percentage",
                "message": "Input should be less than or equal to 100",
            },
            {"field": "priority", "message": "Input should be 'low', 'normal', 'high' or 'urgent'"},
            {"field": "status", "message": "Input should be 'active', 'idle' or 'escalated'"},
        ],
    ),
]


@pytest.mark.parametrize(
    ("patch", "errors"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED]
)
async def test_a_patch_that_breaks_a_rule_is_422_naming_the_fields_and_writes_nothing(
    client: httpx.AsyncClient,
    database_url: str,
    patch: dict[str, Any],
    errors: list[dict[str, str]],
) -> None:
    session = await create_session(client, **STORED)
    url = f"/v1/sessions/{session['session_id']}"
    before = await stored_content(database_url, session["session_id"])
    body = assert_problem(await client.patch(url, json=patch, headers=if_match(1)), 422)
    assert body["detail"] == INVALID
    assert body["errors"] == errors
    assert (await client.get(url)).json() == session
    assert await stored_content(database_url, session["session_id"]) == before


@pytest.mark.parametrize(
    ("patch", "inner"),
    [
        (
            {"progress_percentage": 60, "session_state": {"progress_percentage": 61}},
            ("progress_percentage", "session_state.progress_percentage"),
        ),
        (
            {"priority": "low", "coordination_metadata": {"session_priority": "urgent"}},
            ("priority", "coordination_metadata.session_priority"),
        ),
    ],
)
async def test_mirrored_fields_that_disagree_are_422(
    client: httpx.AsyncClient, patch: dict[str, Any], inner: tuple[str, str]
) -> None:
    session = await create_session(client, **STORED)
    url = f"/v1/sessions/{session['session_id']}"
    body = assert_problem(await client.patch(url, json=patch, headers=if_match(1)), 422)
    assert body["detail"] == f"{inner[0]} and {inner[1]} are the same value and must agree."
    assert body["errors"] == [{"field": inner[1], "message": f"differs from {inner[0]}"}]
    assert (await client.get(url)).json() == session


async def test_a_completed_session_takes_only_preserve(client: httpx.AsyncClient) -> None:
    session = await create_session(client, **STORED)
    url = f"/v1/sessions/{session['session_id']}"
    completed = await client.post(f"{url}/complete", headers=if_match(1))
    assert completed.status_code == 200, completed.text
    for patch in (
        {"priority": "low"},
        {"session_state": {"agent_outputs": {"x": 1}}},
        {"preserve": True, "status": "active"},
    ):
        body = assert_problem(await client.patch(url, json=patch, headers={"If-Match": "*"}), 409)
        assert body["session_status"] == "completed"
        assert "only preserve can change" in body["detail"]
    kept = await client.patch(url, json={"preserve": True}, headers={"If-Match": "*"})
    assert kept.status_code == 200, kept.text
    assert (kept.json()["status"], kept.json()["preserve"]) == ("completed", True)
    assert kept.json()["session_state"] == completed.json()["session_state"]


async def test_an_escalated_session_keeps_its_status_through_a_patch(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client, **STORED)
    url = f"/v1/sessions/{session['session_id']}"
    escalated = await client.patch(url, json={"status": "escalated"}, headers=if_match(1))
    assert escalated.status_code == 200, escalated.text
    for status in ("active", "idle", None):
        body = assert_problem(
            await client.patch(url, json={"status": status}, headers=if_match(2)), 409
        )
        assert body["session_status"] == "escalated"
        assert "/resolve" in body["detail"]
    changed = await client.patch(
        url, json={"priority": "urgent", "status": "escalated"}, headers=if_match(2)
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["status"], changed.json()["priority"]) == ("escalated", "urgent")


async def test_null_removes_a_key_and_a_field_falls_back_to_its_default(
    client: httpx.AsyncClient, database_url: str
) -> None:
    session = await create_session(client, **STORED)
    sid = session["session_id"]
    response = await client.patch(
        f"/v1/sessions/{sid}",
        json={
            "session_state": {
                "active_process": None,
                "conversation_context": {"turn_count": None, "mood": None},
                "pending_actions": None,
                "agent_outputs": {"keep": None},
            },
            "coordination_metadata": {"resource_requirements": None},
            "current_agent": None,
        },
        headers=if_match(1),
    )
    assert response.status_code == 200, response.text
    assert await stored_content(database_url, sid) == {
        "state": {
            "active_process": None,
            "conversation_context": {
                "summary": "s",
                "last_intent": None,
                "topics": ["a"],
                "turn_count": 0,
            },
            "pending_actions": [],
            "agent_outputs": {"plan": {"steps": [1, 2]}},
            "user_preferences": {
                "language": "de",
                "communication_style": None,
                "notification_channel": None,
                "timezone": None,
                "theme": "dark",
            },
        },
        "metadata": {
            "complexity_score": 3.5,
            "estimated_completion_time": None,
            "resource_requirements": [],
        },
    }
    body = response.json()
    assert body["current_agent"] is None
    assert (body["progress_percentage"], body["priority"]) == (20, "high")
    assert body["session_state"]["progress_percentage"] == 20
    assert body["coordination_metadata"]["session_priority"] == "high"
    whole = await client.patch(
        f"/v1/sessions/{sid}",
        json={"session_state": None, "coordination_metadata": None},
        headers=if_match(2),
    )
    assert whole.status_code == 200, whole.text
    assert (await stored_content(database_url, sid))["state"] == {
        "active_process": None,
        "conversation_context": {
            "summary": None,
            "last_intent": None,
            "topics": [],
            "turn_count": 0,
        },
        "pending_actions": [],
        "agent_outputs": {},
        "user_preferences": {
            "language": None,
            "communication_style": None,
            "notification_channel": None,
            "timezone": None,
        },
    }
    assert (whole.json()["progress_percentage"], whole.json()["priority"]) == (20, "high")


async def test_a_patch_stores_what_it_adds_with_every_default_filled_in(
    client: httpx.AsyncClient, database_url: str
) -> None:
    session = await create_session(client, **STORED)
    sid = session["session_id"]
    response = await client.patch(
        f"/v1/sessions/{sid}",
        json={
            "session_state": {
                "pending_actions": [{"type": "follow_up", "created_at": "2026-11-01T12:00:00Z"}],
                "progress_percentage": 45,
            },
            "coordination_metadata": {"session_priority": "urgent", "complexity_score": 7},
        },
        headers=if_match(1),
    )
    assert response.status_code == 200, response.text
    stored = await stored_content(database_url, sid)
    assert stored["state"]["pending_actions"] == [
        {
            "id": None,
            "type": "follow_up",
            "description": None,
            "priority_score": 0,
            "status": "pending",
            "created_at": "2026-11-01T12:00:00Z",
            "attempts": 0,
            "reason": None,
            "claimed_at": None,
        }
    ]
    assert "progress_percentage" not in stored["state"]
    assert stored["metadata"] == {
        "complexity_score": 7.0,
        "estimated_completion_time": None,
        "resource_requirements": ["gpu"],
    }
    body = response.json()
    assert (body["progress_percentage"], body["priority"]) == (45, "urgent")
    assert body["session_state"]["agent_outputs"] == STORED["session_state"]["agent_outputs"]


async def test_nesting_up_to_the_limit_inside_stored_objects_is_stored(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client, **STORED)
    url = f"/v1/sessions/{session['session_id']}"
    # session_state -> agent_outputs -> plan -> deeper: four levels above the value.
    fits = {"session_state": {"agent_outputs": {"plan": {"deeper": nested(MAX_JSON_DEPTH - 4)}}}}
    assert (await client.patch(url, json=fits, headers=if_match(1))).status_code == 200
    # A later patch of another key leaves the deep value as it is.
    again = await client.patch(
        url, json={"session_state": {"agent_outputs": {"k": 1}}}, headers=if_match(2)
    )
    assert again.status_code == 200, again.text
    assert again.json()["session_state"]["agent_outputs"]["plan"]["deeper"] == nested(
        MAX_JSON_DEPTH - 4
    )


async def test_content_stored_before_a_rule_tightened_is_carried_until_a_patch_touches_it(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """A pending action an older version stored (a 5,000-character description) does not
    refuse a PATCH of something else; a PATCH that touches the pending actions is
    validated, and a 422 names the stored field."""
    session = await create_session(client, **STORED)
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    await store_content_a_rule_now_refuses(database_url, sid)
    stored_actions = (await stored_content(database_url, sid))["state"]["pending_actions"]

    other = await client.patch(
        url,
        json={"priority": "low", "session_state": {"agent_outputs": {"x": 1}}},
        headers=if_match(1),
    )
    assert other.status_code == 200, other.text
    assert (await stored_content(database_url, sid))["state"]["pending_actions"] == stored_actions

    touching = await client.patch(
        url, json={"session_state": {"pending_actions": stored_actions}}, headers=if_match(2)
    )
    body = assert_problem(touching, 422)
    assert body["errors"] == [
        {
            "field": "session_state.pending_actions.0.description",
            "message": "String should have at most 4000 characters",
        }
    ]
    repaired = await client.patch(
        url, json={"session_state": {"pending_actions": []}}, headers=if_match(2)
    )
    assert repaired.status_code == 200, repaired.text
