"""APScheduler wiring. Every replica schedules every job; the slot claim in ``job_runs``
makes sure only one of them runs each slot (APScheduler 3 cannot share a job store between
processes, so the exactly-once guarantee lives in PostgreSQL, not in APScheduler)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from apscheduler.schedulers.asyncio import AsyncIOScheduler

from app.events.hub import EventHub
from app.events.service import EventService
from app.jobs.service import JobService
from app.jobs.table import JOBS
from app.tracing import Tracing

logger = logging.getLogger("switchboard.scheduler")


class Scheduler:
    """Triggers jobs on their intervals and delivers events; calls services only."""

    def __init__(
        self, jobs: JobService, events: EventService, hub: EventHub, tracing: Tracing
    ) -> None:
        self._jobs = jobs
        self._events = events
        self._hub = hub
        self._tracing = tracing
        self._scheduler = AsyncIOScheduler(timezone="UTC")

    def start(self) -> None:
        """Add the triggers and start (needs a running event loop)."""
        settings = self._jobs.settings
        for name, job in JOBS.items():
            self._scheduler.add_job(
                self._run,
                "interval",
                seconds=job.interval(settings).total_seconds(),
                args=[name],
                id=name,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=None,
            )
        # Events are delivered, and numbered, on one interval. Numbered here too, not only by
        # a process that serves streams: where nobody streams for days, the events of every
        # write would pile up unnumbered, and the first stream to open would have to number
        # all of them (a million after an expiry sweep of a million sessions) before it could
        # start. Every replica runs it; the numbering's advisory lock lets one at a time
        # through, the others find nothing.
        event_jobs: dict[str, Callable[[], Awaitable[object]]] = {
            "delivery": self._events.deliver_due,
            "numbering": self._hub.number_committed,
        }
        for name, call in event_jobs.items():
            self._scheduler.add_job(
                self._guarded,
                "interval",
                seconds=settings.delivery_interval.total_seconds(),
                args=[name, call],
                id=f"event_{name}",
                max_instances=1,
                coalesce=True,
            )
        self._scheduler.start()
        logger.info("scheduler started (%s), replica %s", ", ".join(JOBS), self._jobs.replica_id)

    def shutdown(self) -> None:
        """Stop triggering (runs in progress finish on their own)."""
        if self._scheduler.running:
            self._scheduler.shutdown(wait=False)

    async def _run(self, name: str) -> None:
        # Each run is a trace of its own: its log lines and the calls it makes share an id.
        with self._tracing.span(f"job {name}"):
            try:
                outcome = await self._jobs.run_scheduled(name)
            except Exception:
                logger.exception("job %s could not run", name, extra={"job": name})
                return
            run = outcome.run
            if not outcome.claimed or run is None:
                return
            # Quiet in steady state: a run that changed nothing is worth a DEBUG line only.
            level = (
                logging.WARNING
                if run.status != "succeeded"
                else logging.INFO
                if run.rows_affected
                else logging.DEBUG
            )
            logger.log(
                level,
                "job %s: %s, %d rows",
                name,
                run.status,
                run.rows_affected,
                extra={"job": name, "status": run.status, "rows": run.rows_affected},
            )

    async def _guarded(self, name: str, call: Callable[[], Awaitable[object]]) -> None:
        """One run of the event job ``event_<name>``, a trace of its own; a failure is
        logged and the next interval tries again."""
        with self._tracing.span(f"job event_{name}"):
            try:
                await call()
            except Exception:
                logger.exception("event %s failed; will retry", name, extra={"job": name})
