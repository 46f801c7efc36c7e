"""Giving events their positions when many ask at once, after a quiet spell, or when nobody
streams: callers in one process share numbering runs (a hundred streams opening over a
backlog hold one pool connection, not the whole pool), a process's first stream does not
get the backlog as news, and the scheduler numbers events where no stream is open."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import asyncpg
import orjson

from app.asgi import create_app
from app.db.pool import Database
from app.events.hub import EventHub
from app.events.repository import Q
from app.settings import DatabaseSettings, SchedulerSettings, Settings, StreamSettings
from tests.conftest import ADMIN_KEY, lifespan_of

BATCH = 500


async def _backlog(database_url: str, events: int) -> None:
    """``events`` committed events nobody has numbered (as after a sweep while no process
    served a stream)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO outbox_events (event_type, payload) "
            "SELECT 'memory.purged', jsonb_build_object('n', n) FROM generate_series(1, $1) n",
            events,
        )
    finally:
        await conn.close()


async def _unnumbered(conn: asyncpg.Connection) -> int:
    count: int = await conn.fetchval("SELECT count(*) FROM outbox_events WHERE position IS NULL")
    return count


async def test_streams_opening_at_once_over_a_backlog_share_one_numbering_run(
    database_url: str,
) -> None:
    """Fifty callers (streams opening) over 5,000 unnumbered events, with a pool of three
    and a short acquire timeout: one numbering run serves them all. Each caller numbering
    for itself held a connection while it waited for the numbering's lock, so the pool ran
    dry and streams were refused (503) for as long as the backlog took."""
    await _backlog(database_url, 5_000)
    conn = await asyncpg.connect(database_url)
    try:
        # Count the calls of outbox_sequence() by the server's function statistics, kept for
        # every connection to this test's database from now on.
        name = await conn.fetchval("SELECT current_database()")
        await conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'pl'")
    finally:
        await conn.close()
    database = Database(
        database_url,
        DatabaseSettings(pool_min_size=1, pool_max_size=3, acquire_timeout=0.5),
    )
    await database.open()
    hub = EventHub(database, StreamSettings(batch=BATCH))
    try:
        await asyncio.gather(*(hub.number_committed() for _ in range(50)))
    finally:
        await database.close()  # the backends exit and flush their function statistics
    conn = await asyncpg.connect(database_url)
    try:
        assert await _unnumbered(conn) == 0
        calls = 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # a backend's exit flushes a moment after close
            calls = await conn.fetchval(
                "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
                "WHERE funcname = 'outbox_sequence_from'"
            )
            if calls > 5_000 // BATCH:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)  # any straggler's flush
        calls = await conn.fetchval(
            "SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions "
            "WHERE funcname = 'outbox_sequence_from'"
        )
    finally:
        await conn.close()
    # One run: ten full batches and the one that finds the rest empty.
    assert calls == 5_000 // BATCH + 1


async def test_the_first_stream_does_not_get_the_backlog_as_news(database_url: str) -> None:
    """Events committed before a process's first stream are history (a catch-up reads them
    from the table); the pump offers only what comes after. Offered as news, 2,000 of them
    overflowed every new stream's queue and evicted it."""
    await _backlog(database_url, 2_000)
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=3))
    await database.open()
    hub = EventHub(database, StreamSettings(batch=BATCH, queue_events=16, sync_seconds=0.2))
    try:
        await hub.start()
        subscriber = hub.subscribe(lambda _event: True)
        conn = await asyncpg.connect(database_url)
        try:
            assert await _unnumbered(conn) == 0
            news = await conn.fetchval(
                "INSERT INTO outbox_events (event_type, payload) "
                "VALUES ('memory.purged', '{\"news\": true}') RETURNING event_id::text"
            )
        finally:
            await conn.close()
        # Written with psql's means (nobody announces it): the pump's timer finds it.
        await asyncio.wait_for(subscriber.ready.wait(), 10)
        assert not subscriber.evicted.is_set()
        assert len(subscriber.queue) == 1
        assert news.encode() in subscriber.queue[0].frame
    finally:
        await hub.stop()
        await database.close()


