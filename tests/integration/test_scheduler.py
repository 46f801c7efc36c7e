"""The maintenance jobs with a controllable clock, exactly-once claims across replicas,
crash recovery between batches, restore, and signed event delivery."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import httpx
import orjson
import pytest

from app.clock import Clock, FrozenClock
from app.db.pool import Database
from app.events.service import EventService
from app.jobs import repository as jobs_repo
from app.jobs.scheduler import Scheduler
from app.jobs.service import JobService, slot_start
from app.jobs.table import JOBS
from app.memories import repository as memories_repo
from app.outbound.policy import OutboundPolicy
from app.outbound.transport import outbound_client
from app.services import Services, build_services
from app.settings import DatabaseSettings, SchedulerSettings, Settings
from tests.agent_server import AgentServer
from tests.conftest import LOOPBACK_ALLOWED
from tests.integration.helpers import (
    assert_problem,
    create_session,
    create_user,
    eventually,
    if_match,
)

# What the sweeps told: every version and task transition is an event too (for the event
# streams), and these tests do not count those.
SWEEP_EVENTS = (
    "SELECT event_type, payload FROM outbox_events"
    " WHERE event_type NOT IN ('session.version', 'task.transition')"
)
SWEEP_EVENT_TYPES = (
    "SELECT event_type FROM outbox_events"
    " WHERE event_type NOT IN ('session.version', 'task.transition')"
    " ORDER BY created_at, event_id"
)
SWEEP_EVENT_COUNT = (
    "SELECT count(*) AS n FROM outbox_events"
    " WHERE event_type NOT IN ('session.version', 'task.transition')"
)


@pytest.fixture
def clock(frozen_clock: FrozenClock) -> Clock:
    return frozen_clock


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=5))
    await db.open()
    yield db
    await db.close()


@pytest.fixture
async def make_replica(
    database: Database, frozen_clock: FrozenClock
) -> AsyncIterator[Callable[..., JobService]]:
    """The jobs of a replica named ``name`` (its services built as every process builds
    them), with scheduler settings of the test's choosing."""
    built: list[Services] = []

    def make(name: str = "replica-a", **settings: Any) -> JobService:
        scheduler = SchedulerSettings(**settings)
        services = build_services(
            Settings(scheduler=scheduler), database, frozen_clock, replica=name
        )
        built.append(services)
        return services.jobs

    yield make
    for services in built:
        await services.aclose()


