"""Commits tell listeners without a NOTIFY in the writing transaction (app/db/announce.py).

A stream on the writer's own process hears at once, in-process; one on another pool (as a
replica or the scheduler has) hears through the writer's coalesced NOTIFY, sent after the
commit from a statement of its own; what psql writes (no announcer) is found by the hub's
timer. The triggers send no NOTIFY: a LISTEN on the channel hears nothing from a raw write,
and far fewer notifications than commits from concurrent writes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from app.db.pool import Database
from app.events.hub import CHANNEL, EventHub, Subscriber
from app.settings import DatabaseSettings, StreamSettings
from app.tasks.service import FINISHED_CHANNEL, QUEUED_CHANNEL

# The hub's timer fallback: far longer than any test waits, so what arrives did not use it.
NEVER = 30.0
INSERT_EVENT = (
    "INSERT INTO outbox_events (event_type, payload) "
    "VALUES ('memory.purged', jsonb_build_object('marker', $1::text))"
)
# The same, written after a moment: a write still in flight when its caller is cancelled.
SLOW_INSERT_EVENT = (
    "INSERT INTO outbox_events (event_type, payload) "
    "SELECT 'memory.purged', jsonb_build_object('marker', $1::text) FROM pg_sleep(0.3)"
)
INSERT_TASK = (
    "INSERT INTO agent_tasks (agent_name, kind, input, created_by) "
    "VALUES ('Some_Agent', 'agent_call', '{}'::jsonb, 'test') RETURNING task_id"
)


async def finish_task(conn: asyncpg.Connection[asyncpg.Record] | Any, task_id: object) -> None:
    """submitted -> working -> completed (the transition rule allows no shortcut)."""
    for status in ("working", "completed"):
        await conn.execute(
            "UPDATE agent_tasks SET status = $2 WHERE task_id = $1::uuid", str(task_id), status
        )


@pytest.fixture
async def writer(database_url: str) -> AsyncIterator[Database]:
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=8))
    await database.open()
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[Database]:
    """Another process's pool: its own connections and its own announcer."""
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=3))
    await database.open()
    try:
        yield database
    finally:
        await database.close()


async def started_hub(database: Database, sync_seconds: float) -> tuple[EventHub, Subscriber]:
    hub = EventHub(database, StreamSettings(sync_seconds=sync_seconds))
    await hub.start()
    await asyncio.sleep(0.3)  # the LISTEN connection is up, the start's catch-up done
    return hub, hub.subscribe(lambda _event: True)


async def arrival(subscriber: Subscriber, marker: str, within: float) -> float:
    """Seconds until the event carrying ``marker`` is queued for ``subscriber``."""
    started = time.monotonic()
    while True:
        if any(marker.encode() in e.frame for e in subscriber.queue):
            return time.monotonic() - started
        remaining = within - (time.monotonic() - started)
        assert remaining > 0, f"the event {marker} did not arrive within {within} s"
        subscriber.ready.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(subscriber.ready.wait(), timeout=remaining)


async def write_event(database: Database) -> str:
    marker = str(uuid4())
    async with database.transaction() as conn:
        await conn.execute(INSERT_EVENT, marker)
    return marker


async def test_a_stream_on_the_writers_process_hears_in_process(writer: Database) -> None:
    """Right after the commit, with the hub's LISTEN connection down: only the in-process
    announcement can have carried it (the timer is 30 s)."""
    hub, subscriber = await started_hub(writer, NEVER)
    try:
        await hub._listener.stop()  # no NOTIFY reaches this hub from here on
        marker = await write_event(writer)
        assert await arrival(subscriber, marker, within=5) < 2
    finally:
        await hub.stop()


async def test_a_stream_on_another_pool_hears_by_the_coalesced_notify(
    writer: Database, other: Database
) -> None:
    hub, subscriber = await started_hub(other, NEVER)
    try:
        marker = await write_event(writer)
        assert await arrival(subscriber, marker, within=5) < 2
        assert writer.announcer.notifies_sent >= 1
    finally:
        await hub.stop()


async def test_a_raw_write_sends_no_notify_and_arrives_by_the_timer(
    database_url: str, other: Database
) -> None:
    """psql, another tool: no announcer, no NOTIFY (the trigger sends none); the hub's
    timer finds the event."""
    heard: list[str] = []
    listening = await asyncpg.connect(database_url)
    await listening.add_listener(CHANNEL, lambda *args: heard.append(args[3]))
    hub, subscriber = await started_hub(other, 0.5)
    raw = await asyncpg.connect(database_url)
    try:
        marker = str(uuid4())
        await raw.execute(INSERT_EVENT, marker)
        assert await arrival(subscriber, marker, within=5) < 3
        await asyncio.sleep(0.3)
        assert heard == []
    finally:
        await hub.stop()
        await raw.close()
        await listening.close()


async def test_concurrent_writes_send_far_fewer_notifies_than_commits(
    database_url: str, writer: Database
) -> None:
    """Each writing transaction queues no NOTIFY; the writer's announcer sends one per burst
    from a statement of its own (at most one in flight)."""
    heard: list[int] = []
    first = asyncio.Event()

    def hear(_conn: object, pid: int, _channel: str, _payload: object) -> None:
        heard.append(pid)
        first.set()

    listening = await asyncpg.connect(database_url)
    await listening.add_listener(CHANNEL, hear)
    writes = 200
    try:

        async def one() -> None:
            async with writer.transaction() as conn:
                await conn.execute(INSERT_EVENT, "burst")

        await asyncio.gather(*(one() for _ in range(writes)))
        await asyncio.wait_for(first.wait(), timeout=5)
        await asyncio.sleep(0.5)  # whatever is still in flight
        assert 1 <= len(heard) < writes / 4, len(heard)
        assert writer.announcer.notifies_sent == len(heard)
    finally:
        await listening.close()


