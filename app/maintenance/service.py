"""The maintenance jobs: what each one sweeps, in bounded batches, exactly once per slot.

A run first claims its slot in ``job_runs`` (``INSERT … ON CONFLICT DO NOTHING``-style: only
one replica gets the row; a claim whose lease ran out is taken over). Each batch is one
transaction that changes at most ``batch_size`` rows *and* records the run's progress, so
a crash between batches loses nothing and the next run finishes the work. Jobs are data
(``JOBS``): a name, an interval and the named statements of their steps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.db.pool import Database
from app.db.queries import QUERIES
from app.errors import Conflict, NotFound
from app.maintenance import repository as repo
from app.maintenance.schemas import ClaimOutcome, JobInfo, JobRun, JobRunPage
from app.sessions import repository as sessions_repo
from app.sessions.schemas import Session
from app.settings import SchedulerSettings, SessionSettings

logger = logging.getLogger("switchboard.maintenance")

Q = QUERIES.maintenance
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Args = Callable[[datetime, SchedulerSettings], tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Step:
    """One sweep of a job: a batch statement (batch size appended) and its dry-run count."""

    name: str
    batch: str
    batch_args: Args
    count: str
    count_args: Args
    # A resuming batch statement takes where the previous batch reached as its last
    # parameter (NULL for the first) and returns (rows taken, where it reached), so no
    # batch walks again over what earlier batches removed.
    resumes: bool = False


@dataclass(frozen=True, slots=True)
class Job:
    """A maintenance job: its schedule and steps."""

    name: str
    description: str
    interval: Callable[[SchedulerSettings], timedelta]
    steps: tuple[Step, ...]


JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job(
            "inactivity_timeout",
            "active sessions with no activity for the threshold become idle",
            lambda s: s.inactivity_interval,
            (
                Step(
                    "sessions_idled",
                    Q.idle_inactive_sessions,
                    lambda now, s: (now - s.inactivity_threshold,),
                    Q.count_inactive_sessions,
                    lambda now, s: (now - s.inactivity_threshold,),
                ),
            ),
        ),
        Job(
            "expiry_extension",
            "sessions with a process that moved recently live on (a new version each time)",
            lambda s: s.extension_interval,
            (
                Step(
                    "sessions_extended",
                    Q.extend_active_processes,
                    lambda now, s: (
                        now,
                        now - s.extension_recent_activity,
                        now + s.extension_period,
                        now + s.extension_period / 2,
                    ),
                    Q.count_extendable_sessions,
                    lambda now, s: (
                        now - s.extension_recent_activity,
                        now + s.extension_period / 2,
                    ),
                ),
            ),
        ),
        Job(
            "expiry_cleanup",
            "expired sessions (not completed ones) move to the archive (restorable for the "
            "recovery window)",
            lambda s: s.expiry_interval,
            (
                Step(
                    "sessions_expired",
                    Q.archive_expired_sessions,
                    lambda now, s: (now, now + s.recovery_window),
                    Q.count_expired_sessions,
                    lambda now, s: (now,),
                ),
                Step(
                    "archived_sessions_purged",
                    Q.purge_session_archive,
                    lambda now, s: (now,),
                    Q.count_purgeable_session_archive,
                    lambda now, s: (now,),
                ),
                Step(
                    "idempotency_keys_purged",
                    Q.purge_idempotency_keys,
                    lambda now, s: (now,),
                    Q.count_purgeable_idempotency_keys,
                    lambda now, s: (now,),
                ),
            ),
        ),
        Job(
            "archival",
            "completed sessions older than the retention move to the archive with history",
            lambda s: s.archival_interval,
            (
                Step(
                    "sessions_archived",
                    Q.archive_completed_sessions,
                    lambda now, s: (now, now - s.completed_retention, now + s.recovery_window),
                    Q.count_archivable_sessions,
                    lambda now, s: (now - s.completed_retention,),
                ),
            ),
        ),
        Job(
            "memory_retention",
            "expired memories go; old interaction patterns move to the memory archive; each "
            "user affected is told (memory.purged)",
            lambda s: s.retention_interval,
            (
                Step(
                    "memories_deleted",
                    Q.delete_expired_memories,
                    lambda now, s: (now,),
                    Q.count_expired_memories,
                    lambda now, s: (now,),
                    resumes=True,
                ),
                Step(
                    "patterns_archived",
                    Q.archive_interaction_patterns,
                    lambda now, s: (now,),
                    Q.count_archivable_patterns,
                    lambda now, s: (now,),
                ),
                Step(
                    "archive_purged",
                    Q.purge_memory_archive,
                    lambda now, s: (now - s.memory_archive_retention, now),
                    Q.count_purgeable_memory_archive,
                    lambda now, s: (now - s.memory_archive_retention,),
                ),
            ),
        ),
        Job(
            "housekeeping",
            "the memory access audit trail, finished events and finished job runs older than "
            "their retention are purged",
            lambda s: s.housekeeping_interval,
            (
                Step(
                    "access_log_purged",
                    Q.purge_access_log,
                    lambda now, s: (now - s.audit_retention,),
                    Q.count_purgeable_access_log,
                    lambda now, s: (now - s.audit_retention,),
                ),
                Step(
                    "events_purged",
                    Q.purge_events,
                    lambda now, s: (now - s.event_retention,),
                    Q.count_purgeable_events,
                    lambda now, s: (now - s.event_retention,),
                ),
                Step(
                    "job_runs_purged",
                    Q.purge_job_runs,
                    lambda now, s: (now - s.job_run_retention,),
                    Q.count_purgeable_job_runs,
                    lambda now, s: (now - s.job_run_retention,),
                ),
            ),
        ),
        Job(
            "expiry_warning",
            "users of sessions about to expire are told once (session.expiring)",
            lambda s: s.warning_interval,
            (
                Step(
                    "sessions_warned",
                    Q.warn_expiring_sessions,
                    lambda now, s: (now, now + s.warning_window),
                    Q.count_expiring_sessions,
                    lambda now, s: (now, now + s.warning_window),
                ),
            ),
        ),
    )
}


def slot_start(now: datetime, interval: timedelta) -> datetime:
    """The start of the interval-aligned slot that contains ``now`` (same on every replica)."""
    slots = (now - _EPOCH) // interval
    return _EPOCH + slots * interval


class MaintenanceService:
    """Runs jobs exactly once per slot, restores archived sessions, lists runs."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: SchedulerSettings,
        sessions: SessionSettings,
        replica_id: str,
    ) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings
        self._sessions = sessions
        self.replica_id = replica_id

    @property
    def settings(self) -> SchedulerSettings:
        """The scheduler settings in force."""
        return self._settings

    def job(self, name: str) -> Job:
        """A job by name (404 if unknown)."""
        job = JOBS.get(name)
        if job is None:
            raise NotFound(f"No job {name!r}; the jobs are {', '.join(sorted(JOBS))}.")
        return job

    async def run_scheduled(self, name: str) -> ClaimOutcome:
        """Run the current slot of a job, unless another replica already has it."""
        job = self.job(name)
        now = self._clock.now()
        return await self._run(
            job, slot_start(now, job.interval(self._settings)), "schedule", False
        )

    async def run_now(self, name: str, dry_run: bool) -> JobRun:
        """A manual run: recorded like a scheduled one, but in no slot (never deduplicated)."""
        outcome = await self._run(self.job(name), None, "manual", dry_run)
        if outcome.run is None:  # a manual claim always succeeds; this is a lost race on finish
            raise Conflict(f"The run of {name} was taken over by another replica.")
        return outcome.run

    async def _run(
        self, job: Job, slot: datetime | None, trigger: str, dry_run: bool
    ) -> ClaimOutcome:
        now = self._clock.now()
        async with self._db.transaction() as conn:
            run_id = await repo.claim_run(
                conn, job.name, slot, trigger, dry_run, self.replica_id, now, self._lease(now)
            )
        if run_id is None:
            return ClaimOutcome(claimed=False, run=None)
        details: dict[str, int] = {}
        status, error = "succeeded", None
        try:
            if dry_run:
                async with self._db.connection() as conn:
                    for step in job.steps:
                        details[step.name] = await repo.count(
                            conn, step.count, *step.count_args(now, self._settings)
                        )
            else:
                await self._sweep(job, run_id, now, details)
        except Exception as exc:
            logger.exception("job %s (run %s) failed", job.name, run_id)
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        async with self._db.transaction() as conn:
            run = await repo.finish_run(
                conn, run_id, status, self._clock.now(), error, details, self.replica_id
            )
        return ClaimOutcome(claimed=True, run=run)

    async def _sweep(self, job: Job, run_id: UUID, now: datetime, details: dict[str, int]) -> None:
        limit = self._settings.batch_size
        for step in job.steps:
            details.setdefault(step.name, 0)
            reached: Any = None
            while True:
                # trace: the events a batch writes carry the run's trace (their default).
                async with self._db.transaction(trace=True) as conn:
                    args = (*step.batch_args(now, self._settings), limit)
                    if step.resumes:
                        taken, reached = await repo.resuming_batch(conn, step.batch, *args, reached)
                    else:
                        taken = await repo.batch(conn, step.batch, *args)
                    details[step.name] += taken
                    await repo.record_progress(
                        conn,
                        run_id,
                        taken,
                        details,
                        self._lease(self._clock.now()),
                        self.replica_id,
                    )
                if taken < limit:
                    break

    def _lease(self, now: datetime) -> datetime:
        return now + self._settings.lease

    # -- reading runs --------------------------------------------------------------------

    async def jobs(self) -> list[JobInfo]:
        """Every job with its interval, last run and next scheduled slot."""
        async with self._db.connection() as conn:
            last = await repo.last_runs(conn)
        now = self._clock.now()
        infos = []
        for job in JOBS.values():
            interval = job.interval(self._settings)
            infos.append(
                JobInfo(
                    name=job.name,
                    description=job.description,
                    interval_seconds=int(interval.total_seconds()),
                    last_run=last.get(job.name),
                    next_run_at=slot_start(now, interval) + interval
                    if self._settings.enabled
                    else None,
                )
            )
        return infos

    async def runs(self, name: str, limit: int, cursor: str | None) -> JobRunPage:
        """A job's runs, newest first."""
        self.job(name)
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            items = await repo.list_runs(conn, name, before, limit + 1)
        page, next_cursor = cut_page(items, limit, lambda r: (r.started_at, r.run_id))
        return JobRunPage(items=page, next_cursor=next_cursor)

    # -- restore -------------------------------------------------------------------------

    async def restore(self, session_id: UUID) -> Session:
        """Bring an expired or archived session back, with its history, within the window."""
        now = self._clock.now()
        # trace: session.restored carries the request's trace (the column's default).
        async with self._db.transaction(trace=True) as conn:
            archived = await repo.lock_archived_session(conn, session_id)
            if archived is None or archived.restorable_until < now:
                if await repo.session_exists(conn, session_id):
                    raise Conflict(f"Session {session_id} is live; there is nothing to restore.")
                raise NotFound(
                    f"Session {session_id} cannot be restored: it was never archived, or its "
                    f"recovery window ({self._settings.recovery_window}) has passed and it is "
                    "gone for good."
                )
            await repo.restore_session(conn, archived, now + self._sessions.default_ttl, now)
            await repo.emit_event(
                conn,
                "session.restored",
                {
                    "session_id": str(session_id),
                    "user_id": str(archived.user_id),
                    "reason": archived.reason,
                },
                now,
            )
            session = await sessions_repo.get_session(conn, session_id)
        if session is None:  # inserted above in this transaction
            raise RuntimeError("restored session vanished")
        return session
