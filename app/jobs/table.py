"""The jobs: a name, what it does, how often, and the service methods it calls.

Nothing else lives here. What a job changes, and which rows it takes, is the rule of the
feature that owns those rows: each method below is a sweep of that feature's service
(its statements are in that feature's ``.sql``), run by ``JobService`` through a
``Sweep``. The order of the methods is the order of the run's ``details``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from app.jobs.sweep import Sweep
from app.settings import SchedulerSettings

if TYPE_CHECKING:
    from app.agents.service import AgentService
    from app.branches.service import BranchService
    from app.events.service import EventService
    from app.jobs.service import JobService
    from app.memories.retention import MemoryRetention
    from app.sessions.lifecycle import SessionLifecycle
    from app.webhooks.idempotency import IdempotencyService

SweepMethod = Callable[[Sweep], Awaitable[None]]


class Sweepers(Protocol):
    """The services whose sweeps the jobs call (``app.services.Services`` is one)."""

    @property
    def session_lifecycle(self) -> SessionLifecycle:
        """Idling, expiry, warnings, archival of sessions."""
        ...

    @property
    def branches(self) -> BranchService:
        """Branches of sessions: idle ones expire."""
        ...

    @property
    def memory_retention(self) -> MemoryRetention:
        """Memory retention and the access audit's retention."""
        ...

    @property
    def events(self) -> EventService:
        """The event outbox."""
        ...

    @property
    def idempotency(self) -> IdempotencyService:
        """Stored webhook answers."""
        ...

    @property
    def agents(self) -> AgentService:
        """The agent registry: discovered agents' cards."""
        ...

    @property
    def jobs(self) -> JobService:
        """The job runs themselves."""
        ...


@dataclass(frozen=True, slots=True)
class Job:
    """A job: its name, what it does, its interval and the sweeps it runs, in order."""

    name: str
    description: str
    interval: Callable[[SchedulerSettings], timedelta]
    sweeps: Callable[[Sweepers], tuple[SweepMethod, ...]]


JOBS: dict[str, Job] = {
    job.name: job
    for job in (
        Job(
            "inactivity_timeout",
            "active sessions with no activity for the threshold become idle",
            lambda s: s.inactivity_interval,
            lambda on: (on.session_lifecycle.idle_inactive,),
        ),
        Job(
            "expiry_extension",
            "sessions with a process that moved recently live on (not a new version)",
            lambda s: s.extension_interval,
            lambda on: (on.session_lifecycle.extend_running,),
        ),
        Job(
            "expiry_cleanup",
            "expired sessions (not completed ones) move to the archive (restorable for the "
            "recovery window); idle branches of sessions that are not preserved go",
            lambda s: s.expiry_interval,
            lambda on: (
                on.session_lifecycle.archive_expired,
                on.session_lifecycle.purge_archive,
                on.idempotency.purge_expired,
                on.branches.expire_idle,
            ),
        ),
        Job(
            "archival",
            "completed sessions older than the retention move to the archive with history",
            lambda s: s.archival_interval,
            lambda on: (on.session_lifecycle.archive_completed,),
        ),
        Job(
            "memory_retention",
            "expired memories go; old interaction patterns move to the memory archive; each "
            "user affected is told (memory.purged)",
            lambda s: s.retention_interval,
            lambda on: (on.memory_retention.enforce,),
        ),
        Job(
            "housekeeping",
            "the memory access audit trail, finished events and finished job runs older than "
            "their retention are purged",
            lambda s: s.housekeeping_interval,
            lambda on: (
                on.memory_retention.purge_access_log,
                on.events.purge_settled,
                on.jobs.purge_finished_runs,
            ),
        ),
        Job(
            "expiry_warning",
            "users of sessions about to expire are told once (session.expiring)",
            lambda s: s.warning_interval,
            lambda on: (on.session_lifecycle.warn_expiring,),
        ),
        Job(
            "agent_cards",
            "the A2A cards of discovered agents are fetched again (skills and interface kept "
            "current); an agent whose card cannot be fetched or used is marked (card_status)",
            lambda s: s.agent_cards_interval,
            lambda on: (on.agents.refresh_cards,),
        ),
    )
}
