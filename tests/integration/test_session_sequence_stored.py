"""A write types only the agent steps it touches: the others are stored again exactly as
they were read (app/sessions/sequence.py), within the same cap as before."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import httpx
import orjson
import pytest

from app.settings import CoordinationSettings, DatabaseSettings, SessionSettings, Settings
from tests.integration.helpers import assert_problem, create_session

# Steps as an older writer stored them: an offset instead of "Z", an explicit null task
# and fields left out. Valid, but not what a re-dump writes ("Z", no task_id, every field).
OLD_DONE = {
    "agent_name": "Make_Plan_Agent",
    "execution_order": 1,
    "status": "completed",
    "start_time": "2026-11-01T12:00:00+00:00",
    "task_id": None,
}
OLD_OTHER = {"agent_name": "Make_Plan_Agent", "execution_order": 2, "status": "failed"}
OLD_RUNNING = {
    "agent_name": "Make_Plan_Agent",
    "execution_order": 3,
    "status": "executing",
    "start_time": "2026-11-01T12:01:00+00:00",
}
MERGE_PATCH = {"content-type": "application/merge-patch+json", "If-Match": "*"}


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        sessions=SessionSettings(agent_sequence_limit=3),
        coordination=CoordinationSettings(max_step_retries=100, max_consecutive_fallbacks=100),
    )


async def store_sequence(database_url: str, sid: str, steps: list[Any]) -> None:
    """Put ``steps`` in the session's column as they are, past the service."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE session_coordination SET agent_sequence = $2::jsonb WHERE session_id = $1",
            UUID(sid),
            orjson.dumps(steps).decode(),
        )
    finally:
        await conn.close()


async def stored_sequences(database_url: str, sid: str) -> tuple[list[Any], list[Any]]:
    """The session's column and its newest version row's, as PostgreSQL holds them."""
    conn = await asyncpg.connect(database_url)
    try:
        row = await conn.fetchrow(
            "SELECT s.agent_sequence::text AS now, v.agent_sequence::text AS recorded "
            "FROM session_coordination s JOIN session_state_versions v "
            "ON v.session_id = s.session_id AND v.version = s.version WHERE s.session_id = $1",
            UUID(sid),
        )
    finally:
        await conn.close()
    assert row is not None
    return orjson.loads(row["now"]), orjson.loads(row["recorded"])


async def test_a_message_stores_the_steps_it_does_not_touch_as_they_were(
    client: httpx.AsyncClient, database_url: str
) -> None:
    sid = (await create_session(client))["session_id"]
    await store_sequence(database_url, sid, [OLD_DONE, OLD_OTHER, OLD_RUNNING])

    answered = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": "what is compound interest"}
    )
    assert answered.status_code == 200, answered.text

    now, recorded = await stored_sequences(database_url, sid)
    assert now == recorded
    # The cap (3) drops the oldest; the untouched step is stored byte for byte (a re-dump
    # would write "Z" and every field); the running step the turn closed is typed and
    # written whole; the new step is numbered after the highest.
    untouched, closed, added = now
    assert untouched == OLD_OTHER
    assert closed == {
        **OLD_RUNNING,
        "start_time": "2026-11-01T12:01:00Z",
        "status": "completed",
        "completion_time": closed["completion_time"],
        "output_summary": None,
        "next_agent": added["agent_name"],
    }
    assert closed["completion_time"] is not None
    assert added["execution_order"] == 4
    session = (await client.get(f"/v1/sessions/{sid}")).json()
    assert session["agent_sequence"] == now

    # The next message touches none of the three (no step runs): all stay as stored.
    again = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": "what is compound interest"}
    )
    assert again.status_code == 200, again.text
    after, _ = await stored_sequences(database_url, sid)
    assert after[:2] == [closed, added]
    assert after[2]["execution_order"] == 5


async def test_a_patch_carries_the_sequence_unread(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """The sequence is not patchable, so a PATCH neither types nor rewrites it: not even a
    step stored before a rule tightened (an empty agent name), which no PATCH could repair."""
    sid = (await create_session(client))["session_id"]
    older = {**OLD_OTHER, "agent_name": ""}
    await store_sequence(database_url, sid, [OLD_DONE, older])

    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"progress_percentage": 40}, headers=MERGE_PATCH
    )
    assert patched.status_code == 200, patched.text

    now, recorded = await stored_sequences(database_url, sid)
    assert now == recorded == [OLD_DONE, older]
    assert patched.json()["agent_sequence"] == [OLD_DONE, older]


async def test_a_stored_step_a_message_cannot_read_is_a_422_naming_it(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """What a turn reads of every step (status, number, task) is checked on read: a step
    stored without a valid status is refused, naming it, and nothing is written."""
    session = await create_session(client)
    sid = session["session_id"]
    await store_sequence(database_url, sid, [OLD_DONE, {**OLD_OTHER, "status": "done"}])

    refused = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": "what is compound interest"}
    )
    problem = assert_problem(refused, 422)
    assert problem["errors"][0]["field"] == "agent_sequence.1.status"
    assert (await client.get(f"/v1/sessions/{sid}")).json()["version"] == session["version"]
