"""Running jobs exactly once per slot, and reading their runs.

A run first claims its slot in ``job_runs`` (``INSERT … ON CONFLICT``: only one replica
gets the row; a claim whose lease ran out is taken over), then calls the job's sweeps (the
services' methods named in ``app/jobs/table.py``) with one ``Sweep``, whose batches record
the run's progress and renew its lease, and finally closes the run with its details.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.db.pool import Connection, Database
from app.errors import Conflict, NotFound
from app.jobs import repository as repo
from app.jobs.schemas import ClaimOutcome, JobInfo, JobRun, JobRunPage
from app.jobs.sweep import Sweep
from app.jobs.table import JOBS, Job, Sweepers
from app.settings import SchedulerSettings

logger = logging.getLogger("switchboard.jobs")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def slot_start(now: datetime, interval: timedelta) -> datetime:
    """The start of the interval-aligned slot that contains ``now`` (same on every replica)."""
    slots = (now - _EPOCH) // interval
    return _EPOCH + slots * interval


class JobService:
    """Runs jobs exactly once per slot, lists them and their runs, purges old runs."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: SchedulerSettings,
        replica_id: str,
        sweepers: Sweepers,
    ) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings
        self._sweepers = sweepers
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

        async def progress(conn: Connection, taken: int, details: dict[str, int]) -> None:
            lease = self._lease(self._clock.now())
            await repo.record_progress(conn, run_id, taken, details, lease, self.replica_id)

        sweep = Sweep(self._db, now, self._settings.batch_size, dry_run=dry_run, progress=progress)
        status, error = "succeeded", None
        try:
            for sweep_method in job.sweeps(self._sweepers):
                await sweep_method(sweep)
        except Exception as exc:
            logger.exception("job %s (run %s) failed", job.name, run_id)
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        async with self._db.transaction() as conn:
            run = await repo.finish_run(
                conn, run_id, status, self._clock.now(), error, sweep.details, self.replica_id
            )
        return ClaimOutcome(claimed=True, run=run)

    def _lease(self, now: datetime) -> datetime:
        return now + self._settings.lease

    # -- the job runs' own retention -----------------------------------------------------

    async def purge_finished_runs(self, sweep: Sweep) -> None:
        """Finished runs older than their retention go; a running claim never does."""
        before = sweep.now - self._settings.job_run_retention
        await sweep.step(
            "job_runs_purged",
            lambda conn, limit: repo.purge_finished_runs(conn, before, limit),
            lambda conn: repo.count_purgeable_runs(conn, before),
        )

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
