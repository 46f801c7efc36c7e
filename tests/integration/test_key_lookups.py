"""Agent-key lookups under load: concurrent misses of one key share one lookup, and a busy
key is looked up again before its cached entry runs out (app/auth/keycache.py), so no
request waits for a lookup of a key in use, and a key revoked elsewhere stops at that
refresh. Real PostgreSQL: the lookups are held by a real table lock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from app.agents.schemas import AgentCreate
from app.agents.service import AgentService
from app.auth.keys import hash_key
from app.clock import SystemClock
from app.db.pool import Database
from app.services import Services, build_services
from app.settings import AuthSettings, DatabaseSettings, Settings


@asynccontextmanager
async def agent_service(url: str, ttl: float, pool: int = 5) -> AsyncIterator[AgentService]:
    """The agent service of a replica of its own, keys cached for ``ttl`` seconds."""
    settings = Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=pool),
        auth=AuthSettings(key_cache_seconds=ttl),
    )
    database = Database(url, settings.database)
    await database.open()
    services: Services | None = None
    try:
        services = build_services(settings, database, SystemClock())
        yield services.agents
    finally:
        if services is not None:
            await services.aclose()
        await database.close()


@asynccontextmanager
async def agents_locked(url: str) -> AsyncIterator[asyncpg.Connection]:
    """The agents table locked against every read, until the block ends."""
    conn = await asyncpg.connect(url)
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE agents IN ACCESS EXCLUSIVE MODE")
            yield conn
    finally:
        await conn.close()


async def lookups_waiting(conn: asyncpg.Connection) -> int:
    """How many of the pools' connections wait for the agents table's lock."""
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'switchboard' "
            "AND wait_event_type = 'Lock' AND datname = current_database()"
        )
    )


async def new_key(agents: AgentService, name: str) -> bytes:
    created = await agents.create_agent(AgentCreate(name=name))
    return hash_key(created.api_key)


async def test_concurrent_misses_of_a_key_share_one_lookup(database_url: str) -> None:
    async with agent_service(database_url, ttl=5.0) as agents:
        digest = await new_key(agents, "Busy_Agent")  # (a change: nothing is cached)
        async with agents_locked(database_url) as holder:
            callers = [asyncio.create_task(agents.authenticate(digest)) for _ in range(8)]
            waiting = 0
            for _ in range(50):
                await asyncio.sleep(0.05)
                waiting = await lookups_waiting(holder)
                if waiting >= 2:
                    break
            # Each miss used to take a pooled connection of its own (five here, the pool's
            # size): at 64 connections, a burst queued behind the requests every TTL.
            assert waiting == 1
        principals = await asyncio.gather(*callers)
        assert {p.name if p else None for p in principals} == {"Busy_Agent"}


async def test_a_caller_that_goes_away_leaves_the_lookup_to_the_others(database_url: str) -> None:
    async with agent_service(database_url, ttl=5.0) as agents:
        digest = await new_key(agents, "Patient_Agent")
        async with agents_locked(database_url) as holder:
            first = asyncio.create_task(agents.authenticate(digest))
            second = asyncio.create_task(agents.authenticate(digest))
            for _ in range(100):
                if await lookups_waiting(holder) >= 1:
                    break
                await asyncio.sleep(0.02)
            first.cancel()
            await asyncio.sleep(0.05)
        principal = await second
        assert principal is not None
        assert principal.name == "Patient_Agent"
        assert first.cancelled()


async def test_a_busy_key_is_looked_up_again_before_it_runs_out(database_url: str) -> None:
    ttl = 2.0
    async with agent_service(database_url, ttl=ttl) as agents:
        digest = await new_key(agents, "Steady_Agent")
        assert await agents.authenticate(digest) is not None  # cached now
        await asyncio.sleep(ttl * 0.85)  # in the entry's last fifth: due
        assert await agents.authenticate(digest) is not None  # answered, and refreshed
        await asyncio.sleep(ttl * 0.3)  # past the first entry's end
        async with agents_locked(database_url):
            # Any lookup now would wait for the lock: the refreshed entry answers.
            principal = await asyncio.wait_for(agents.authenticate(digest), timeout=1.0)
        assert principal is not None
        assert principal.name == "Steady_Agent"


async def test_a_key_revoked_elsewhere_stops_at_the_refresh(database_url: str) -> None:
    ttl = 3.0
    async with (
        agent_service(database_url, ttl=ttl) as here,
        agent_service(database_url, ttl=ttl, pool=2) as elsewhere,
    ):
        digest = await new_key(elsewhere, "Revoked_Agent")
        cached_at = time.monotonic()
        assert await here.authenticate(digest) is not None  # cached here
        await elsewhere.disable_agent("Revoked_Agent")
        await asyncio.sleep(ttl * 0.85)
        # Still trusted from the cache (within the TTL), and looked up again meanwhile...
        assert await here.authenticate(digest) is not None
        await asyncio.sleep(0.3)
        # ...which finds the key gone, before the entry would have run out (on a host slow
        # enough to reach the TTL, the entry would simply have expired: that proves nothing).
        assert time.monotonic() - cached_at < ttl, "too slow to tell a refresh from expiry"
        assert await here.authenticate(digest) is None
