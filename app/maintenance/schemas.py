"""Maintenance shapes: job runs, jobs, restore."""

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


@dataclass(frozen=True, slots=True)
class Subscription:
    """A subscriber (never its secret)."""

    subscription_id: UUID
    url: str
    event_types: list[str]
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """An event and the state of its delivery to one subscriber."""

    event_id: UUID
    event_type: str
    payload: dict[str, Any]
    created_at: datetime
    subscription_id: UUID
    status: str
    attempts: int
    last_error: str | None
    delivered_at: datetime | None
    next_attempt_at: datetime
    # The trace of the request or job that wrote the event (None for older events).
    trace_id: str | None
