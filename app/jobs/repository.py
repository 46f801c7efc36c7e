"""Job runs in and out of PostgreSQL: slot claims, progress, runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.jobs.schemas import JobRun

Q = QUERIES.jobs


def _job_run(row: asyncpg.Record) -> JobRun:
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
    return None if row is None else _job_run(row)


async def list_runs(
    conn: Connection, job_name: str, before: tuple[datetime, UUID], limit: int
) -> list[JobRun]:
    """A page of a job's runs, newest first."""
    rows = await conn.fetch(Q.list_runs, job_name, before[0], before[1], limit)
    return [_job_run(row) for row in rows]


async def last_runs(conn: Connection) -> dict[str, JobRun]:
    """The latest run of every job that has run."""
    return {row["job_name"]: _job_run(row) for row in await conn.fetch(Q.last_runs)}


async def purge_finished_runs(conn: Connection, before: datetime, limit: int) -> int:
    """One batch of finished runs started before ``before``; how many went."""
    return len(await conn.fetch(Q.purge_job_runs, before, limit))


async def count_purgeable_runs(conn: Connection, before: datetime) -> int:
    """How many finished runs started before ``before``."""
    return int(await conn.fetchval(Q.count_purgeable_job_runs, before))
