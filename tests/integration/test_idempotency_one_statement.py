"""The memory webhook writes a new memory under its Idempotency-Key in one statement: the
key's claim, the memory with its audit row, and the stored answer commit together (issue
22). No claim of such a write is ever seen in progress: a resend that comes while the
first runs waits on the key's index entry for the first to end, then is answered with
what it stored, or takes the key over if it rolled back. The faults are real: triggers that
slow, fail or end the connection of the first statement, a replica's presence lock held
(or not) on a connection of its own."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import asyncpg
import httpx

from app.webhooks.idempotency import request_hash
from tests.integration.helpers import (
    assert_problem,
    create_user,
    drop_the_connection_at_the_seal,
    seal_drops,
)

MEMORY = "/webhooks/n8n/memory"


def write_of(user_id: str, content: Any) -> dict[str, Any]:
    """The benchmark's webhook write: a new memory, no key, for the caller itself."""
    return {
        "user_id": user_id,
        "agent_name": "Collect_Create_Data_Agent",
        "memory_type": "data_collection",
        "memory_content": content,
    }


async def first_memory_insert_stalls(database_url: str, seconds: float, then_fails: bool) -> None:
    """The first memory inserted with a "stall" field in its content sleeps ``seconds``
    inside its statement (and then fails it, if ``then_fails``); the others go through."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """
            CREATE SEQUENCE stalled_inserts;
            CREATE TABLE stall (seconds float8 NOT NULL, then_fails boolean NOT NULL);
            CREATE FUNCTION stall_first_insert() RETURNS trigger LANGUAGE plpgsql AS $$
            DECLARE s stall;
            BEGIN
              IF NEW.content ? 'stall' AND nextval('stalled_inserts') = 1 THEN
                SELECT * INTO s FROM stall;
                PERFORM pg_sleep(s.seconds);
                IF s.then_fails THEN
                  RAISE EXCEPTION 'the first insert failed';
                END IF;
              END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER stall_first_insert BEFORE INSERT ON memories FOR EACH ROW
              EXECUTE FUNCTION stall_first_insert();
            """
        )
        await conn.execute("INSERT INTO stall VALUES ($1, $2)", seconds, then_fails)
    finally:
        await conn.close()


async def until_stalled(database_url: str) -> None:
    """Returns once a backend sleeps in the stalled insert (the first request is in flight,
    its claim written and not committed)."""
    conn = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + 10
        while not await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
        ):
            assert time.monotonic() < deadline, "the first request never reached its insert"
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


async def counts(database_url: str, key: str) -> tuple[int, int, tuple[Any, ...] | None]:
    """Memories, their audit rows, and the key's (status, response_status)."""
    conn = await asyncpg.connect(database_url)
    try:
        memories = await conn.fetchval("SELECT count(*) FROM memories")
        audited = await conn.fetchval(
            "SELECT count(*) FROM memory_access_log WHERE action = 'write'"
        )
        row = await conn.fetchrow(
            "SELECT status, response_status FROM idempotency_keys WHERE key = $1", key
        )
    finally:
        await conn.close()
    return memories, audited, None if row is None else tuple(row)


