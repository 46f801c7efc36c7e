"""Maintenance rows in and out of PostgreSQL."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.maintenance.schemas import EventDelivery, JobRun, Subscription

Q = QUERIES.maintenance


def job_run(row: asyncpg.Record) -> JobRun:
    """A job_runs row as a JobRun."""
    return JobRun(
        run_id=row["run_id"],
        job_name=row["job_name"],
        slot_start=row["slot_start"],
        trigger=row["trigger"],
        dry_run=row["dry_run"],
        status=row["status"],
        claimed_by=row["claimed_by"],
        attempts=row["attempts"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        rows_affected=row["rows_affected"],
        details=row["details"],
        error=row["error"],
    )


async def claim_run(
    conn: Connection,
    job_name: str,
    slot_start: datetime | None,
    trigger: str,
    dry_run: bool,
    replica: str,
    now: datetime,
    lease_until: datetime,
) -> UUID | None:
    """Claim a slot; the run id if this replica got it."""
    row = await conn.fetchrow(
        Q.claim_run, job_name, slot_start, trigger, dry_run, replica, now, lease_until
    )
    return None if row is None else row["run_id"]


async def record_progress(
    conn: Connection,
    run_id: UUID,
    rows: int,
    details: dict[str, Any],
    lease_until: datetime,
    replica: str,
) -> None:
    """Add a batch's rows to the run (same transaction as the batch) and renew the lease."""
    await conn.execute(Q.record_progress, run_id, rows, details, lease_until, replica)


async def finish_run(
    conn: Connection,
    run_id: UUID,
    status: str,
    now: datetime,
    error: str | None,
    details: dict[str, Any],
    replica: str,
) -> JobRun | None:
    """Close a run; None if another replica took it over meanwhile."""
    row = await conn.fetchrow(Q.finish_run, run_id, status, now, error, details, replica)
    return None if row is None else job_run(row)


async def get_run(conn: Connection, run_id: UUID) -> JobRun | None:
    """One run."""
    row = await conn.fetchrow(Q.get_run, run_id)
    return None if row is None else job_run(row)


async def list_runs(
    conn: Connection, job_name: str, before: tuple[datetime, UUID], limit: int
) -> list[JobRun]:
    """A page of a job's runs, newest first."""
    rows = await conn.fetch(Q.list_runs, job_name, before[0], before[1], limit)
    return [job_run(row) for row in rows]


async def last_runs(conn: Connection) -> dict[str, JobRun]:
    """The latest run of every job that has run."""
    return {row["job_name"]: job_run(row) for row in await conn.fetch(Q.last_runs)}


async def batch(conn: Connection, query: str, *args: Any) -> int:
    """Run one batch statement (named in maintenance.sql); how many rows it took."""
    return len(await conn.fetch(query, *args))


async def resuming_batch(conn: Connection, query: str, *args: Any) -> tuple[int, Any]:
    """Run one resuming batch statement: how many rows it took and where it reached."""
    row = await conn.fetchrow(query, *args)
    if row is None:  # the statement always returns one row
        raise RuntimeError("a resuming batch statement returned no row")
    return int(row["taken"]), row["reached"]


async def count(conn: Connection, query: str, *args: Any) -> int:
    """Run one count statement (for dry runs)."""
    return int(await conn.fetchval(query, *args))


async def emit_event(
    conn: Connection, event_type: str, payload: dict[str, Any], now: datetime
) -> UUID:
    """Write an event (and its deliveries) in the caller's transaction."""
    event_id: UUID = await conn.fetchval(Q.emit_event, event_type, payload, now)
    return event_id


# -- archive and restore ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchivedSession:
    """An archived session: its row and history as JSON, and until when it may return."""

    session_id: UUID
    user_id: UUID
    reason: str
    session: dict[str, Any]
    versions: list[dict[str, Any]]
    restorable_until: datetime


async def lock_archived_session(conn: Connection, session_id: UUID) -> ArchivedSession | None:
    """The archived session, row-locked for a restore."""
    row = await conn.fetchrow(Q.lock_archived_session, session_id)
    if row is None:
        return None
    return ArchivedSession(
        session_id=row["session_id"],
        user_id=row["user_id"],
        reason=row["reason"],
        session=row["session"],
        versions=row["versions"],
        restorable_until=row["restorable_until"],
    )


async def session_exists(conn: Connection, session_id: UUID) -> bool:
    """True if the session is live."""
    return bool(await conn.fetchval(Q.session_exists, session_id))


async def restore_session(
    conn: Connection, archived: ArchivedSession, expires_at: datetime, now: datetime
) -> None:
    """Put the row and its history back, drop the archive row, give it a fresh expiry."""
    await conn.execute(Q.restore_session_row, archived.session)
    await conn.execute(Q.restore_session_versions, archived.versions)
    await conn.execute(Q.delete_archived_session, archived.session_id)
    await conn.execute(Q.restart_restored_session, archived.session_id, expires_at, now)


# -- events -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A delivery claimed for sending."""

    event_id: UUID
    subscription_id: UUID
    attempts: int
    event_type: str
    payload: dict[str, Any]
    created_at: datetime
    url: str
    secret: str


async def claim_due_deliveries(
    conn: Connection, now: datetime, limit: int, in_flight_until: datetime
) -> list[DueDelivery]:
    """Take due deliveries (SKIP LOCKED) and mark them in flight."""
    rows = await conn.fetch(Q.claim_due_deliveries, now, limit, in_flight_until)
    return [DueDelivery(**dict(row)) for row in rows]


async def mark_delivered(conn: Connection, delivery: DueDelivery, now: datetime) -> None:
    """A subscriber took the event."""
    await conn.execute(Q.mark_delivered, delivery.event_id, delivery.subscription_id, now)


async def mark_delivery_failed(
    conn: Connection, delivery: DueDelivery, error: str, next_attempt_at: datetime, dead: bool
) -> None:
    """A delivery failed: retry later, or give up."""
    await conn.execute(
        Q.mark_delivery_failed,
        delivery.event_id,
        delivery.subscription_id,
        error,
        next_attempt_at,
        dead,
    )


async def insert_subscription(
    conn: Connection, url: str, event_types: list[str], secret: str, now: datetime
) -> Subscription:
    """A new subscriber (without its secret)."""
    row = await conn.fetchrow(Q.insert_subscription, url, event_types, secret, now)
    if row is None:
        raise RuntimeError("insert_subscription returned no row")
    return Subscription(**dict(row))


async def list_subscriptions(conn: Connection) -> list[Subscription]:
    """Every subscriber (without secrets)."""
    return [Subscription(**dict(row)) for row in await conn.fetch(Q.list_subscriptions)]


async def delete_subscription(conn: Connection, subscription_id: UUID) -> bool:
    """Remove a subscriber; False if there was none."""
    return await conn.fetchval(Q.delete_subscription, subscription_id) is not None


async def list_deliveries(
    conn: Connection, status: str | None, before: tuple[datetime, UUID, UUID], limit: int
) -> list[EventDelivery]:
    """Events with their delivery state, newest first, after the (created_at, event_id,
    subscription_id) of the last row seen."""
    rows = await conn.fetch(Q.list_deliveries, status, before[0], before[1], before[2], limit)
    return [EventDelivery(**dict(row)) for row in rows]


async def redeliver_event(conn: Connection, event_id: UUID, now: datetime) -> int:
    """Reset an event's deliveries to pending; how many."""
    return len(await conn.fetch(Q.redeliver_event, event_id, now))
