"""The pool's connections go to callers in the order they asked (``Database.connection``).

asyncpg's queue promises a connection given back to its longest waiter, but a caller that
asks before that waiter runs takes it, and the waiter queues again at the back: under load,
the few requests overtaken again and again were the 64-connection tails
(docs/benchmarks.md, "Read paths and the 64-connection tails")."""

from __future__ import annotations

import asyncio

import pytest

from app.db.pool import Database
from app.errors import ServiceUnavailable
from app.settings import DatabaseSettings


async def test_a_caller_asking_while_a_connection_is_handed_over_waits_its_turn(
    database_url: str,
) -> None:
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=1))
    await database.open()
    try:
        served: list[str] = []

        async def use(name: str) -> None:
            async with database.connection() as conn:
                served.append(name)
                await conn.fetchval("SELECT 1")

        held = database.connection()
        await held.__aenter__()
        first = asyncio.create_task(use("first"))
        await asyncio.sleep(0.05)  # waiting for the one connection
        giving_back = asyncio.create_task(held.__aexit__(None, None, None))
        await asyncio.sleep(0)  # the give-back is under way (asyncpg's release task queued)
        # Asks now: its first step runs right after the connection is back in asyncpg's
        # queue and before the waiter it was promised to.
        late = asyncio.create_task(use("late"))
        await asyncio.gather(giving_back, first, late)
        assert served == ["first", "late"]
    finally:
        await database.close()


async def test_a_caller_waits_for_a_turn_no_longer_than_the_acquire_timeout(
    database_url: str,
) -> None:
    database = Database(
        database_url, DatabaseSettings(pool_min_size=1, pool_max_size=1, acquire_timeout=0.2)
    )
    await database.open()
    try:
        async with database.connection():
            with pytest.raises(ServiceUnavailable):
                async with database.connection():
                    pass
        async with database.connection() as conn:  # the turn given up is not lost
            assert await conn.fetchval("SELECT 1") == 1
    finally:
        await database.close()