async def test_a_resend_while_the_first_runs_waits_for_it_and_gets_its_answer(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """Before, the claim committed on its own first and a resend meanwhile got 409 (retry
    in a second); now the resends wait the first's statement out and are answered."""
    user = await create_user(client)
    await first_memory_insert_stalls(database_url, 0.5, then_fails=False)
    body = write_of(user, {"stall": 1})
    headers = {"Idempotency-Key": "in-flight"}
    first = asyncio.create_task(client.post(MEMORY, json=body, headers=headers))
    await until_stalled(database_url)

    resends = await asyncio.gather(
        *(client.post(MEMORY, json=body, headers=headers) for _ in range(3))
    )
    answer = await first

    assert answer.status_code == 200, answer.text
    assert "idempotent-replayed" not in answer.headers
    for resend in resends:
        assert resend.status_code == 200, resend.text
        assert resend.headers["idempotent-replayed"] == "true"
        assert resend.json() == answer.json()
    assert await counts(database_url, "in-flight") == (1, 1, ("completed", 200))


async def test_a_resend_behind_a_first_that_rolled_back_takes_the_key_and_writes_once(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """The first statement fails after claiming (a trigger raises in its insert): its
    claim never commits, so the resend waiting on the key claims it and writes."""
    user = await create_user(client)
    await first_memory_insert_stalls(database_url, 0.5, then_fails=True)
    body = write_of(user, {"stall": 1})
    headers = {"Idempotency-Key": "rolled-back"}
    first = asyncio.create_task(client.post(MEMORY, json=body, headers=headers))
    await until_stalled(database_url)

    resend = await client.post(MEMORY, json=body, headers=headers)
    failed = await first

    assert failed.status_code == 500, failed.text
    assert resend.status_code == 200, resend.text
    assert "idempotent-replayed" not in resend.headers
    assert await counts(database_url, "rolled-back") == (1, 1, ("completed", 200))
    replay = await client.post(MEMORY, json=body, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == resend.json()


async def test_a_connection_ended_at_the_seal_leaves_nothing_and_the_retry_writes_once(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """PostgreSQL ends the connection inside the statement, as it stores the answer: the
    claim, the memory and its audit row go with it, and the key is free at once."""
    user = await create_user(client)
    await drop_the_connection_at_the_seal(database_url, "ended-%")
    body = write_of(user, {"n": 1})
    headers = {"Idempotency-Key": "ended-1"}

    failed = await client.post(MEMORY, json=body, headers=headers)

    assert failed.status_code >= 500, failed.text
    assert await seal_drops(database_url) == 1
    assert await counts(database_url, "ended-1") == (0, 0, None)
    retry = await client.post(MEMORY, json=body, headers=headers)
    assert retry.status_code == 200, retry.text
    assert "idempotent-replayed" not in retry.headers
    assert await counts(database_url, "ended-1") == (1, 1, ("completed", 200))
    replay = await client.post(MEMORY, json=body, headers=headers)
    assert replay.headers["idempotent-replayed"] == "true"
    assert replay.json() == retry.json()


async def hold_claim(
    conn: asyncpg.Connection, key: str, body: dict[str, Any], owner: str, renewed_ago: float
) -> None:
    """An in-progress claim of the admin's on the memory webhook, as a replica named
    ``owner`` would have written it, last renewed ``renewed_ago`` seconds ago."""
    await conn.execute(
        "INSERT INTO idempotency_keys (principal, key, endpoint, request_hash, status,"
        " created_at, expires_at, lease_owner, lease_token, lease_expires_at,"
        " lease_renewed_at) VALUES ('admin', $1, $2, $3, 'in_progress', now(),"
        " now() + interval '1 day', $4, gen_random_uuid(), now() + interval '10 seconds',"
        " now() - $5::interval)",
        key,
        MEMORY,
        request_hash(MEMORY, body),
        owner,
        timedelta(seconds=renewed_ago),
    )


async def test_a_live_holders_claim_is_409_and_a_dead_ones_is_taken_over_by_the_write(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """A claim written by the two-step protocol (a named memory, or a replica of before)
    keeps its rules: while its replica lives, 409; once it is gone and stopped renewing,
    the one-statement write takes the key over and writes."""
    user = await create_user(client)
    body = write_of(user, {"n": 2})
    headers = {"Idempotency-Key": "held"}
    holder = await asyncpg.connect(database_url)  # the other replica's presence connection
    try:
        assert await holder.fetchval(
            "SELECT pg_try_advisory_lock(replica_lock_space(), hashtext('replica-h'))"
        )
        await hold_claim(holder, "held", body, "replica-h", renewed_ago=5)
        repeat = await client.post(MEMORY, json=body, headers=headers)
        problem = assert_problem(repeat, 409)
        assert "still being processed" in problem["detail"]
        assert repeat.headers["retry-after"] == "1"
    finally:
        await holder.close()  # replica-h's process ends
    retry = await client.post(MEMORY, json=body, headers=headers)
    assert retry.status_code == 200, retry.text
    assert await counts(database_url, "held") == (1, 1, ("completed", 200))


async def test_a_refusal_of_the_one_statement_write_is_stored_and_replayed(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """The statement claims the key and writes nothing (an unknown memory type): the
    request is then refused as any other, and the refusal is the answer stored."""
    user = await create_user(client)
    body = {**write_of(user, {"n": 3}), "memory_type": "no_such_type"}
    headers = {"Idempotency-Key": "refused"}
    first = await client.post(MEMORY, json=body, headers=headers)
    second = await client.post(MEMORY, json=body, headers=headers)
    assert_problem(first, 422)
    assert second.status_code == 422
    assert second.headers["idempotent-replayed"] == "true"
    assert second.json() == first.json()
    assert await counts(database_url, "refused") == (0, 0, ("completed", 422))

    reused = await client.post(MEMORY, json=write_of(user, {"n": 4}), headers=headers)
    assert assert_problem(reused, 422)["errors"][0]["field"] == "idempotency_key"
