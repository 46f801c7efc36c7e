"""Job shapes: runs, jobs and the outcome of a slot claim."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID


@dataclass(frozen=True, slots=True)
class JobRun:
    """One run of a job: its claim and what it did."""

    run_id: UUID
    job_name: str
    slot_start: datetime | None
    trigger: str
    dry_run: bool
    status: str
    claimed_by: str
    attempts: int
    started_at: datetime
    finished_at: datetime | None
    rows_affected: int
    details: dict[str, Any]
    error: str | None


@dataclass(frozen=True, slots=True)
class JobRunPage:
    """One page of a job's runs, newest first."""

    items: list[JobRun]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job, its schedule, its last run and when it runs next."""

    name: str
    description: str
    interval_seconds: int
    last_run: JobRun | None
    next_run_at: datetime | None


@dataclass(frozen=True, slots=True)
class ClaimOutcome:
    """The result of asking to run a job's slot."""

    claimed: bool
    run: JobRun | None
