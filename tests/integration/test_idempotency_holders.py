"""Who holds an Idempotency-Key in progress, and when a retry may take it over.

A key in progress is held by its request's claim: the claim names its replica, whose
presence lock dies with the process, and carries a lease renewed while the request runs.
A retry while the holder lives gets 409 with Retry-After; a retry after the holder died
runs at once; a holder that is alive but stopped renewing loses the key after its lease.
The holders here are real: a server process killed with SIGKILL, slow agents on 127.0.0.1,
raw connections that hold (or drop) a replica's presence lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.auth.principal import ADMIN
from app.clock import SystemClock
from app.db.pool import Connection, Database
from app.errors import Conflict
from app.memories.schemas import Memory, MemoryWrite
from app.memories.service import MemoryService
from app.settings import DatabaseSettings, MemorySettings, Settings, WebhookSettings
from app.webhooks.idempotency import IdempotencyService, Seal, request_hash
from bench.serve import spawn
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED
from tests.integration.helpers import (
    assert_problem,
    create_user,
    drop_the_connection_at_the_seal,
    seal_drops,
)

LEASE = timedelta(seconds=1)
COORDINATION = "/webhooks/n8n/coordination"
MESSAGE = {"user_ref": "telegram:7", "text": "make me a budget"}


@pytest.fixture
def settings() -> Settings:
    # A short lease, so a test can outlive it; renewed every third of it.
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        webhooks=WebhookSettings(idempotency_lease=LEASE),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


async def plan_agent_at(client: httpx.AsyncClient, agent: AgentServer) -> None:
    """Messages about a budget go to Make_Plan_Agent: let it be the slow agent."""
    response = await client.patch(
        "/v1/agents/Make_Plan_Agent",
        json={"url": agent.url, "timeout_ms": 60000, "retry_attempts": 0},
    )
    assert response.status_code == 200, response.text


async def wait_for(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def key_row(url: str, key: str) -> dict[str, Any]:
    """The key's row as JSON (whatever columns the schema has)."""
    conn = await asyncpg.connect(url)
    try:
        row: str | None = await conn.fetchval(
            "SELECT to_jsonb(k)::text FROM idempotency_keys k WHERE key = $1", key
        )
    finally:
        await conn.close()
    assert row is not None, f"no key {key}"
    found: dict[str, Any] = json.loads(row)
    return found


