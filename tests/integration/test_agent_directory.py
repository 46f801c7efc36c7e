"""``AgentDirectory``: the agent list the coordinator routes by, kept per replica while it
can hear of changes, and dropped by any change to agents (through this replica's pool at
its commit, by the trigger's announcement; through another replica, when that one's NOTIFY
arrives; by plain SQL, when the trigger's own NOTIFY arrives)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from litestar import Litestar

from app.agents.directory import CHANNEL, AgentDirectory
from app.asgi import create_app
from app.db.pool import Database
from app.settings import CoordinationSettings, DatabaseSettings, Settings
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED, app_client, lifespan_of
from tests.integration.helpers import create_session

AN_HOUR = 3600.0


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def listening(directory: AgentDirectory, database: Database) -> None:
    """Until the directory keeps what it reads (its LISTEN connection is up)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        async with database.connection() as conn:
            await directory.agents(conn)
        if directory.kept() is not None:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the directory never kept the agents")


async def dropped(directory: AgentDirectory) -> None:
    """Until the directory has dropped its kept list."""
    deadline = time.monotonic() + 10
    while directory.kept() is not None:
        assert time.monotonic() < deadline, "the change was never heard of"
        await asyncio.sleep(0.01)


async def sql(database_url: str, statement: str, *args: Any) -> None:
    """``statement`` on a connection of its own: an operator, or another replica."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(statement, *args)
    finally:
        await conn.close()


async def test_kept_until_agents_change_in_the_table_however_they_change(
    database: Database, database_url: str
) -> None:
    directory = AgentDirectory(database, sync_interval=AN_HOUR)
    await directory.start()
    try:
        await listening(directory, database)
        kept = directory.kept()
        assert kept is not None
        assert {a.name for a in kept} >= {"Make_Plan_Agent", "Orchestrator_Agent"}

        # Plain SQL, as another replica's write or an operator's: the trigger tells.
        await sql(database_url, "UPDATE agents SET enabled = false WHERE name = 'Make_Plan_Agent'")
        await dropped(directory)
        async with database.connection() as conn:
            agents = {a.name: a for a in await directory.agents(conn)}
        assert agents["Make_Plan_Agent"].enabled is False

        await listening(directory, database)
        await sql(database_url, "INSERT INTO agents (name) VALUES ('Newcomer_Agent')")
        await dropped(directory)
        async with database.connection() as conn:
            assert "Newcomer_Agent" in {a.name for a in await directory.agents(conn)}

        await listening(directory, database)
        await sql(database_url, "DELETE FROM agents WHERE name = 'Newcomer_Agent'")
        await dropped(directory)
        async with database.connection() as conn:
            assert "Newcomer_Agent" not in {a.name for a in await directory.agents(conn)}
    finally:
        await directory.stop()


async def test_nothing_is_kept_while_changes_cannot_be_heard(database: Database) -> None:
    directory = AgentDirectory(database, sync_interval=AN_HOUR)  # never started
    async with database.connection() as conn:
        first = await directory.agents(conn)
    assert first
    assert directory.kept() is None


async def notifications(database_url: str) -> tuple[asyncpg.Connection[Any], list[str]]:
    """A LISTEN of its own on the directory's channel, and the payloads it hears."""
    heard: list[str] = []
    conn = await asyncpg.connect(database_url)
    await conn.add_listener(CHANNEL, lambda *args: heard.append(args[3]))
    return conn, heard


async def heard_within(heard: list[str], seconds: float) -> None:
    """Until ``heard`` holds something, then a moment for the other listeners."""
    deadline = time.monotonic() + seconds
    while not heard:
        assert time.monotonic() < deadline, "nothing was notified"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)