async def test_the_scheduler_numbers_events_where_nobody_streams(database_url: str) -> None:
    """No process serves a stream: the scheduler numbers committed events all the same, so
    they do not pile up for the first stream to open."""
    settings = Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=3),
        scheduler=SchedulerSettings(delivery_interval=timedelta(milliseconds=200)),
    )
    app = create_app(settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=True)
    async with lifespan_of(app):
        assert not app.state.event_hub.started
        await _backlog(database_url, 1_200)
        conn = await asyncpg.connect(database_url)
        try:
            deadline = time.monotonic() + 15
            while await _unnumbered(conn):
                assert time.monotonic() < deadline, "the scheduler never numbered the events"
                await asyncio.sleep(0.1)
        finally:
            await conn.close()
        assert not app.state.event_hub.started  # numbered with no stream and no pump


async def test_the_last_position_reads_one_index_entry_when_statistics_predate_the_numbering(
    database_url: str,
) -> None:
    """A sweep's events are analysed while still unnumbered, then numbered: the statistics
    say no event has a position. The newest position must still be read from the end of
    the index, one entry, not by reading every numbered event (as a plain max() was, once
    per opening stream: seconds each at millions of events, and the pool ran dry)."""
    await _backlog(database_url, 30_000)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("ANALYZE outbox_events")
        while await conn.fetchval("SELECT outbox_sequence(10000)"):
            pass
        assert await _unnumbered(conn) == 0
        plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {Q.last_position}")
        assert await conn.fetchval(Q.last_position) == await conn.fetchval(
            "SELECT max(position) FROM outbox_events"
        )
    finally:
        await conn.close()

    def rows_read(node: dict[str, object]) -> int:
        scans = "Scan" in str(node["Node Type"])
        # PostgreSQL 18 writes Actual Rows as an average with decimals ("1.00").
        rows = float(str(node["Actual Rows"])) * float(str(node["Actual Loops"]))
        own = round(rows) if scans else 0
        children = node.get("Plans", [])
        assert isinstance(children, list)
        return own + sum(rows_read(child) for child in children)

    assert rows_read(orjson.loads(plan)[0]["Plan"]) <= 1


async def _unsequenced_index_blocks(database: Database) -> int:
    """Blocks of outbox_events_unsequenced_idx read so far (hits included) by every
    connection, ``database``'s one included once it flushed its counts."""
    async with database.connection() as conn:
        await conn.execute("SELECT pg_stat_force_next_flush()")
        await conn.execute("SELECT pg_stat_clear_snapshot()")
    async with database.connection() as conn:
        blocks: int = await conn.fetchval(
            "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes "
            "WHERE indexrelname = 'outbox_events_unsequenced_idx'"
        )
    return blocks


async def test_a_numbering_run_reads_the_numbered_events_entries_once(
    database_url: str,
) -> None:
    """A run numbering a backlog batch after batch resumes each batch where the one before
    ended. Numbered events keep their entries in the unsequenced index until a vacuum, and
    a run that started every batch from the index's head read them all again: 40 batches
    over 20,000 events read about 2,500 index blocks, quadratic in the backlog (a million
    events took 57 s to number), where resuming reads about 200."""
    await _backlog(database_url, 20_000)
    # One connection: its statistics are flushed on demand (pg_stat_force_next_flush).
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=1))
    await database.open()
    try:
        async with database.connection() as conn:
            await conn.execute("ALTER TABLE outbox_events SET (autovacuum_enabled = false)")
            await conn.execute("ANALYZE outbox_events")
        before = await _unsequenced_index_blocks(database)
        await EventHub(database, StreamSettings(batch=BATCH)).number_committed()
        read = await _unsequenced_index_blocks(database) - before
        async with database.connection() as conn:
            assert await _unnumbered(conn) == 0
    finally:
        await database.close()
    assert 0 < read < 600, read


