"""The right to be forgotten: after DELETE /v1/users/{id} no table holds the user's id,
their sessions' or memories' ids, or their content; replays of their webhook calls run
afresh; other users keep everything."""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.auth.principal import ADMIN
from app.clock import Clock, FrozenClock
from app.db.pool import Database
from app.erasure.service import ErasureService
from app.errors import ServiceUnavailable
from app.settings import DatabaseSettings
from tests.integration.helpers import assert_problem, create_session, create_user, if_match

ALL_EVENTS = [
    "session.expiring",
    "session.expired",
    "session.archived",
    "session.restored",
    "memory.purged",
]


@pytest.fixture
def clock(frozen_clock: FrozenClock) -> Clock:
    return frozen_clock


async def public_tables(conn: asyncpg.Connection) -> list[str]:
    """Every table in schema public, quoted, from the catalog: a table added later is
    searched too."""
    return [
        row["name"]
        for row in await conn.fetch(
            """SELECT format('%I.%I', n.nspname, c.relname) AS name
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')
               ORDER BY c.relname"""
        )
    ]


async def where_found(database_url: str, needles: dict[str, str]) -> dict[str, set[str]]:
    """For each needle, the tables with a row whose text holds it (any case, with or
    without the hyphens of a uuid)."""
    spellings = {
        name: {value.lower(), value.lower().replace("-", "")} for name, value in needles.items()
    }
    found: dict[str, set[str]] = {name: set() for name in needles}
    conn = await asyncpg.connect(database_url)
    try:
        for table in await public_tables(conn):
            # The name comes from the catalog, quoted by format('%I'): nothing else is spliced.
            rows = await conn.fetch(f"SELECT t::text AS row FROM {table} AS t")  # noqa: S608
            for row in rows:
                text = row["row"].lower()
                for name, forms in spellings.items():
                    if any(form in text for form in forms):
                        found[name].add(table.removeprefix("public."))
    finally:
        await conn.close()
    return found


