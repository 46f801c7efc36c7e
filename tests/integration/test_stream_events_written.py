"""The events the streams carry are written with the changes they describe: a session's
versions and handoffs, a task's transitions, a breaker's changes of state."""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import httpx

from tests.integration.helpers import create_session, if_match


async def events_of(database_url: str, event_type: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT payload::text FROM outbox_events WHERE event_type = $1"
            " ORDER BY created_at, event_id",
            event_type,
        )
    finally:
        await conn.close()
    return [json.loads(row[0]) for row in rows]


async def test_every_version_is_told_and_a_handoff_as_such(
    client: httpx.AsyncClient, database_url: str
) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"progress_percentage": 5}, headers=if_match(1)
    )
    assert patched.status_code == 200, patched.text
    handoff = await client.post(
        f"/v1/sessions/{sid}/handoff",
        json={"to_agent": "Make_Plan_Agent", "reason": "planning"},
        headers=if_match(2),
    )
    assert handoff.status_code == 200, handoff.text
    versions = await events_of(database_url, "session.version")
    assert [(e["session_id"], e["version"], e["change_reason"]) for e in versions] == [
        (sid, 1, "created"),
        (sid, 2, "patched"),
    ]
    assert versions[0]["user_id"] == session["user_id"]
    handoffs = await events_of(database_url, "session.handoff")
    assert [(e["version"], e["current_agent"]) for e in handoffs] == [(3, "Make_Plan_Agent")]
    # A refused write tells nothing.
    stale = await client.patch(
        f"/v1/sessions/{sid}", json={"progress_percentage": 6}, headers=if_match(1)
    )
    assert stale.status_code == 409
    assert len(await events_of(database_url, "session.version")) == 2


async def test_every_task_transition_is_told(client: httpx.AsyncClient, database_url: str) -> None:
    session = await create_session(client)
    submitted = await client.post(
        "/v1/tasks",
        json={
            "agent_name": "Make_Plan_Agent",
            "input": {"message": "hello"},
            "session_id": session["session_id"],
        },
    )
    assert submitted.status_code in (200, 201), submitted.text
    task_id = submitted.json()["task_id"]
    canceled = await client.post(f"/v1/tasks/{task_id}/cancel")
    assert canceled.status_code == 200, canceled.text
    told = [e for e in await events_of(database_url, "task.transition") if e["task_id"] == task_id]
    assert [(e["from_status"], e["to_status"]) for e in told] == [
        (None, "submitted"),
        ("submitted", "canceled"),
    ]
    assert {e["session_id"] for e in told} == {session["session_id"]}
    assert told[0]["agent_name"] == "Make_Plan_Agent"


async def test_a_breaker_change_of_state_is_told_once(
    client: httpx.AsyncClient, database_url: str
) -> None:
    url = "/v1/agents/Make_Plan_Agent/breaker"
    for state in ("open", "open", "closed"):
        response = await client.post(url, json={"state": state})
        assert response.status_code == 200, response.text
    told = await events_of(database_url, "breaker.changed")
    assert [(e["agent_name"], e["from_state"], e["state"]) for e in told] == [
        ("Make_Plan_Agent", None, "forced_open"),
        ("Make_Plan_Agent", "forced_open", "closed"),
    ]
