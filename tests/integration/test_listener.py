"""``Listener``: LISTEN on a connection of its own that comes back after it is lost, with a
catch-up run every interval (and so right after reconnecting). The breakers use it; so will
anything else woken by NOTIFY."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import asyncpg

from app.db.listener import Listener

CHANNEL = "switchboard_test_channel"
INTERVAL = 0.1


async def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def notify(url: str, payload: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, payload)
    finally:
        await conn.close()


async def terminate_listeners(url: str) -> int:
    """Kill the listener's backend, as a server restart or a dropped network would."""
    conn = await asyncpg.connect(url)
    try:
        killed = await conn.fetchval(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'switchboard-listener' AND datname = current_database()) t"
        )
        return int(killed)
    finally:
        await conn.close()


async def test_payloads_arrive_and_keep_arriving_after_the_connection_is_lost(
    database_url: str,
) -> None:
    received: list[str] = []
    catch_ups = 0

    async def catch_up() -> None:
        nonlocal catch_ups
        catch_ups += 1

    listener = Listener(
        database_url, CHANNEL, received.append, catch_up=catch_up, interval=INTERVAL
    )
    await listener.start()
    try:
        await wait_until(lambda: listener.listening and catch_ups > 0)
        await notify(database_url, "first")
        await wait_until(lambda: received == ["first"])

        assert await terminate_listeners(database_url) == 1
        await wait_until(lambda: not listener.listening)
        before = catch_ups
        await wait_until(lambda: listener.listening and catch_ups > before)
        await notify(database_url, "second")
        await wait_until(lambda: received == ["first", "second"])
    finally:
        await listener.stop()
    assert not listener.listening
    assert await terminate_listeners(database_url) == 0  # its connection is closed


async def test_a_failing_catch_up_or_handler_is_retried_not_fatal(database_url: str) -> None:
    received: list[str] = []
    attempts = 0

    async def flaky_catch_up() -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError("the table is not there yet")

    def picky(payload: str) -> None:
        if payload == "bad":
            raise ValueError(payload)
        received.append(payload)

    listener = Listener(database_url, CHANNEL, picky, catch_up=flaky_catch_up, interval=INTERVAL)
    await listener.start()
    try:
        await wait_until(lambda: attempts >= 3 and listener.listening)
        await notify(database_url, "bad")
        await notify(database_url, "good")
        await wait_until(lambda: received == ["good"])
    finally:
        await listener.stop()