async def fetch(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def run_job(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    response = await client.post(f"/v1/jobs/{name}/run")
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    assert run["status"] == "succeeded", run
    return run


async def test_erasing_a_user_leaves_no_trace_in_any_table(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, database_url: str
) -> None:
    marker = f"forget-me-{uuid.uuid4().hex}"
    user_id = await create_user(client, external_ref=marker)
    bystander = await create_user(client, external_ref="bystander")

    # Interaction patterns are archived after an hour, so the user has an archived memory.
    category = await client.put(
        "/v1/memory-categories/interaction_patterns",
        json={"retention_seconds": 3600, "default_access_level": "analytics_agents"},
    )
    assert category.status_code == 200, category.text
    subscribed = await client.post(
        "/v1/subscriptions", json={"url": "http://127.0.0.1:9/hook", "event_types": ALL_EVENTS}
    )
    assert subscribed.status_code == 201, subscribed.text

    # Sessions: create, patch, hand off, a message through the coordinator.
    main = await create_session(
        client,
        user_id=user_id,
        session_type="planning_session",
        session_state={"agent_outputs": {"Make_Plan_Agent": {"goal": marker}}},
    )
    sid = main["session_id"]
    patched = await client.patch(
        f"/v1/sessions/{sid}",
        json={"session_state": {"agent_outputs": {"Consult_Customer_Agent": marker}}},
        headers=if_match(1),
    )
    assert patched.status_code == 200, patched.text
    handoff = await client.post(
        f"/v1/sessions/{sid}/handoff",
        json={"to_agent": "Educate_Customer_Agent", "reason": f"asked {marker}", "base_version": 2},
    )
    assert handoff.status_code == 200, handoff.text
    message = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": f"what is a budget? {marker}"}
    )
    assert message.status_code == 200, message.text
    expiring = await create_session(client, user_id=user_id, ttl_seconds=3600)  # restored later
    archived = await create_session(client, user_id=user_id, ttl_seconds=3600)  # stays archived

    # Memories: write, read, list by user, by session, by content; the session context.
    written = await client.post(
        "/v1/memories",
        json={
            "user_id": user_id,
            "session_id": sid,
            "memory_type": "planning",
            "content": {"note": marker},
        },
    )
    assert written.status_code == 201, written.text
    memory_id = written.json()["memory_id"]
    pattern = await client.post(
        "/v1/memories",
        json={"user_id": user_id, "memory_type": "intent_session", "content": {"seen": marker}},
    )
    assert pattern.status_code == 201, pattern.text
    assert (await client.get(f"/v1/memories/{memory_id}")).status_code == 200
    for params in (
        {"user_id": user_id},
        {"session_id": sid},
        # No id in this query: only the content match can tell it is about the user.
        {"contains": json.dumps({"note": marker})},
    ):
        listed = await client.get("/v1/memories", params=params)
        assert memory_id in [m["memory_id"] for m in listed.json()["items"]], params
    assert (await client.get(f"/v1/sessions/{sid}/context")).status_code == 200

    # The n8n webhooks, with Idempotency-Key.
    coordination_call = {"user_id": user_id, "session_id": sid, "text": f"plan {marker}"}
    coordination_key = {"Idempotency-Key": f"coordination-{uuid.uuid4()}"}
    coordinated = await client.post(
        "/webhooks/n8n/coordination", json=coordination_call, headers=coordination_key
    )
    assert coordinated.status_code == 200, coordinated.text
    memory_call = {
        "agent_name": "Make_Plan_Agent",
        "user_id": user_id,
        "memory_type": "consultation",
        "memory_content": {"plan": marker},
    }
    memory_key = {"Idempotency-Key": f"memory-{uuid.uuid4()}"}
    hooked = await client.post("/webhooks/n8n/memory", json=memory_call, headers=memory_key)
    assert hooked.status_code == 200, hooked.text
    hooked_memory_id = hooked.json()["memory"]["memory_id"]
    query_call = {"action": "query", "agent_name": "Make_Plan_Agent", "user_id": user_id}
    queried = await client.post(
        "/webhooks/n8n/memory", json=query_call, headers={"Idempotency-Key": "query-1"}
    )
    assert queried.status_code == 200, queried.text
    replay = await client.post(
        "/webhooks/n8n/coordination", json=coordination_call, headers=coordination_key
    )
    assert replay.headers.get("Idempotent-Replayed") == "true"
    assert replay.json() == coordinated.json()

    # Someone else, who must keep everything.
    other = await create_session(
        client, user_id=bystander, session_state={"agent_outputs": {"x": "mine"}}
    )
    other_memory = await client.post(
        "/v1/memories",
        json={"user_id": bystander, "memory_type": "planning", "content": {"note": "mine"}},
    )
    assert other_memory.status_code == 201
    other_pattern = await client.post(
        "/v1/memories",
        json={"user_id": bystander, "memory_type": "intent_session", "content": {"seen": "mine"}},
    )
    assert other_pattern.status_code == 201  # archived with the user's: an event of their own
    other_call = {
        "agent_name": "Make_Plan_Agent",
        "user_id": bystander,
        "memory_type": "consultation",
        "memory_content": {"plan": "mine"},
    }
    other_key = {"Idempotency-Key": f"bystander-{uuid.uuid4()}"}
    other_hooked = await client.post("/webhooks/n8n/memory", json=other_call, headers=other_key)
    assert other_hooked.status_code == 200, other_hooked.text
    assert (await client.get("/v1/memories", params={"contains": '{"note": "mine"}'})).is_success

    # Events: warned, expired (both short sessions), one restored; patterns archived.
    frozen_clock.advance(timedelta(minutes=46))
    await run_job(client, "expiry_warning")
    frozen_clock.advance(timedelta(minutes=15))
    await run_job(client, "expiry_cleanup")
    await run_job(client, "memory_retention")
    restored = await client.post(f"/v1/sessions/{expiring['session_id']}/restore")
    assert restored.status_code == 200, restored.text
    # A failed run's error can quote a row it choked on; no request makes a job fail on
    # demand, so this one is written directly.
    await fetch(
        database_url,
        """INSERT INTO job_runs (job_name, trigger, status, claimed_by, started_at,
                                 lease_expires_at, finished_at, error)
           VALUES ('archival', 'manual', 'failed', 'test', now(), now(), now(), $1)""",
        f'ForeignKeyViolationError: Key (session_id)=({sid}) is not present in table "x"',
    )

    # A branch of the main session, with a version of its own.
    forked = await client.post(
        f"/v1/sessions/{sid}/branches", json={"name": "erase-me", "purpose": "analysis"}
    )
    assert forked.status_code == 201, forked.text
    branch_write = await client.patch(
        f"/v1/sessions/{sid}/branches/erase-me",
        json={"session_state": {"agent_outputs": {"branch": marker}}},
        headers={"If-Match": forked.headers["ETag"]},
    )
    assert branch_write.status_code == 200, branch_write.text

    needles = {
        "user id": user_id,
        "marker": marker,
        "main session": sid,
        "restored session": expiring["session_id"],
        "archived session": archived["session_id"],
        "memory": memory_id,
        "webhook memory": hooked_memory_id,
        "archived memory": pattern.json()["memory_id"],
    }
    before = await where_found(database_url, needles)
    events_before = await fetch(
        database_url,
        """SELECT e.event_id, e.payload::text AS payload,
                  (SELECT count(*) FROM event_deliveries d WHERE d.event_id = e.event_id) AS sent
           FROM outbox_events e""",
    )
    theirs = [e for e in events_before if any(i in e["payload"] for i in needles.values())]
    others = {e["event_id"] for e in events_before} - {e["event_id"] for e in theirs}
    assert others, "a bystander's event must be there to survive"
    # Every feature left a copy somewhere, or this test would prove little.
    assert set().union(*before.values()) >= {
        "users",
        "session_coordination",
        "session_state_versions",
        "coordination_decisions",
        "session_branches",
        "session_branch_versions",
        "session_archive",
        "memories",
        "memory_archive",
        "memory_access_log",
        "idempotency_keys",
        "outbox_events",
        "job_runs",
    }, before

    erased = await client.delete(f"/v1/users/{user_id}")
    assert erased.status_code == 200, erased.text

    after = await where_found(database_url, needles)
    assert after == {name: set() for name in needles}, f"left behind: {after}"

    body = erased.json()
    erasure_id = body["erasure_id"]
    assert body["user_id"] == user_id
    assert body["sessions_deleted"] == 2
    deleted, redacted = body["deleted"], body["redacted"]
    assert deleted["users"] == 1
    assert deleted["session_coordination"] == 2
    assert deleted["session_archive"] == 1
    assert deleted["memories"] == 2
    assert deleted["memory_archive"] == 1
    assert deleted["coordination_decisions"] >= 2  # the message and the webhook's
    assert deleted["session_state_versions"] >= 4
    assert (deleted["session_branches"], deleted["session_branch_versions"]) == (1, 2)
    assert deleted["idempotency_keys"] == 3
    # Expiring x2, expired x2, restored, and whatever else names them (memory.purged does,
    # where it is sent per user); each has one delivery.
    assert deleted["outbox_events"] == len(theirs) >= 5
    assert deleted["event_deliveries"] == sum(e["sent"] for e in theirs)
    assert redacted["job_runs"] == 1
    # Three writes, a read, lists by user, session and content, the context, the webhook's
    # query; and the coordinator's own reads, however many it makes.
    assert redacted["memory_access_log"] >= 9

    # The erasure is on record under a hash of the id, and the audit trail says so.
    records = await fetch(database_url, "SELECT * FROM user_erasures")
    assert len(records) == 1
    assert bytes(records[0]["user_id_sha256"]) == hashlib.sha256(user_id.encode()).digest()
    assert str(records[0]["erasure_id"]) == erasure_id
    assert (records[0]["scope"], records[0]["erased_by"]) == ("user", "admin")
    assert json.loads(records[0]["counts"]) == {"deleted": deleted, "redacted": redacted}
    audit = (await client.get("/v1/audit/memory", params={"limit": 200})).json()["items"]
    assert audit[0]["action"] == "erase"
    assert audit[0]["query"] == {"erasure_id": erasure_id}
    assert audit[0]["rows"] == 3
    redactions = [e for e in audit if e["query"] == {"redacted_by_erasure": erasure_id}]
    assert len(redactions) == redacted["memory_access_log"]
    assert all(e["memory_id"] is None for e in redactions)

    # A replay after the erasure is a new request: the user is gone.
    for path, call, key in (
        ("/webhooks/n8n/coordination", coordination_call, coordination_key),
        ("/webhooks/n8n/memory", memory_call, memory_key),
    ):
        again = await client.post(path, json=call, headers=key)
        assert "Idempotent-Replayed" not in again.headers, path
        assert marker not in again.text
        assert 400 <= again.status_code < 500, again.text

    # The bystander keeps their session, memories, stored response, audit rows and events.
    assert (await client.get(f"/v1/sessions/{other['session_id']}")).status_code == 200
    kept = await client.get("/v1/memories", params={"user_id": bystander})
    assert [m["content"] for m in kept.json()["items"]] == [{"plan": "mine"}, {"note": "mine"}]
    other_replay = await client.post("/webhooks/n8n/memory", json=other_call, headers=other_key)
    assert other_replay.headers.get("Idempotent-Replayed") == "true"
    assert other_replay.json()["memory"]["memory_id"] == other_hooked.json()["memory"]["memory_id"]
    assert any(e["query"] and e["query"].get("contains") == '{"note": "mine"}' for e in audit)
    events = await fetch(database_url, "SELECT event_id FROM outbox_events")
    assert {e["event_id"] for e in events} == others


async def test_erasing_memories_removes_their_copies_and_keeps_the_user(
    client: httpx.AsyncClient, database_url: str
) -> None:
    marker = f"memory-only-{uuid.uuid4().hex}"
    user_id = await create_user(client)
    session = await create_session(client, user_id=user_id)
    call = {
        "agent_name": "Make_Plan_Agent",
        "user_id": user_id,
        "memory_type": "consultation",
        "memory_content": {"plan": marker},
    }
    key = {"Idempotency-Key": f"memory-{uuid.uuid4()}"}
    hooked = await client.post("/webhooks/n8n/memory", json=call, headers=key)
    assert hooked.status_code == 200, hooked.text
    memory_id = hooked.json()["memory"]["memory_id"]
    assert (await client.get(f"/v1/memories/{memory_id}")).status_code == 200
    listed = await client.get("/v1/memories", params={"contains": json.dumps({"plan": marker})})
    assert len(listed.json()["items"]) == 1
    coordination = await client.post(
        "/webhooks/n8n/coordination",
        json={"user_id": user_id, "session_id": session["session_id"], "text": "hello"},
        headers={"Idempotency-Key": f"hello-{uuid.uuid4()}"},
    )
    assert coordination.status_code == 200, coordination.text

    erased = await client.delete(f"/v1/users/{user_id}/memories")
    assert erased.status_code == 200, erased.text
    body = erased.json()
    assert (body["memories_deleted"], body["archived_deleted"]) == (1, 0)
    # The memory webhook's stored answer carried the memory; the coordination answer did not.
    assert body["deleted"]["idempotency_keys"] == 1
    assert body["redacted"]["memory_access_log"] == 3  # write, read, contains list

    after = await where_found(database_url, {"marker": marker, "memory": memory_id})
    assert after == {"marker": set(), "memory": set()}, after
    # The user and their session stay, and so does the audit trail naming the user.
    assert (await client.get(f"/v1/users/{user_id}")).status_code == 200
    assert (await client.get(f"/v1/sessions/{session['session_id']}")).status_code == 200
    audit = (await client.get("/v1/audit/memory")).json()["items"]
    assert audit[0]["action"] == "erase"
    assert audit[0]["query"] == {"user_id": user_id, "erasure_id": body["erasure_id"]}
    records = await fetch(database_url, "SELECT scope FROM user_erasures")
    assert [r["scope"] for r in records] == ["memories"]

    again = await client.post("/webhooks/n8n/memory", json=call, headers=key)
    assert "Idempotent-Replayed" not in again.headers
    assert again.json()["memory"]["memory_id"] != memory_id  # written anew

    assert_problem(await client.delete(f"/v1/users/{uuid.uuid4()}/memories"), 404)


async def test_an_erasure_is_all_or_nothing_and_its_scans_have_their_own_time_limit(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, database_url: str
) -> None:
    user_id = await create_user(client)
    session = await create_session(client, user_id=user_id)
    written = await client.post(
        "/v1/memories", json={"user_id": user_id, "memory_type": "planning", "content": {}}
    )
    memory_id = written.json()["memory_id"]
    database = Database(database_url, DatabaseSettings(pool_max_size=2, command_timeout=0.5))
    await database.open()
    holder = await asyncpg.connect(database_url)
    try:
        # Someone holds the audit row of the write: the erasure's audit scan has to wait.
        await holder.execute("BEGIN")
        await holder.execute(
            "SELECT 1 FROM memory_access_log WHERE memory_id = $1 FOR UPDATE", uuid.UUID(memory_id)
        )
        impatient = ErasureService(database, frozen_clock, scan_timeout=0.2)
        with pytest.raises(ServiceUnavailable):
            await impatient.erase_user(uuid.UUID(user_id), ADMIN)
        # Nothing of it happened.
        assert (await client.get(f"/v1/users/{user_id}")).status_code == 200
        assert (await client.get(f"/v1/sessions/{session['session_id']}")).status_code == 200
        assert (await client.get(f"/v1/memories/{memory_id}")).status_code == 200
        assert await fetch(database_url, "SELECT 1 FROM user_erasures") == []

        # With room for its scans, it outwaits the command timeout (0.5 s) and succeeds.
        async def release_later() -> None:
            await asyncio.sleep(1)
            await holder.execute("ROLLBACK")

        release = asyncio.create_task(release_later())
        patient = ErasureService(database, frozen_clock, scan_timeout=30)
        erased = await patient.erase_user(uuid.UUID(user_id), ADMIN)
        await release
        assert erased.deleted["memories"] == 1
        assert_problem(await client.get(f"/v1/users/{user_id}"), 404)
    finally:
        await holder.close()
        await database.close()