async def rows(database_url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(database_url)
    try:
        return list(await conn.fetch(sql, *args))
    finally:
        await conn.close()


async def insert_expiring_memories(
    database_url: str, user: str, now: datetime, categories: list[str], minutes: list[int]
) -> None:
    """One memory of ``user`` per category, written two days ago and expiring at ``now``
    plus its minutes (negative: expired)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """INSERT INTO memories (user_id, agent_name, memory_type, category, content,
                                     content_size, access_level, created_at, updated_at,
                                     expires_at)
               SELECT $1, 'test', 'orchestrator', c, '1', 1, 'all_agents', $2, $2,
                      $3::timestamptz + make_interval(mins => m)
               FROM unnest($4::text[], $5::int[]) AS t(c, m)""",
            user,
            now - timedelta(days=2),
            now,
            categories,
            minutes,
        )
    finally:
        await conn.close()


async def status_of(client: httpx.AsyncClient, session_id: str) -> str:
    response = await client.get(f"/v1/sessions/{session_id}")
    return response.json()["status"] if response.status_code == 200 else "gone"


# -- job 1: inactivity ----------------------------------------------------------------


async def test_inactivity_timeout_boundaries(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any
) -> None:
    quiet = await create_session(client)
    running = await create_session(client, session_state={"active_process": "plan"})
    kept = await create_session(client, preserve=True)
    replica = make_replica()

    frozen_clock.advance(timedelta(hours=1, minutes=59))
    run = await replica.run_now("inactivity_timeout", dry_run=False)
    assert run.rows_affected == 0
    assert await status_of(client, quiet["session_id"]) == "active"

    frozen_clock.advance(timedelta(minutes=2))  # 2:01 of inactivity
    run = await replica.run_now("inactivity_timeout", dry_run=False)
    assert run.status == "succeeded"
    assert run.details == {"sessions_idled": 1}
    assert await status_of(client, quiet["session_id"]) == "idle"
    assert await status_of(client, running["session_id"]) == "active"
    assert await status_of(client, kept["session_id"]) == "active"


# -- job 2: expiry extension ------------------------------------------------------------


async def test_expiry_extension_for_recently_active_processes(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    busy = await create_session(client, session_state={"active_process": "plan"}, ttl_seconds=3600)
    stale = await create_session(client, session_state={"active_process": "plan"}, ttl_seconds=3600)
    idle = await create_session(client, ttl_seconds=3600)
    frozen_clock.advance(timedelta(minutes=20))
    patched = await client.patch(
        f"/v1/sessions/{busy['session_id']}", json={"progress_percentage": 10}, headers=if_match(1)
    )
    assert patched.status_code == 200
    frozen_clock.advance(timedelta(minutes=15))  # busy moved 15 min ago, stale 35 min ago

    run = await make_replica().run_now("expiry_extension", dry_run=False)
    assert run.details == {"sessions_extended": 1}
    body = (await client.get(f"/v1/sessions/{busy['session_id']}")).json()
    assert (
        body["expires_at"].replace("Z", "+00:00")
        == (frozen_clock.now() + timedelta(hours=4)).isoformat()
    )
    # An expiry pushed is not content, as a heartbeat's is not: no new version, so a writer
    # holding the version it read is not refused because the session lived on.
    assert body["version"] == 2
    history = (await client.get(f"/v1/sessions/{busy['session_id']}/versions")).json()["items"]
    assert [v["change_reason"] for v in history] == ["patched", "created"]
    patched = await client.patch(
        f"/v1/sessions/{busy['session_id']}", json={"progress_percentage": 20}, headers=if_match(2)
    )
    assert patched.status_code == 200, patched.text
    assert (await client.get(f"/v1/sessions/{stale['session_id']}")).json()["version"] == 1
    assert (await client.get(f"/v1/sessions/{idle['session_id']}")).json()["version"] == 1

    again = await make_replica().run_now("expiry_extension", dry_run=False)
    assert again.rows_affected == 0  # 4 h away now: no new version every run


# -- job 3: expiry cleanup, restore -------------------------------------------------------


async def test_expired_sessions_are_archived_and_restorable_within_the_window(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    user = await create_user(client)
    doomed = await create_session(client, user_id=user, ttl_seconds=3600)
    await client.patch(
        f"/v1/sessions/{doomed['session_id']}",
        json={"progress_percentage": 30},
        headers=if_match(1),
    )
    working = await create_session(client, session_state={"active_process": "x"}, ttl_seconds=3600)
    kept = await create_session(client, preserve=True, ttl_seconds=3600)
    fresh = await create_session(client, ttl_seconds=7200)

    frozen_clock.advance(timedelta(hours=1, minutes=1))
    run = await make_replica().run_now("expiry_cleanup", dry_run=False)
    assert run.details["sessions_expired"] == 1
    assert await status_of(client, doomed["session_id"]) == "gone"
    for survivor in (working, kept, fresh):
        assert await status_of(client, survivor["session_id"]) != "gone"
    events = await rows(database_url, SWEEP_EVENTS)
    assert [(e["event_type"]) for e in events] == ["session.expired"]
    # Whom to tell: every session event names the user.
    assert orjson.loads(events[0]["payload"])["user_id"] == user

    frozen_clock.advance(timedelta(days=6))
    restored = await client.post(f"/v1/sessions/{doomed['session_id']}/restore")
    assert restored.status_code == 200, restored.text
    body = restored.json()
    assert body["progress_percentage"] == 30
    assert body["status"] == "active"
    assert body["version"] == 2
    history = (await client.get(f"/v1/sessions/{doomed['session_id']}/versions")).json()["items"]
    assert [v["version"] for v in history] == [2, 1]
    assert_problem(await client.post(f"/v1/sessions/{doomed['session_id']}/restore"), 409)
    types = [e["event_type"] for e in await rows(database_url, SWEEP_EVENT_TYPES)]
    assert types == ["session.expired", "session.restored"]


async def test_restore_after_the_window_is_gone_for_good(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    doomed = await create_session(client, ttl_seconds=3600)
    frozen_clock.advance(timedelta(hours=2))
    await make_replica().run_now("expiry_cleanup", dry_run=False)
    frozen_clock.advance(timedelta(days=7, minutes=1))
    problem = assert_problem(await client.post(f"/v1/sessions/{doomed['session_id']}/restore"), 404)
    assert "gone for good" in problem["detail"]
    run = await make_replica().run_now("expiry_cleanup", dry_run=False)
    assert run.details["archived_sessions_purged"] == 1
    assert await rows(database_url, "SELECT * FROM session_archive") == []


# -- job 4: archival ------------------------------------------------------------------


async def test_completed_sessions_are_archived_after_thirty_days(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    old = await create_session(client, ttl_seconds=90 * 86400 // 3)
    recent = await create_session(client, ttl_seconds=90 * 86400 // 3)
    await client.post(f"/v1/sessions/{old['session_id']}/complete", headers=if_match(1))
    frozen_clock.advance(timedelta(days=2))
    await client.post(f"/v1/sessions/{recent['session_id']}/complete", headers=if_match(1))
    frozen_clock.advance(timedelta(days=29))  # old: 31 days done, recent: 29
    run = await make_replica().run_now("archival", dry_run=False)
    assert run.details == {"sessions_archived": 1}
    assert await status_of(client, old["session_id"]) == "gone"
    assert await status_of(client, recent["session_id"]) == "completed"
    archived = await rows(database_url, "SELECT reason, versions FROM session_archive")
    assert archived[0]["reason"] == "completed"
    assert '"change_reason": "completed"' in archived[0]["versions"]


async def test_a_completed_session_waits_for_archival_not_for_expiry(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    # The default lifetime (24 h) runs out long before the 30-day hold of a completed session.
    done = await create_session(client)
    await client.post(f"/v1/sessions/{done['session_id']}/complete", headers=if_match(1))
    frozen_clock.advance(timedelta(days=2))

    dry = await make_replica().run_now("expiry_cleanup", dry_run=True)
    assert dry.details["sessions_expired"] == 0
    run = await make_replica().run_now("expiry_cleanup", dry_run=False)
    assert run.details["sessions_expired"] == 0
    assert await status_of(client, done["session_id"]) == "completed"
    assert await rows(database_url, "SELECT * FROM session_archive") == []

    frozen_clock.advance(timedelta(days=29))  # 31 days after completion
    run = await make_replica().run_now("archival", dry_run=False)
    assert run.details == {"sessions_archived": 1}
    archived = await rows(database_url, "SELECT reason FROM session_archive")
    assert [a["reason"] for a in archived] == ["completed"]
    events = await rows(database_url, SWEEP_EVENTS)
    assert [e["event_type"] for e in events] == ["session.archived"]
    assert orjson.loads(events[0]["payload"])["user_id"] == done["user_id"]


# -- job 5: memory retention ------------------------------------------------------------


async def test_memory_retention(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    user = await create_user(client)

    async def write(memory_type: str) -> str:
        response = await client.post(
            "/v1/memories", json={"user_id": user, "memory_type": memory_type, "content": 1}
        )
        assert response.status_code == 201
        memory_id: str = response.json()["memory_id"]
        return memory_id

    await subscribe_to_memory_purged(client)
    short = await write("orchestrator")  # session_data: 24 h
    pattern = await write("education")  # interaction_patterns: 1 year
    permanent = await write("consultation")  # user_profile: permanent
    frozen_clock.advance(timedelta(days=366))
    run = await make_replica().run_now("memory_retention", dry_run=False)
    assert run.details == {
        "memories_deleted": 1,
        "branch_memories_deleted": 0,
        "patterns_archived": 1,
        "archive_purged": 0,
    }
    live = {r["memory_id"] for r in await rows(database_url, "SELECT memory_id FROM memories")}
    assert {str(m) for m in live} == {permanent}
    archived = await rows(database_url, "SELECT memory_id FROM memory_archive")
    assert [str(r["memory_id"]) for r in archived] == [pattern]
    assert short not in {str(m) for m in live}
    assert await purged_events(database_url) == [
        {"user_id": user, "action": "archived", "count": 1, "categories": {PATTERNS: 1}},
        {"user_id": user, "action": "deleted", "count": 1, "categories": {"session_data": 1}},
    ]

    frozen_clock.advance(timedelta(days=366))
    run = await make_replica().run_now("memory_retention", dry_run=False)
    assert run.details["archive_purged"] == 1
    assert (await purged_events(database_url))[0] == {
        "user_id": user,
        "action": "archive_purged",
        "count": 1,
        "categories": {PATTERNS: 1},
    }


async def test_memory_retention_covers_branch_memories(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    """A branch's memories expire with their category's retention, as main's do: gone for
    readers at once, deleted by the sweep (a dry run counts them first)."""
    session = await create_session(client)
    sid = session["session_id"]
    fork = {"name": "alt", "purpose": "analysis"}
    assert (await client.post(f"/v1/sessions/{sid}/branches", json=fork)).status_code == 201
    url = f"/v1/sessions/{sid}/branches/alt/memories/by-key"
    for category, key in (("session_data", "short"), ("user_profile", "kept")):
        body = {"category": category, "key": key, "memory_type": "orchestrator", "content": 1}
        assert (await client.put(url, json=body)).status_code == 201
    frozen_clock.advance(timedelta(hours=25))  # session_data keeps 24 h; user_profile forever
    gone = await client.get(url, params={"category": "session_data", "key": "short"})
    assert_problem(gone, 404)
    dry = await make_replica().run_now("memory_retention", dry_run=True)
    assert dry.details["branch_memories_deleted"] == 1
    run = await make_replica().run_now("memory_retention", dry_run=False)
    assert run.details["branch_memories_deleted"] == 1
    left = await rows(database_url, "SELECT key FROM branch_memories")
    assert [r["key"] for r in left] == ["kept"]


PATTERNS = "interaction_patterns"


async def subscribe_to_memory_purged(client: httpx.AsyncClient) -> None:
    """memory.purged events are written only while someone subscribes to them."""
    subscribed = await client.post(
        "/v1/subscriptions",
        json={"url": "http://127.0.0.1:9/purged", "event_types": ["memory.purged"]},
    )
    assert subscribed.status_code == 201, subscribed.text


async def purged_events(database_url: str) -> list[dict[str, Any]]:
    """The memory.purged payloads, newest first, then by action and user."""
    found = await rows(
        database_url,
        "SELECT payload FROM outbox_events WHERE event_type = 'memory.purged' "
        "ORDER BY created_at DESC, payload ->> 'action', payload ->> 'user_id'",
    )
    return [orjson.loads(r["payload"]) for r in found]


async def test_memory_purged_tells_each_user_what_went(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    """One event per affected user with counts per category, so a notifier can send each
    user one notice; nobody whose memories stayed hears anything."""
    await subscribe_to_memory_purged(client)
    ann, bob, carol = [await create_user(client) for _ in range(3)]
    for user, memory_type in (
        (ann, "orchestrator"),  # session_data: 24 h
        (ann, "orchestrator"),
        (ann, "planning"),  # agent_outputs: 30 days
        (bob, "orchestrator"),
        (carol, "consultation"),  # user_profile: kept
    ):
        response = await client.post(
            "/v1/memories", json={"user_id": user, "memory_type": memory_type, "content": 1}
        )
        assert response.status_code == 201, response.text
    frozen_clock.advance(timedelta(days=31))
    run = await make_replica().run_now("memory_retention", dry_run=False)
    assert run.details["memories_deleted"] == 4
    events = await purged_events(database_url)
    assert sorted(events, key=lambda e: e["count"]) == [
        {"user_id": bob, "action": "deleted", "count": 1, "categories": {"session_data": 1}},
        {
            "user_id": ann,
            "action": "deleted",
            "count": 3,
            "categories": {"session_data": 2, "agent_outputs": 1},
        },
    ]
    # Nothing more went: no event (and no job-total event either).
    await make_replica().run_now("memory_retention", dry_run=False)
    assert len(await purged_events(database_url)) == 2


async def test_memory_purged_is_not_written_without_a_subscriber(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    """A batch can touch 20,000 users; nobody listening, no 20,000 events to write."""
    user = await create_user(client)
    written = await client.post(
        "/v1/memories", json={"user_id": user, "memory_type": "orchestrator", "content": 1}
    )
    assert written.status_code == 201, written.text
    frozen_clock.advance(timedelta(days=2))
    run = await make_replica().run_now("memory_retention", dry_run=False)
    assert run.details["memories_deleted"] == 1
    assert await purged_events(database_url) == []


async def test_memory_purged_commits_with_its_batch(
    client: httpx.AsyncClient,
    frozen_clock: FrozenClock,
    make_replica: Any,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The notice is written in the transaction of the batch that deleted the rows: a run
    that fails after one batch has told exactly the users whose memories that batch took."""
    await subscribe_to_memory_purged(client)
    ann, bob = await create_user(client), await create_user(client)
    for user in (ann, bob):  # a minute apart: different expiries, so different batches
        written = await client.post(
            "/v1/memories", json={"user_id": user, "memory_type": "orchestrator", "content": 1}
        )
        assert written.status_code == 201, written.text
        frozen_clock.advance(timedelta(minutes=1))
    frozen_clock.advance(timedelta(days=2))

    real_batch = memories_repo.delete_expired
    batches = 0

    async def crash_on_the_second_batch(*args: Any) -> tuple[int, Any]:
        nonlocal batches
        batches += 1
        if batches == 2:
            raise RuntimeError("the replica died here")
        return await real_batch(*args)

    monkeypatch.setattr(memories_repo, "delete_expired", crash_on_the_second_batch)
    failed = await make_replica(batch_size=1).run_now("memory_retention", dry_run=False)
    assert failed.status == "failed"
    assert await purged_events(database_url) == [
        {"user_id": ann, "action": "deleted", "count": 1, "categories": {"session_data": 1}}
    ]

    monkeypatch.undo()
    await make_replica(batch_size=1).run_now("memory_retention", dry_run=False)
    assert sorted(e["user_id"] for e in await purged_events(database_url)) == sorted([ann, bob])


async def test_retention_batches_resume_and_take_every_expired_memory_once(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    """Small batches over expiries that tie across batch boundaries: each batch starts
    where the last one reached, takes every row sharing its last instant, and together
    they delete exactly the expired memories (not patterns, not the unexpired)."""
    user = await create_user(client)
    now = frozen_clock.now()
    # 23 expired rows over 9 distinct instants (runs of 1, 2 and 5 ties), 4 unexpired
    # (one exactly at now), and 3 expired interaction patterns (job 5b's, not 5a's).
    ages = [1, 2, 2, 3, 3, 3, 3, 3, 4, 5, 5, 6, 7, 7, 7, 8, 8, 8, 8, 8, 9, 9, 9]
    await insert_expiring_memories(
        database_url,
        user,
        now,
        ["session_data"] * 27 + ["interaction_patterns"] * 3,
        [-a for a in ages] + [0, 1, 60, 600] + [-1, -2, -3],
    )

    planned = await make_replica(batch_size=4).run_now("memory_retention", dry_run=True)
    assert planned.details["memories_deleted"] == len(ages)
    run = await make_replica(batch_size=4).run_now("memory_retention", dry_run=False)
    assert run.details["memories_deleted"] == len(ages)
    assert run.details["patterns_archived"] == 3
    left = await rows(database_url, "SELECT expires_at FROM memories ORDER BY expires_at")
    assert [r["expires_at"] - now for r in left] == [
        timedelta(0),
        timedelta(minutes=1),
        timedelta(minutes=60),
        timedelta(minutes=600),
    ]
    again = await make_replica(batch_size=4).run_now("memory_retention", dry_run=False)
    assert again.details["memories_deleted"] == 0


async def test_retention_walks_on_past_batches_of_expired_patterns(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    """A batch reaches a batch size of expiry index entries on, interaction patterns
    among them (which it leaves to be archived): a batch that took no memory, or fewer than
    the batch size, is not the end of the sweep while entries are left beyond it."""
    user = await create_user(client)
    now = frozen_clock.now()
    # Walking by 2: patterns at -10 and -9 (the first batch takes nothing), the pattern
    # at -8 with the memory at -5 (one taken), then the memories at -4 and -3.
    await insert_expiring_memories(
        database_url,
        user,
        now,
        ["interaction_patterns"] * 3 + ["session_data"] * 4,
        [-10, -9, -8, -5, -4, -3, 5],
    )

    run = await make_replica(batch_size=2).run_now("memory_retention", dry_run=False)
    assert run.details["memories_deleted"] == 3
    assert run.details["patterns_archived"] == 3
    left = await rows(database_url, "SELECT expires_at FROM memories ORDER BY expires_at")
    assert [r["expires_at"] - now for r in left] == [timedelta(minutes=5)]


async def test_a_retention_batch_steps_over_expired_patterns_instead_of_taking_nothing(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, database: Database, database_url: str
) -> None:
    """Expired interaction patterns first in the expiry order (archived, not deleted): the
    first batch steps over them to the first memory and takes two, and once only patterns
    are left the walk ends without a batch that deletes nothing."""
    user = await create_user(client)
    now = frozen_clock.now()
    await insert_expiring_memories(
        database_url,
        user,
        now,
        ["interaction_patterns"] * 3 + ["session_data"] * 3 + ["interaction_patterns"],
        [-10, -9, -8, -5, -4, -3, -1],
    )
    reached, last = now - timedelta(minutes=4), now - timedelta(minutes=1)
    async with database.transaction() as conn:
        assert await memories_repo.delete_expired(conn, now, 2, None) == (2, reached)
        assert await memories_repo.delete_expired(conn, now, 2, reached) == (1, last)
        assert await memories_repo.delete_expired(conn, now, 2, last) == (0, None)
    left = await rows(database_url, "SELECT category FROM memories WHERE expires_at < $1", now)
    assert [r["category"] for r in left] == ["interaction_patterns"] * 4


async def test_housekeeping_purges_what_the_service_recorded_past_its_retention(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    """Audit rows, finished events and finished job runs go after their retention; an
    event still being retried and a running claim stay whatever their age."""
    user = await create_user(client)
    written = await client.post(
        "/v1/memories", json={"user_id": user, "memory_type": "consultation", "content": 1}
    )
    assert written.status_code == 201
    await client.get(f"/v1/memories/{written.json()['memory_id']}")
    old = frozen_clock.now() - timedelta(days=400)
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """INSERT INTO subscriptions (url, secret, event_types, created_at)
               VALUES ('http://127.0.0.1:9/hook', 'secret-0123456789abcdef',
                       '{session.expired}', $1)""",
            old,
        )
        # Each event is given its (pending) delivery when it is written.
        events = [
            await conn.fetchval(
                "INSERT INTO outbox_events (event_type, payload, created_at)"
                " VALUES ('session.expired', '{}', $1) RETURNING event_id",
                old,
            )
            for _ in range(3)
        ]
        for event, status in zip(events, ["delivered", "dead", "pending"], strict=True):
            changed = await conn.execute(
                "UPDATE event_deliveries SET status = $2 WHERE event_id = $1", event, status
            )
            assert changed == "UPDATE 1"
        await conn.execute("UPDATE memory_access_log SET at = $1", old)
        await conn.execute(
            """INSERT INTO job_runs (job_name, slot_start, trigger, status, claimed_by,
                                     started_at, lease_expires_at, finished_at)
               VALUES ('archival', $1, 'schedule', 'succeeded', 'old', $1, $1, $1),
                      ('expiry_cleanup', $1, 'schedule', 'running', 'stuck', $1, $1, NULL)""",
            old,
        )
        audit_before = await conn.fetchval("SELECT count(*) FROM memory_access_log")
    finally:
        await conn.close()
    assert audit_before >= 2

    planned = await make_replica().run_now("housekeeping", dry_run=True)
    assert planned.details == {
        "access_log_purged": audit_before,
        "events_purged": 2,
        "job_runs_purged": 1,
    }
    run = await make_replica(batch_size=1).run_now("housekeeping", dry_run=False)
    assert run.details == planned.details
    left = await rows(database_url, "SELECT event_id FROM outbox_events")
    assert [r["event_id"] for r in left] == [events[2]]
    assert await rows(database_url, "SELECT 1 FROM memory_access_log") == []
    runs = await rows(database_url, "SELECT claimed_by, status FROM job_runs ORDER BY started_at")
    # The stuck claim (oldest) stays; the old finished run is gone; the runs just made stay.
    assert (runs[0]["claimed_by"], runs[0]["status"]) == ("stuck", "running")
    assert all(r["claimed_by"] != "old" for r in runs)


# -- job 6: expiry warning ------------------------------------------------------------


async def test_expiry_warning_is_sent_once(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    soon = await create_session(client, ttl_seconds=3600)
    later = await create_session(client, ttl_seconds=7200)
    frozen_clock.advance(timedelta(minutes=46))  # soon expires in 14 min
    first = await make_replica().run_now("expiry_warning", dry_run=False)
    second = await make_replica().run_now("expiry_warning", dry_run=False)
    assert (first.rows_affected, second.rows_affected) == (1, 0)
    events = await rows(database_url, SWEEP_EVENTS)
    assert [e["event_type"] for e in events] == ["session.expiring"]
    assert soon["session_id"] in events[0]["payload"]
    assert later["session_id"] not in events[0]["payload"]
    assert orjson.loads(events[0]["payload"])["user_id"] == soon["user_id"]


# -- exactly once, leases, crashes, dry runs ----------------------------------------------


async def test_each_slot_runs_exactly_once_across_replicas(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, database_url: str
) -> None:
    replicas = [make_replica(f"replica-{i}") for i in range(3)]
    seen: set[tuple[str, Any]] = set()
    for _ in range(4):  # four 5-minute ticks of every job, all replicas at once
        for name, job in JOBS.items():
            slot = slot_start(frozen_clock.now(), job.interval(SchedulerSettings()))
            outcomes = await asyncio.gather(*(r.run_scheduled(name) for r in replicas))
            expected = 0 if (name, slot) in seen else 1
            assert sum(o.claimed for o in outcomes) == expected, name
            seen.add((name, slot))
        frozen_clock.advance(timedelta(minutes=5))
    runs = await rows(
        database_url, "SELECT job_name, slot_start, count(*) AS n FROM job_runs GROUP BY 1, 2"
    )
    assert all(r["n"] == 1 for r in runs)
    per_job = {name: sum(1 for r in runs if r["job_name"] == name) for name in JOBS}
    assert per_job["inactivity_timeout"] == 4  # a new 5-minute slot each time
    assert per_job["archival"] == 1  # still the same daily slot


async def test_a_dead_claim_is_taken_over_after_its_lease(
    frozen_clock: FrozenClock, make_replica: Any, database: Database
) -> None:
    job = JOBS["archival"]  # a daily slot: the clock stays inside it
    slot = slot_start(frozen_clock.now(), job.interval(SchedulerSettings()))
    async with database.transaction() as conn:
        run_id = await jobs_repo.claim_run(
            conn,
            job.name,
            slot,
            "schedule",
            False,
            "crashed",
            frozen_clock.now(),
            frozen_clock.now() + timedelta(minutes=5),
        )
    assert run_id is not None
    assert (await make_replica("b").run_scheduled(job.name)).claimed is False
    frozen_clock.advance(timedelta(minutes=4, seconds=59))
    # still the same slot, lease not yet expired
    assert (await make_replica("b").run_scheduled(job.name)).claimed is False
    frozen_clock.advance(timedelta(seconds=2))
    taken = await make_replica("b").run_scheduled(job.name)
    assert taken.claimed is True
    assert taken.run is not None
    assert (taken.run.claimed_by, taken.run.attempts, taken.run.status) == ("b", 2, "succeeded")


async def test_a_crash_between_batches_loses_nothing(
    client: httpx.AsyncClient,
    frozen_clock: FrozenClock,
    make_replica: Any,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sessions = [await create_session(client, ttl_seconds=3600) for _ in range(5)]
    frozen_clock.advance(timedelta(hours=2))
    real = jobs_repo.record_progress
    calls = 0

    async def crash_on_second_batch(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("injected crash")
        await real(*args, **kwargs)

    monkeypatch.setattr(jobs_repo, "record_progress", crash_on_second_batch)
    run = await make_replica(batch_size=2).run_now("expiry_cleanup", dry_run=False)
    assert run.status == "failed"
    assert "injected crash" in (run.error or "")
    assert run.rows_affected == 2  # the first batch committed with its progress
    live = await rows(database_url, "SELECT session_id FROM session_coordination")
    archived = await rows(database_url, "SELECT session_id FROM session_archive")
    assert len(live) + len(archived) == 5
    assert len(archived) == 2
    assert not {r["session_id"] for r in live} & {r["session_id"] for r in archived}

    monkeypatch.setattr(jobs_repo, "record_progress", real)
    run = await make_replica(batch_size=2).run_now("expiry_cleanup", dry_run=False)
    assert run.status == "succeeded"
    assert run.details["sessions_expired"] == 3
    archived = await rows(database_url, "SELECT session_id FROM session_archive")
    assert sorted(str(r["session_id"]) for r in archived) == sorted(
        s["session_id"] for s in sessions
    )
    events = await rows(database_url, SWEEP_EVENT_COUNT)
    assert events[0]["n"] == 5  # one session.expired each, none duplicated


async def test_dry_run_counts_and_changes_nothing(
    client: httpx.AsyncClient, frozen_clock: FrozenClock
) -> None:
    session = await create_session(client, ttl_seconds=3600)
    frozen_clock.advance(timedelta(hours=2))
    response = await client.post("/v1/jobs/expiry_cleanup/run", params={"dry_run": "true"})
    assert response.status_code == 200, response.text
    run = response.json()
    assert run["dry_run"] is True
    assert run["details"]["sessions_expired"] == 1
    assert await status_of(client, session["session_id"]) == "active"


async def test_jobs_api(client: httpx.AsyncClient, make_agent_client: Any) -> None:
    jobs = {j["name"]: j for j in (await client.get("/v1/jobs")).json()}
    assert set(jobs) == {
        "agent_cards",
        "inactivity_timeout",
        "expiry_extension",
        "expiry_cleanup",
        "archival",
        "memory_retention",
        "expiry_warning",
        "housekeeping",
    }
    assert jobs["expiry_cleanup"]["interval_seconds"] == 3600
    assert jobs["archival"]["interval_seconds"] == 86400
    run = (await client.post("/v1/jobs/inactivity_timeout/run")).json()
    assert run["status"] == "succeeded"
    runs = (await client.get("/v1/jobs/inactivity_timeout/runs")).json()["items"]
    assert [r["run_id"] for r in runs] == [run["run_id"]]
    listed = {j["name"]: j for j in (await client.get("/v1/jobs")).json()}
    assert listed["inactivity_timeout"]["last_run"]["run_id"] == run["run_id"]
    assert_problem(await client.post("/v1/jobs/nope/run"), 404)
    assert_problem(await client.get("/v1/jobs/nope/runs"), 404)
    agent = await make_agent_client("Worker", [])
    async with agent:
        assert_problem(await agent.get("/v1/jobs"), 403)
        assert_problem(await agent.post("/v1/jobs/archival/run"), 403)


# -- events -----------------------------------------------------------------------------


@pytest.fixture
async def receiver() -> AsyncIterator[AgentServer]:
    server = await AgentServer(reply={"ok": True}).start()
    yield server
    await server.stop()


async def test_events_are_delivered_signed_retried_and_dead_after_n(
    client: httpx.AsyncClient,
    frozen_clock: FrozenClock,
    database: Database,
    receiver: AgentServer,
    make_replica: Any,
) -> None:
    created = await client.post(
        "/v1/subscriptions",
        json={"url": receiver.url, "event_types": ["session.expired"], "secret": "s" * 32},
    )
    assert created.status_code == 201, created.text
    assert created.json()["secret"] == "s" * 32
    assert "secret" not in (await client.get("/v1/subscriptions")).json()[0]
    await create_session(client, ttl_seconds=3600)
    await create_session(client, ttl_seconds=3600)
    frozen_clock.advance(timedelta(hours=2))
    await make_replica().run_now("expiry_cleanup", dry_run=False)

    settings = SchedulerSettings(delivery_max_attempts=3)
    outbound = OutboundPolicy(LOOPBACK_ALLOWED)
    async with outbound_client(outbound) as http:
        events = EventService(database, frozen_clock, settings, http, outbound)
        receiver.behaviour = "fail"
        receiver.status = 500
        assert await events.deliver_due() == 2
        assert await events.deliver_due() == 0  # backing off: nothing due yet
        frozen_clock.advance(timedelta(minutes=5))
        receiver.behaviour = "ok"
        receiver.status = 200
        assert await events.deliver_due() == 2
        frozen_clock.advance(timedelta(hours=2))
        assert await events.deliver_due() == 0  # delivered: never again

    assert len(receiver.requests) == 4
    body, headers = receiver.bodies[-1], receiver.headers[-1]
    expected = (
        "v1="
        + hmac.new(
            b"s" * 32, headers["x-switchboard-timestamp"].encode() + b"." + body, hashlib.sha256
        ).hexdigest()
    )
    assert headers["x-switchboard-signature"] == expected
    assert headers["x-switchboard-event"] == "session.expired"
    assert receiver.requests[-1]["payload"]["session_id"]
    delivered = (await client.get("/v1/events", params={"status": "delivered"})).json()["items"]
    assert len(delivered) == 2
    assert all(d["attempts"] == 2 for d in delivered)

    # a subscriber that never answers well is given up on after delivery_max_attempts
    receiver.behaviour = "fail"
    event_id = delivered[0]["event_id"]
    assert (await client.post(f"/v1/events/{event_id}/redeliver")).json() == {"deliveries": 1}
    async with outbound_client(outbound) as http:
        events = EventService(database, frozen_clock, settings, http, outbound)
        for _ in range(3):
            await events.deliver_due()
            frozen_clock.advance(timedelta(hours=1))
    dead = (await client.get("/v1/events", params={"status": "dead"})).json()["items"]
    assert [d["event_id"] for d in dead] == [event_id]
    assert dead[0]["last_error"] == "HTTP 500"
    assert_problem(
        await client.post("/v1/events/01900000-0000-7000-8000-000000000000/redeliver"), 404
    )
    assert_problem(
        await client.post(
            "/v1/subscriptions", json={"url": "ftp://x", "event_types": ["session.expired"]}
        ),
        422,
    )
    assert_problem(
        await client.post("/v1/subscriptions", json={"url": receiver.url, "event_types": ["nope"]}),
        422,
    )


@pytest.mark.parametrize("limit", [1, 2, 3, 4])
async def test_event_pages_list_every_delivery_once(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any, limit: int
) -> None:
    # Two subscribers: every event has two deliveries, so two rows share an event id.
    for url in ("http://127.0.0.1:9/a", "http://127.0.0.1:9/b"):
        subscription = {"url": url, "event_types": ["session.expiring"]}
        assert (await client.post("/v1/subscriptions", json=subscription)).status_code == 201
    for _ in range(3):
        await create_session(client, ttl_seconds=600)
    frozen_clock.advance(timedelta(minutes=1))
    run = await make_replica().run_now("expiry_warning", dry_run=False)
    assert run.details == {"sessions_warned": 3}

    seen: list[tuple[str, str]] = []
    cursor = None
    for _ in range(20):
        params: dict[str, Any] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        page = await client.get("/v1/events", params=params)
        assert page.status_code == 200, page.text
        seen += [(d["event_id"], d["subscription_id"]) for d in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    everything = (await client.get("/v1/events", params={"limit": 200})).json()["items"]
    assert len(everything) == 6
    assert seen == [(d["event_id"], d["subscription_id"]) for d in everything]
    assert len(set(seen)) == 6
    assert_problem(await client.get("/v1/events", params={"cursor": "bm9wZQ"}), 400)


async def test_events_filter_by_types_across_pages(
    client: httpx.AsyncClient, frozen_clock: FrozenClock, make_replica: Any
) -> None:
    subscription = {
        "url": "http://127.0.0.1:9/a",
        "event_types": ["session.expiring", "session.expired"],
    }
    assert (await client.post("/v1/subscriptions", json=subscription)).status_code == 201
    for _ in range(3):
        await create_session(client, ttl_seconds=600)
    frozen_clock.advance(timedelta(minutes=1))
    await make_replica().run_now("expiry_warning", dry_run=False)
    frozen_clock.advance(timedelta(hours=2))
    await make_replica().run_now("expiry_cleanup", dry_run=False)

    def types_of(response: httpx.Response) -> list[str]:
        assert response.status_code == 200, response.text
        return [d["event_type"] for d in response.json()["items"]]

    assert (
        sorted(types_of(await client.get("/v1/events")))
        == ["session.expired"] * 3 + ["session.expiring"] * 3
    )
    expired = await client.get("/v1/events", params={"types": "session.expired"})
    assert types_of(expired) == ["session.expired"] * 3
    both = await client.get("/v1/events", params={"types": "session.expired, session.expiring"})
    assert len(types_of(both)) == 6
    # The cursor pages through the filtered list only.
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        params = {"types": "session.expiring", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = await client.get("/v1/events", params=params)
        seen += types_of(page)
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == ["session.expiring"] * 3
    assert (
        types_of(
            await client.get("/v1/events", params={"types": "session.expired", "status": "pending"})
        )
        == ["session.expired"] * 3
    )
    assert types_of(await client.get("/v1/events", params={"types": "task.failed"})) == []
    for bad in ("nope", "session.expired,nope", " , "):
        problem = assert_problem(await client.get("/v1/events", params={"types": bad}), 400)
        assert "session.expired" in problem["known"]


async def test_event_jobs_that_fail_are_logged_and_run_again(
    database_url: str, frozen_clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    """Event delivery and numbering run every delivery interval, each run a trace of its
    own; while the database is gone each run fails, is logged with its job's name, and the
    next interval tries again (the scheduler goes on)."""
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    settings = Settings(scheduler=SchedulerSettings(delivery_interval=timedelta(milliseconds=100)))
    services = build_services(settings, database, frozen_clock, replica="failing")
    scheduler = Scheduler(services.jobs, services.events, services.event_hub, services.tracing)
    await database.close()  # every run of the event jobs fails from here on
    caplog.set_level(logging.ERROR, logger="switchboard.scheduler")
    scheduler.start()

    async def failed_twice_each() -> bool:
        failed = [
            (r.getMessage(), getattr(r, "job", None))
            for r in caplog.records
            if r.name == "switchboard.scheduler"
        ]
        return all(
            failed.count((f"event {job} failed; will retry", job)) >= 2
            for job in ("delivery", "numbering")
        )

    try:
        await eventually(failed_twice_each)
    finally:
        scheduler.shutdown()
        await services.aclose()
