"""Maintenance rows in and out of PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.maintenance.schemas import JobRun

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


async def count(conn: Connection, query: str, *args: Any) -> int:
    """Run one count statement (for dry runs)."""
    return int(await conn.fetchval(query, *args))


async def emit_event(
    conn: Connection, event_type: str, payload: dict[str, Any], now: datetime
) -> UUID:
    """Write an event (and its deliveries) in the caller's transaction."""
    event_id: UUID = await conn.fetchval(Q.emit_event, event_type, payload, now)
    return event_id
