"""What the console reads: what no API service answers (the overview's counts, the session
search across users), and the pages that gather from several services (a session's, an
agent's), each part from the service the API's route calls. Paged with the API's keyset
cursors (app/common/pagination.py).

A page's handler asks Litestar for this one object, not for each service: Litestar resolves
two or more independent dependencies of a handler in an anyio task group, a task per
dependency per request (tests/unit/test_dependencies.py holds every route to one)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Generic, TypeVar
from uuid import UUID

from app.agents.schemas import Agent, PublishedCard
from app.auth.principal import Principal
from app.branches.schemas import BranchList
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.console import repository as repo
from app.console.diff import VersionDiff, diff_versions
from app.console.repository import (
    ActivityBucket,
    AgentHour,
    ArchivedRow,
    SessionFilter,
    SessionRow,
    TaskRow,
)
from app.coordination.schemas import BreakerView, DecisionPage
from app.db.pool import Database
from app.errors import NotFound
from app.jobs.schemas import JobInfo
from app.memories.schemas import MemoryPage
from app.sessions.schemas import Session, SessionVersionPage
from app.tasks.schemas import TaskPage

if TYPE_CHECKING:
    from app.agents.service import AgentService
    from app.branches.service import BranchService
    from app.coordination.breaker_admin import BreakerAdmin
    from app.coordination.service import CoordinationService
    from app.jobs.service import JobService
    from app.memories.service import MemoryService
    from app.sessions.service import SessionService
    from app.tasks.service import TaskService

T = TypeVar("T")
# The overview's window for each agent's task volume, failures and run time.
LAST_HOUR = timedelta(hours=1)
# The overview's chart windows: how far back, in buckets of what size.
WINDOWS = {
    "1h": (timedelta(hours=1), timedelta(minutes=5)),
    "24h": (timedelta(hours=24), timedelta(hours=1)),
}
DEFAULT_WINDOW = "1h"
# Short lists on the console's pages (a session's versions, decisions, tasks and memories,
# an agent's recent tasks, the archived sessions); each links to the full, paged list.
PAGE_ROWS = 20


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


@dataclass(frozen=True, slots=True)
class SessionPage:
    """A session's page: the session, its versions with the diff of two of them, its
    decisions, branches and tasks, and the memories the operator's key sees for it (what
    the context endpoint gives) with their categories' retention."""

    session: Session
    versions: SessionVersionPage
    diff: VersionDiff | None
    old: int
    new: int
    decisions: DecisionPage
    branches: BranchList
    tasks: TaskPage
    memories: MemoryPage
    retention: dict[str, int | None]


@dataclass(frozen=True, slots=True)
class AgentPage:
    """An agent's page: its registry entry, its A2A card as stored (if any), its breaker as
    this replica holds it, and its recent tasks."""

    agent: Agent
    card: PublishedCard | None
    breaker: BreakerView
    tasks: Page[TaskRow]


class ConsoleReads:
    """The console's read model over the same database and the API's services."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        *,
        agents: AgentService,
        breakers: BreakerAdmin,
        jobs: JobService,
        sessions: SessionService,
        branches: BranchService,
        coordinator: CoordinationService,
        tasks: TaskService,
        memories: MemoryService,
    ) -> None:
        self._db = database
        self._clock = clock
        self._agents = agents
        self._breakers = breakers
        self._jobs = jobs
        self._sessions = sessions
        self._branches = branches
        self._coordinator = coordinator
        self._tasks = tasks
        self._memories = memories

    async def session_page(
        self,
        session_id: UUID,
        principal: Principal,
        old: int | None,
        new: int | None,
        versions_cursor: str | None,
        memories_cursor: str | None,
    ) -> SessionPage:
        """The session's page; the diff is from ``old`` (default: the version before
        ``new``) to ``new`` (default: the current one), none when they are the same."""
        session = await self._sessions.get_session(session_id)
        versions = await self._sessions.list_versions(session_id, PAGE_ROWS, versions_cursor)
        new_version = new if new is not None else session.version
        old_version = old if old is not None else max(new_version - 1, 1)
        diff = None
        if old_version != new_version:
            diff = diff_versions(
                await self._sessions.get_version(session_id, old_version),
                await self._sessions.get_version(session_id, new_version),
            )
        return SessionPage(
            session=session,
            versions=versions,
            diff=diff,
            old=old_version,
            new=new_version,
            decisions=await self._coordinator.list_decisions(session_id, PAGE_ROWS, None),
            branches=await self._branches.list_branches(session_id),
            tasks=await self._tasks.list_for_session(session_id, PAGE_ROWS, None),
            memories=await self._memories.session_memories(
                session_id, principal, PAGE_ROWS, memories_cursor
            ),
            retention={c.name: c.retention_seconds for c in await self._memories.list_categories()},
        )

    async def agent_page(self, name: str) -> AgentPage:
        """The agent's page (404 for an unknown agent)."""
        agent = await self._agents.get_agent(name)
        try:
            card: PublishedCard | None = await self._agents.get_card(name)
        except NotFound:
            card = None
        return AgentPage(
            agent=agent,
            card=card,
            breaker=await self._breakers.breaker(name),
            tasks=await self.tasks(None, name, PAGE_ROWS, None),
        )

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