async def test_a_write_through_the_pool_drops_the_list_at_its_commit_without_a_notify_in_it(
    database: Database, database_url: str
) -> None:
    """No service drops the list by hand: the trigger announces, and the connection given
    back after the commit drops it. The one NOTIFY is the writer's own, sent after the
    commit (it carries the writer's origin); the statement sent none."""
    listen, heard = await notifications(database_url)
    directory = AgentDirectory(database, sync_interval=AN_HOUR)
    await directory.start()
    try:
        await listening(directory, database)
        async with database.transaction() as conn:
            await conn.execute("UPDATE agents SET enabled = false WHERE name = 'Make_Plan_Agent'")
            assert directory.kept() is not None  # not before the commit
        assert directory.kept() is None
        async with database.connection() as conn:
            agents = {a.name: a for a in await directory.agents(conn)}
        assert agents["Make_Plan_Agent"].enabled is False
        await heard_within(heard, 5)
        assert heard == [database.announcer.origin]
    finally:
        await directory.stop()
        await listen.close()


async def test_the_echo_of_its_own_notify_keeps_the_list(
    database: Database, database_url: str
) -> None:
    """The writer's process dropped the list at its commit: the echo of its NOTIFY (its
    origin) does not drop it again; anyone else's does."""
    listen, heard = await notifications(database_url)
    directory = AgentDirectory(database, sync_interval=AN_HOUR)
    await directory.start()
    try:
        await listening(directory, database)
        await sql(database_url, "SELECT pg_notify($1, $2)", CHANNEL, database.announcer.origin)
        await heard_within(heard, 5)
        assert directory.kept() is not None
        await sql(database_url, "SELECT pg_notify($1, 'elsewhere')", CHANNEL)
        await dropped(directory)
    finally:
        await directory.stop()
        await listen.close()


async def test_a_raw_write_notifies_in_its_statement(database_url: str) -> None:
    """psql or another tool hears no announcement: the trigger NOTIFYs for it."""
    listen, heard = await notifications(database_url)
    try:
        await sql(database_url, "UPDATE agents SET enabled = true WHERE name = 'Make_Plan_Agent'")
        await heard_within(heard, 5)
        assert heard == [""]
    finally:
        await listen.close()


def replica(database_url: str) -> Litestar:
    """One replica of the API on the test's database; the listeners re-read hourly, so
    only a notification (or a change made through the replica) is what drops the list."""
    settings = Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=4),
        coordination=CoordinationSettings(
            breaker_sync_seconds=AN_HOUR,
            # Messages answered by fallbacks while a notification is on its way: no escalation.
            max_step_retries=1000,
            max_consecutive_fallbacks=1000,
        ),
        outbound=LOOPBACK_ALLOWED,
    )
    return create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
        run_worker=False,
    )


async def test_the_next_message_sees_an_agent_switched_off_on_another_replica(
    database_url: str,
) -> None:
    """Two replicas: one routes a plan to Make_Plan_Agent (and keeps the agents); the other
    switches the agent off; the first one's next message no longer routes to it."""
    here, there = replica(database_url), replica(database_url)
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with (
        lifespan_of(here),
        lifespan_of(there),
        app_client(here, headers) as client,
        app_client(there, headers) as other,
    ):
        session = await create_session(client)
        sid = session["session_id"]

        async def routed() -> str:
            answer = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "make a plan"})
            assert answer.status_code == 200, answer.text
            agent: str = answer.json()["agent"]
            return agent

        assert await routed() == "Make_Plan_Agent"
        assert await routed() == "Make_Plan_Agent"  # read from the kept list
        switched = await other.patch("/v1/agents/Make_Plan_Agent", json={"enabled": False})
        assert switched.status_code == 200, switched.text
        deadline = time.monotonic() + 10
        while (agent := await routed()) == "Make_Plan_Agent":
            assert time.monotonic() < deadline, "the other replica's change was never seen"
            await asyncio.sleep(0.02)
        assert agent != "Make_Plan_Agent"


async def test_a_change_made_here_is_seen_by_the_very_next_message(database_url: str) -> None:
    app = replica(database_url)
    async with (
        lifespan_of(app),
        app_client(app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as client,
    ):
        session = await create_session(client)
        sid = session["session_id"]
        for _ in range(2):
            answer = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "make a plan"})
            assert answer.json()["agent"] == "Make_Plan_Agent"
        switched = await client.patch("/v1/agents/Make_Plan_Agent", json={"enabled": False})
        assert switched.status_code == 200, switched.text
        answer = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "make a plan"})
        assert answer.json()["agent"] != "Make_Plan_Agent"