async def test_a_read_announces_nothing(writer: Database) -> None:
    async with writer.transaction() as conn:
        await conn.fetchval("SELECT count(*) FROM outbox_events")
    async with writer.connection() as conn:
        await conn.fetchval("SELECT 1")
    await asyncio.sleep(0.2)
    assert writer.announcer.notifies_sent == 0


async def test_the_writers_hub_skips_the_echo_of_its_own_notify(
    database_url: str, writer: Database, other: Database
) -> None:
    """The writer's NOTIFY carries its origin: the writer's own hub, woken at the commit,
    does not pump again when the echo arrives; another pool's hub pumps for it."""
    heard: list[str] = []
    listening = await asyncpg.connect(database_url)
    await listening.add_listener(CHANNEL, lambda *args: heard.append(args[3]))
    here, subscriber = await started_hub(writer, NEVER)
    there, elsewhere = await started_hub(other, NEVER)
    try:
        before = here.passes, there.passes
        marker = await write_event(writer)
        await arrival(subscriber, marker, within=5)
        await arrival(elsewhere, marker, within=5)
        deadline = time.monotonic() + 5
        while not heard:
            assert time.monotonic() < deadline, "the writer sent no NOTIFY"
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)  # the echo reached both hubs' LISTEN connections too
        assert heard == [writer.announcer.origin]
        assert there.passes - before[1] == 1  # woken by the NOTIFY alone
        assert here.passes - before[0] == 1  # woken by the commit, not again by its echo
    finally:
        await there.stop()
        await here.stop()
        await listening.close()


async def test_a_cancelled_write_still_announces_what_it_committed(writer: Database) -> None:
    """A request cancelled (its client went away) while its write is in flight: the write
    commits anyway (the cancellation reaches the server too late) and what it announced is
    told when the connection is given back, not left to the listeners' timers."""
    told: list[str] = []
    writer.announcer.listen(CHANNEL, told.append)
    marker = str(uuid4())

    async def write() -> None:
        async with writer.connection() as conn:
            await conn.execute(SLOW_INSERT_EVENT, marker)

    task = asyncio.create_task(write())
    await asyncio.sleep(0.1)  # the statement is at the server
    # This process is busy (a loaded host): the server finishes the statement meanwhile,
    # and its answer waits in the socket when the request is cancelled.
    time.sleep(0.6)  # noqa: ASYNC251 - the point is to hold the event loop
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert told == [""]
    async with writer.connection() as conn:
        written = await conn.fetchval(
            "SELECT count(*) FROM outbox_events WHERE payload ->> 'marker' = $1", marker
        )
    assert written == 1


async def test_task_channels_are_told_in_process_and_by_notify_after_commit(
    database_url: str, writer: Database
) -> None:
    """A queued task wakes this process's worker and, by one NOTIFY after the commit, the
    others'; a finished one its waiters, by task id. Nothing is sent from inside the
    writing transaction: the same writes by a tool without an announcer send nothing."""
    local: list[tuple[str, str]] = []
    for channel in (QUEUED_CHANNEL, FINISHED_CHANNEL):
        writer.announcer.listen(channel, lambda p, c=channel: local.append((c, p)))
    remote: list[tuple[str, str]] = []
    listening = await asyncpg.connect(database_url)
    for channel in (QUEUED_CHANNEL, FINISHED_CHANNEL):
        await listening.add_listener(channel, lambda *args: remote.append((args[2], args[3])))
    try:
        async with writer.transaction() as conn:
            task_id = str(await conn.fetchval(INSERT_TASK))
            assert local == []  # not before the commit
        assert local == [(QUEUED_CHANNEL, "")]
        async with writer.transaction() as conn:
            await finish_task(conn, task_id)
        assert local[1:] == [(FINISHED_CHANNEL, task_id)]
        await asyncio.sleep(0.5)
        assert sorted(remote) == sorted(
            [(QUEUED_CHANNEL, writer.announcer.origin), (FINISHED_CHANNEL, task_id)]
        )
        remote.clear()
        raw = await asyncpg.connect(database_url)
        try:
            async with raw.transaction():
                await finish_task(raw, await raw.fetchval(INSERT_TASK))
        finally:
            await raw.close()
        await asyncio.sleep(0.5)
        assert remote == []
    finally:
        await listening.close()


async def test_announcements_reach_the_announcer_with_no_log_listener_per_use(
    writer: Database,
) -> None:
    """The pool's connections hand announcements to the announcer themselves: nothing is
    added to or removed from a connection per use (asyncpg would clear a log listener at
    every release), and a log listener someone adds still hears every message."""
    told: list[str] = []
    writer.announcer.listen(CHANNEL, told.append)
    messages: list[str] = []
    async with writer.connection() as conn:
        assert not conn._con._log_listeners

        def log(_conn: object, message: Any) -> None:
            messages.append(message.message)

        conn.add_log_listener(log)
        try:
            async with conn.transaction():
                await conn.execute(INSERT_EVENT, str(uuid4()))
            await asyncio.sleep(0)  # asyncpg hands messages to log listeners with call_soon
        finally:
            conn.remove_log_listener(log)
    assert "switchboard announce" in messages
    assert told == [""]
