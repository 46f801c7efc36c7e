"""What the console reads that no API service answers: the overview's counts and the session
search across users. Paged with the API's keyset cursors (app/common/pagination.py)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from app.agents.schemas import Agent
from app.agents.service import AgentService
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.console import repository as repo
from app.console.repository import (
    ActivityBucket,
    AgentHour,
    ArchivedRow,
    SessionFilter,
    SessionRow,
    TaskRow,
)
from app.coordination.breaker_admin import BreakerAdmin
from app.coordination.schemas import BreakerView
from app.db.pool import Database
from app.jobs.schemas import JobInfo
from app.jobs.service import JobService

T = TypeVar("T")
# The overview's window for each agent's task volume, failures and run time.
LAST_HOUR = timedelta(hours=1)
# The overview's chart windows: how far back, in buckets of what size.
WINDOWS = {
    "1h": (timedelta(hours=1), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
}
DEFAULT_WINDOW = "1h"


@dataclass(frozen=True, slots=True)
class Activity:
    """The overview's charts: a window (``1h`` or ``24h``) and its buckets, oldest first.
    The last bucket is the one ``now`` falls in (still filling)."""

    window: str
    step: timedelta
    buckets: list[ActivityBucket]


def window_bounds(now: datetime, window: str) -> tuple[datetime, datetime, timedelta]:
    """``(since, until, step)`` for ``window``: whole buckets aligned to the step (from the
    Unix epoch), the last one holding ``now``."""
    span, step = WINDOWS[window]
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    until = epoch + ((now - epoch) // step + 1) * step
    return until - span, until, step


@dataclass(frozen=True, slots=True)
class AgentRow:
    """An agent with its breaker as this replica holds it."""

    agent: Agent
    breaker: BreakerView
    last_hour: AgentHour | None = None


@dataclass(frozen=True, slots=True)
class Overview:
    """The numbers an operator looks at first."""

    agents: list[AgentRow]
    sessions_by_status: dict[str, int]
    archived_sessions: int
    tasks_by_status: dict[str, int]
    open_dead_letters: int
    undelivered: dict[str, int]
    jobs: list[JobInfo]
    activity: Activity


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One keyset page of rows and the cursor of the next, if any."""

    items: list[T]
    next_cursor: str | None


class ConsoleReads:
    """The console's read model over the same database, agents, breakers and jobs."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        agents: AgentService,
        breakers: BreakerAdmin,
        jobs: JobService,
    ) -> None:
        self._db = database
        self._clock = clock
        self._agents = agents
        self._breakers = breakers
        self._jobs = jobs

    async def agents(self) -> list[AgentRow]:
        """Every registered agent and its breaker."""
        listed = await self._agents.list_agents()
        views = await asyncio.gather(*(self._breakers.breaker(a.name) for a in listed))
        return [AgentRow(agent, view) for agent, view in zip(listed, views, strict=True)]

    async def activity(self, window: str = DEFAULT_WINDOW) -> Activity:
        """Decisions, fallbacks, breaker trips and finished tasks per bucket of ``window``."""
        since, until, step = window_bounds(self._clock.now(), window)
        async with self._db.connection() as conn:
            buckets = await repo.activity_series(conn, since, until, step)
        return Activity(window, step, buckets)

    async def overview(self, window: str = DEFAULT_WINDOW) -> Overview:
        """Agents and breakers (with the last hour's tasks), sessions, tasks, dead letters,
        jobs, undelivered events and the charts of ``window``."""
        activity = await self.activity(window)
        async with self._db.connection() as conn:
            hour = await repo.agent_task_stats_since(conn, self._clock.now() - LAST_HOUR)
            sessions = await repo.sessions_by_status(conn)
            archived = await repo.archived_session_count(conn)
            tasks = await repo.tasks_by_status(conn)
            letters = await repo.open_dead_letter_count(conn)
            undelivered = await repo.undelivered_by_status(conn)
        agents = [
            AgentRow(row.agent, row.breaker, hour.get(row.agent.name))
            for row in await self.agents()
        ]
        return Overview(
            agents=agents,
            sessions_by_status=sessions,
            archived_sessions=archived,
            tasks_by_status=tasks,
            open_dead_letters=letters,
            undelivered=undelivered,
            jobs=await self._jobs.jobs(),
            activity=activity,
        )

    async def search_sessions(
        self, where: SessionFilter, limit: int, cursor: str | None
    ) -> Page[SessionRow]:
        """Sessions of every user matching ``where``, newest first."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            rows = await repo.search_sessions(conn, where, before, limit + 1)
        items, next_cursor = cut_page(rows, limit, lambda r: (r.created_at, r.session_id))
        return Page(items, next_cursor)

    async def archived_sessions(self, limit: int, cursor: str | None) -> Page[ArchivedRow]:
        """Archived sessions, newest first (restorable while ``restorable_until`` is ahead)."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            rows = await repo.list_archived_sessions(conn, before, limit + 1)
        items, next_cursor = cut_page(rows, limit, lambda r: (r.archived_at, r.session_id))
        return Page(items, next_cursor)

    async def tasks(
        self, status: str | None, agent: str | None, limit: int, cursor: str | None
    ) -> Page[TaskRow]:
        """Tasks by status and agent, newest first."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            rows = await repo.list_tasks(conn, status, agent, before, limit + 1)
        items, next_cursor = cut_page(rows, limit, lambda r: (r.created_at, r.task_id))
        return Page(items, next_cursor)
