"""The console's own reads: one typed function per named query in sql/queries/console.sql.

Only what no service already answers lives here (counts across every session, the search
across users); everything else the console shows comes from the services the API uses."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from app.db.pool import Connection
from app.db.queries import QUERIES

Q = QUERIES.console


@dataclass(frozen=True, slots=True)
class SessionRow:
    """One line of the session search."""

    session_id: UUID
    user_id: UUID
    external_ref: str | None
    session_type: str
    status: str
    priority: str
    current_agent: str | None
    version: int
    preserve: bool
    created_at: datetime
    updated_at: datetime
    expires_at: datetime


@dataclass(frozen=True, slots=True)
class ArchivedRow:
    """One archived session (expired or completed), restorable until a time."""

    session_id: UUID
    user_id: UUID
    external_ref: str | None
    reason: str
    archived_at: datetime
    restorable_until: datetime


@dataclass(frozen=True, slots=True)
class TaskRow:
    """One line of the task list."""

    task_id: UUID
    session_id: UUID | None
    agent_name: str
    kind: str
    status: str
    attempt: int
    max_attempts: int
    created_by: str
    created_at: datetime
    finished_at: datetime | None
    last_error: str | None
    trace_id: str | None


@dataclass(frozen=True, slots=True)
class SessionFilter:
    """What the session search narrows by; None skips a filter."""

    user: str | None = None
    status: str | None = None
    agent: str | None = None
    created_from: datetime | None = None
    created_until: datetime | None = None


@dataclass(frozen=True, slots=True)
class AgentHour:
    """An agent's tasks over a recent window: volume, failures, run time."""

    tasks: int
    failed: int
    p50_ms: int | None
    p95_ms: int | None

    @property
    def failure_percent(self) -> int:
        """Failed tasks as a whole percentage of all."""
        return round(100 * self.failed / self.tasks) if self.tasks else 0


def uuid7_floor(when: datetime) -> UUID:
    """The smallest uuid7 made at or after ``when`` (its 48-bit millisecond prefix, then 0)."""
    return UUID(int=int(when.timestamp() * 1000) << 80)


async def agent_task_stats_since(conn: Connection, since: datetime) -> dict[str, AgentHour]:
    """Per agent: tasks created since ``since``, failures and run-time percentiles."""
    rows = await conn.fetch(Q.agent_task_stats_since, uuid7_floor(since))
    return {
        row["agent_name"]: AgentHour(row["tasks"], row["failed"], row["p50_ms"], row["p95_ms"])
        for row in rows
    }


async def counts_by_status(conn: Connection, query: str) -> dict[str, int]:
    """``{status: count}`` from one of the GROUP BY status queries."""
    return {row["status"]: row["n"] for row in await conn.fetch(query)}


async def sessions_by_status(conn: Connection) -> dict[str, int]:
    """Live sessions per status."""
    return await counts_by_status(conn, Q.sessions_by_status)


async def tasks_by_status(conn: Connection) -> dict[str, int]:
    """Agent tasks per status."""
    return await counts_by_status(conn, Q.tasks_by_status)


async def undelivered_by_status(conn: Connection) -> dict[str, int]:
    """Event deliveries not delivered, per status (pending, dead)."""
    return await counts_by_status(conn, Q.undelivered_by_status)


async def archived_session_count(conn: Connection) -> int:
    """Sessions in the archive."""
    return int(await conn.fetchval(Q.archived_session_count))


async def open_dead_letter_count(conn: Connection) -> int:
    """Dead letters neither requeued nor discarded."""
    return int(await conn.fetchval(Q.open_dead_letter_count))


async def search_sessions(
    conn: Connection, where: SessionFilter, before: tuple[datetime, UUID], limit: int
) -> list[SessionRow]:
    """Sessions matching ``where``, newest first, strictly before the cursor ``before``."""
    rows = await conn.fetch(
        Q.search_sessions,
        where.user,
        where.status,
        where.agent,
        where.created_from,
        where.created_until,
        before[0],
        before[1],
        limit,
    )
    return [SessionRow(**dict(row)) for row in rows]


async def list_archived_sessions(
    conn: Connection, before: tuple[datetime, UUID], limit: int
) -> list[ArchivedRow]:
    """Archived sessions, newest first, strictly before the cursor ``before``."""
    rows = await conn.fetch(Q.list_archived_sessions, before[0], before[1], limit)
    return [ArchivedRow(**dict(row)) for row in rows]


async def list_tasks(
    conn: Connection,
    status: str | None,
    agent: str | None,
    before: tuple[datetime, UUID],
    limit: int,
) -> list[TaskRow]:
    """Tasks of every session and agent, newest first, strictly before the cursor."""
    rows = await conn.fetch(Q.list_tasks, status, agent, before[0], before[1], limit)
    return [TaskRow(**dict(row)) for row in rows]


@dataclass(frozen=True, slots=True)
class ActivityBucket:
    """One interval of the overview's charts."""

    bucket: datetime
    decisions: int
    fallbacks: int
    trips: int
    completed: int
    failed: int


async def activity_series(
    conn: Connection, since: datetime, until: datetime, step: timedelta
) -> list[ActivityBucket]:
    """Every bucket of ``step`` in [since, until), oldest first, with its decisions,
    fallbacks, breaker trips and finished tasks (zero where nothing happened)."""
    rows = await conn.fetch(Q.activity_series, since, until, step)
    return [ActivityBucket(**dict(row)) for row in rows]