async def test_an_event_committed_behind_a_batchs_key_is_numbered_by_the_next_run(
    database_url: str,
) -> None:
    """An event whose transaction began before the key a batch resumed from (its created_at
    is older) but committed after that batch is not lost: the batch after the key skips it
    and a run from the head numbers it, after the events already numbered (positions grow
    in the order readers can see them)."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "INSERT INTO outbox_events (event_type, payload, created_at) "
            "SELECT 'memory.purged', jsonb_build_object('n', n), "
            "       now() + make_interval(secs => n) "
            "FROM generate_series(1, 3) n RETURNING event_id, created_at"
        )
        late, middle, newest = sorted(rows, key=lambda row: row["created_at"])
        async with conn.transaction():
            numbered, last_created, last_event = await conn.fetchrow(
                Q.sequence_events, 10, middle["created_at"], middle["event_id"]
            )
        assert (numbered, last_created, last_event) == (
            1,
            newest["created_at"],
            newest["event_id"],
        )
        async with conn.transaction():
            assert tuple(await conn.fetchrow(Q.sequence_events, 10, last_created, last_event)) == (
                0,
                None,
                None,
            )
        async with conn.transaction():
            numbered, _, last_event = await conn.fetchrow(Q.sequence_events, 10, None, None)
        assert (numbered, last_event) == (2, middle["event_id"])
        positions = dict(
            await conn.fetch("SELECT event_id, position FROM outbox_events ORDER BY position")
        )
    finally:
        await conn.close()
    assert (
        positions[newest["event_id"]] < positions[late["event_id"]] < positions[middle["event_id"]]
    )


async def test_an_event_committing_behind_a_runs_key_mid_run_is_numbered_by_the_next_run(
    database_url: str,
) -> None:
    """The hub's runs, not just the statement: a transaction that wrote an event before a
    backlog (its created_at is older than every batch's key) commits while a run is between
    its batches. That run's later batches resume after their keys and pass it by; the next
    number_committed() run starts from the head and numbers it, after the backlog, so every
    event ends with a position of its own."""
    gate = 220038  # an advisory lock (numbering_gate's) the test holds to stop the run
    conn = await asyncpg.connect(database_url)
    late = await asyncpg.connect(database_url)
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=3))
    await database.open()
    try:
        # A batch's UPDATE waits at the gate once a batch before it committed positions.
        await conn.execute(
            """
            CREATE FUNCTION numbering_gate() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF EXISTS (SELECT 1 FROM outbox_events WHERE position IS NOT NULL) THEN
                    PERFORM pg_advisory_xact_lock_shared(220038);
                END IF;
                RETURN NULL;
            END $$;
            CREATE TRIGGER numbering_gate BEFORE UPDATE ON outbox_events
                FOR EACH STATEMENT EXECUTE FUNCTION numbering_gate();
            """
        )
        late_transaction = late.transaction()
        await late_transaction.start()
        late_event = await late.fetchval(
            "INSERT INTO outbox_events (event_type, payload) "
            "VALUES ('memory.purged', '{\"late\": true}') RETURNING event_id"
        )
        await _backlog(database_url, 4 * BATCH)
        await conn.execute("SELECT pg_advisory_lock($1)", gate)
        hub = EventHub(database, StreamSettings(batch=BATCH))
        run = asyncio.ensure_future(hub.number_committed())
        deadline = time.monotonic() + 15
        while not await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' "
            "AND classid = 0 AND objid = $1 AND objsubid = 1 AND NOT granted)",
            gate,
        ):
            assert time.monotonic() < deadline, "the run never reached its second batch"
            assert not run.done()
            await asyncio.sleep(0.05)
        assert await _unnumbered(conn) == 3 * BATCH  # the first batch; the late one unseen
        await late_transaction.commit()
        await conn.execute("SELECT pg_advisory_unlock($1)", gate)
        await asyncio.wait_for(run, 15)
        # The run passed the late event by: it lies behind every key after the first.
        assert (
            await conn.fetchval(
                "SELECT position FROM outbox_events WHERE event_id = $1", late_event
            )
            is None
        )
        assert await _unnumbered(conn) == 1

        await hub.number_committed()

        assert await _unnumbered(conn) == 0
        total, distinct, late_position, others_last = await conn.fetchrow(
            "SELECT count(*), count(DISTINCT position), "
            "       max(position) FILTER (WHERE event_id = $1), "
            "       max(position) FILTER (WHERE event_id <> $1) "
            "FROM outbox_events",
            late_event,
        )
        assert (total, distinct) == (4 * BATCH + 1, 4 * BATCH + 1)
        assert late_position > others_last  # numbered in the order readers can see it
    finally:
        await conn.close()  # lets a run stopped at the gate go on, should an assert fail
        await late.close()
        await database.close()