async def test_a_retry_after_the_holders_process_was_killed_runs_within_seconds(
    client: httpx.AsyncClient, database_url: str, agent: AgentServer
) -> None:
    """The original never finished and never will: its key must not block the retry."""
    await plan_agent_at(client, agent)
    agent.behaviour = "hang"
    env = {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
        "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",  # the agent is on 127.0.0.1
    }
    process, port = await asyncio.to_thread(spawn, "switchboard", env)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "Idempotency-Key": "exec-killed"}
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as other:
            original = asyncio.create_task(
                other.post(COORDINATION, json=MESSAGE, headers=headers, timeout=60)
            )
            await wait_for(lambda: len(agent.requests) == 1)  # claimed, waiting on the agent
            held = await key_row(database_url, "exec-killed")
            assert held["status"] == "in_progress"
            os.kill(process.pid, signal.SIGKILL)
            killed = time.monotonic()
            with pytest.raises(httpx.HTTPError):
                await original
    finally:
        process.kill()
        process.wait(timeout=10)

    agent.behaviour = "ok"
    # PostgreSQL drops a killed process's presence lock within milliseconds (its sockets
    # close with it); the claim goes once its lease has also gone unrenewed for
    # RENEWAL_GRACE: a client retrying as Retry-After says is through within seconds.
    while True:
        retry = await client.post(COORDINATION, json=MESSAGE, headers=headers)
        recovered = time.monotonic() - killed
        if retry.status_code != 409 or recovered > 5.0:
            break
        assert retry.headers["retry-after"] == "1"
        await asyncio.sleep(0.2)
    assert retry.status_code == 200, retry.text
    assert "idempotent-replayed" not in retry.headers
    assert retry.json()["agent"] == "Make_Plan_Agent"
    assert retry.json()["degraded"] is False
    # Its process's presence, not the dead claim's lease (15 s by default), freed the key.
    assert recovered < 2.5 + 1.5  # the grace (2.5 renewals of 1 s), and a retry's pause
    assert datetime.fromisoformat(held["lease_expires_at"]).timestamp() - time.time() > 5
    replay = await client.post(COORDINATION, json=MESSAGE, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == retry.json()


async def test_a_retry_while_the_first_request_runs_gets_409_then_its_stored_answer(
    client: httpx.AsyncClient, database_url: str, agent: AgentServer
) -> None:
    """Longer than the lease: the running request renews it, so the retry still waits."""
    await plan_agent_at(client, agent)
    release = asyncio.Event()

    async def slow() -> None:
        await release.wait()

    agent.before_reply = slow
    headers = {"Idempotency-Key": "exec-slow"}
    first = asyncio.create_task(client.post(COORDINATION, json=MESSAGE, headers=headers))
    await wait_for(lambda: len(agent.requests) == 1)
    await asyncio.sleep(2.5 * LEASE.total_seconds())

    repeat = await client.post(COORDINATION, json=MESSAGE, headers=headers)
    problem = assert_problem(repeat, 409)
    assert "still being processed" in problem["detail"]
    assert problem["retryable"] is True
    assert repeat.headers["retry-after"] == "1"
    assert len(agent.requests) == 1  # the repeat did not run

    release.set()
    answer = await first
    assert answer.status_code == 200, answer.text
    replay = await client.post(COORDINATION, json=MESSAGE, headers=headers)
    assert replay.status_code == 200
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == answer.json()
    assert len(agent.requests) == 1
    assert (await key_row(database_url, "exec-slow"))["status"] == "completed"


async def insert_claim(
    conn: asyncpg.Connection,
    key: str,
    body: dict[str, Any],
    owner: str,
    lease: timedelta,
    full_lease: timedelta = timedelta(seconds=15),
) -> None:
    """An in-progress claim of the admin's, as a replica named ``owner`` would write it:
    ``lease`` left of a ``full_lease`` (so it was last renewed full_lease - lease ago)."""
    await conn.execute(
        "INSERT INTO idempotency_keys (principal, key, endpoint, request_hash, status,"
        " created_at, expires_at, lease_owner, lease_token, lease_expires_at,"
        " lease_renewed_at) VALUES ('admin', $1, '/webhooks/n8n/cleanup', $2, 'in_progress',"
        " now(), now() + interval '1 day', $3, gen_random_uuid(), now() + $4,"
        " now() + $4 - $5::interval)",
        key,
        request_hash("/webhooks/n8n/cleanup", body),
        owner,
        lease,
        full_lease,
    )


async def test_a_live_replica_that_stops_renewing_loses_the_key_after_its_lease(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """A frozen or cut-off replica keeps its presence lock; the lease bounds the wait."""
    body = {"dry_run": True}
    headers = {"Idempotency-Key": "frozen"}
    holder = await asyncpg.connect(database_url)
    try:
        assert await holder.fetchval(
            "SELECT pg_try_advisory_lock(replica_lock_space(), hashtext('replica-frozen'))"
        )
        await insert_claim(holder, "frozen", body, "replica-frozen", timedelta(seconds=1.5))
        assert_problem(await client.post("/webhooks/n8n/cleanup", json=body, headers=headers), 409)
        await asyncio.sleep(1.6)
        retry = await client.post("/webhooks/n8n/cleanup", json=body, headers=headers)
        assert retry.status_code == 200, retry.text
    finally:
        await holder.close()


async def test_a_claim_written_before_leases_keeps_its_12_minutes(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """A replica that predates revision 0012 (a rolling upgrade) writes no owner or lease:
    its claim keeps the 12 minutes it would have waited, then is free."""
    body = {"dry_run": True}
    headers = {"Idempotency-Key": "old-replica"}
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO idempotency_keys (principal, key, endpoint, request_hash, status,"
            " created_at, expires_at) VALUES ('admin', 'old-replica', '/webhooks/n8n/cleanup',"
            " $1, 'in_progress', now(), now() + interval '1 day')",
            request_hash("/webhooks/n8n/cleanup", body),
        )
        assert_problem(await client.post("/webhooks/n8n/cleanup", json=body, headers=headers), 409)
        await conn.execute(
            "UPDATE idempotency_keys SET lease_expires_at = now() - interval '1 second'"
            " WHERE key = 'old-replica'"
        )
    finally:
        await conn.close()
    retry = await client.post("/webhooks/n8n/cleanup", json=body, headers=headers)
    assert retry.status_code == 200, retry.text


async def write_sealed(
    memories: MemoryService, user_id: str, seal: Seal
) -> tuple[int, dict[str, Any]]:
    """A handler's work: write one memory with its answer sealed in the write's transaction."""

    async def store(conn: Connection, stored: list[Memory]) -> None:
        await seal(conn, {"memory_id": str(stored[0].memory_id)})

    write = MemoryWrite(user_id=user_id, memory_type="data_collection", content=1)
    await memories.write([write], ADMIN, batch=False, before_commit=store)
    return 200, {"written": True}


async def test_a_write_whose_key_was_taken_over_meanwhile_is_rolled_back(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """The token fences the holder: a memory write sealed under a key another request took
    over is not made (that request makes it), and the other claim stays untouched."""
    user_id = await create_user(client)
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    try:
        service = IdempotencyService(database, SystemClock(), timedelta(hours=24), LEASE)
        memories = MemoryService(database, SystemClock(), MemorySettings())

        async def handler(seal: Seal | None) -> tuple[int, dict[str, Any]]:
            assert seal is not None
            async with database.connection() as conn:  # a retry took the key over
                await conn.execute(
                    "UPDATE idempotency_keys SET lease_token = gen_random_uuid(),"
                    " lease_owner = 'thief' WHERE key = 'exec-fenced'"
                )
            return await write_sealed(memories, user_id, seal)

        with pytest.raises(Conflict) as raised:
            await service.run("admin", "exec-fenced", "/webhooks/n8n/memory", {}, handler)
        assert "taken over" in raised.value.detail
        async with database.connection() as conn:
            assert await conn.fetchval("SELECT count(*) FROM memories") == 0
            row = await conn.fetchrow(
                "SELECT status, lease_owner FROM idempotency_keys WHERE key = 'exec-fenced'"
            )
            assert row is not None
            assert tuple(row) == ("in_progress", "thief")
    finally:
        await database.close()


async def test_a_refusal_at_the_commit_after_the_seal_is_the_answer_stored(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """The COMMIT of a sealed write can itself refuse (here a deferred check raising a data
    error, a 422): the seal rolls back with the write, so the refusal is stored in its place
    and a retry is answered with it. (While a claim counted as sealed before its commit,
    nothing was stored: the key stayed in progress and a retry got 409 until the lease ran
    out.)"""
    user_id = await create_user(client)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """
            CREATE SEQUENCE commit_refusals;
            CREATE FUNCTION refuse_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF nextval('commit_refusals') = 1 THEN
                RAISE EXCEPTION 'refused at commit' USING ERRCODE = 'numeric_value_out_of_range';
              END IF;
              RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER refuse_at_commit AFTER UPDATE ON idempotency_keys
              DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
              WHEN (NEW.status = 'completed' AND NEW.key = 'exec-refused')
              EXECUTE FUNCTION refuse_at_commit();
            """
        )
    finally:
        await conn.close()
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    try:
        service = IdempotencyService(database, SystemClock(), timedelta(hours=24), LEASE)
        memories = MemoryService(database, SystemClock(), MemorySettings())

        async def handler(seal: Seal | None) -> tuple[int, dict[str, Any]]:
            assert seal is not None
            return await write_sealed(memories, user_id, seal)

        first = await service.run("admin", "exec-refused", "/webhooks/n8n/memory", {}, handler)
        retry = await service.run("admin", "exec-refused", "/webhooks/n8n/memory", {}, handler)

        assert (first.status, first.problem, first.replayed) == (422, True, False)
        assert (retry.status, retry.replayed) == (422, True)
        assert retry.body == first.body
        async with database.connection() as conn:
            assert await conn.fetchval("SELECT count(*) FROM memories") == 0
            row = await conn.fetchrow(
                "SELECT status, response_status FROM idempotency_keys WHERE key = 'exec-refused'"
            )
            assert row is not None
            assert tuple(row) == ("completed", 422)
    finally:
        await database.close()


async def test_a_connection_lost_at_the_coordinations_seal_writes_no_turn_and_the_retry_runs(
    client: httpx.AsyncClient, database_url: str, agent: AgentServer
) -> None:
    """The coordination webhook's answer is stored in the transaction that writes the
    coordinator's turn: when PostgreSQL ends the connection right at the seal, neither is
    written and the key is free at once, so n8n's retry is coordinated, once (one
    decision), and answered again from then on. (Sealed after the turn's commit, as before,
    the turn stayed and the key was held until its lease ran out.)"""
    await plan_agent_at(client, agent)
    await drop_the_connection_at_the_seal(database_url, "exec-dropped")
    headers = {"Idempotency-Key": "exec-dropped"}

    failed = await client.post(COORDINATION, json=MESSAGE, headers=headers)

    assert failed.status_code >= 500, failed.text
    assert await seal_drops(database_url) == 1
    retry = await client.post(COORDINATION, json=MESSAGE, headers=headers)
    assert retry.status_code == 200, retry.text
    sid = retry.json()["session_id"]
    decided = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert [d["decision_id"] for d in decided] == [retry.json()["decision_id"]]
    replay = await client.post(COORDINATION, json=MESSAGE, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == retry.json()
    assert (await key_row(database_url, "exec-dropped"))["status"] == "completed"
