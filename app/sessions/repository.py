"""Session rows in and out of PostgreSQL. Rows leave as :class:`Session` views."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal
from uuid import UUID

import asyncpg
import msgspec

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.sessions.schemas import Session, SessionContent, SessionVersion
from app.sessions.state import show_mirrors, storage_json

Q = QUERIES.sessions

# Whether a registered agent may be handed a session; None: no agent has that name.
AgentState = Literal["available", "switched_off", "revoked"] | None


def _session(row: asyncpg.Record) -> Session:
    state, metadata = show_mirrors(
        row["session_state"],
        row["coordination_metadata"],
        row["progress_percentage"],
        row["priority"],
    )
    return Session(
        session_id=row["session_id"],
        user_id=row["user_id"],
        session_type=row["session_type"],
        status=row["status"],
        priority=row["priority"],
        current_agent=row["current_agent"],
        agent_sequence=row["agent_sequence"],
        session_state=state,
        coordination_metadata=metadata,
        progress_percentage=row["progress_percentage"],
        preserve=row["preserve"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_activity_at=row["last_activity_at"],
        expires_at=row["expires_at"],
        completed_at=row["completed_at"],
    )


def _version(row: asyncpg.Record) -> SessionVersion:
    state, metadata = show_mirrors(
        row["session_state"],
        row["coordination_metadata"],
        row["progress_percentage"],
        row["priority"],
    )
    return SessionVersion(
        session_id=row["session_id"],
        version=row["version"],
        session_state=state,
        agent_sequence=row["agent_sequence"],
        coordination_metadata=metadata,
        current_agent=row["current_agent"],
        progress_percentage=row["progress_percentage"],
        status=row["status"],
        priority=row["priority"],
        changed_by=row["changed_by"],
        change_reason=row["change_reason"],
        created_at=row["created_at"],
    )


async def insert_session(
    conn: Connection,
    *,
    user_id: UUID,
    session_type: str,
    content: SessionContent,
    now: datetime,
    expires_at: datetime,
) -> Session:
    """Insert a new session at version 1."""
    state, sequence, metadata = storage_json(content)
    row = await conn.fetchrow(
        Q.insert_session,
        user_id,
        session_type,
        content.priority,
        content.current_agent,
        sequence,
        state,
        metadata,
        content.progress_percentage,
        content.preserve,
        now,
        expires_at,
    )
    if row is None:  # INSERT ... RETURNING always returns the row
        raise RuntimeError("insert_session returned no row")
    return _session(row)


async def get_session(conn: Connection, session_id: UUID) -> Session | None:
    """One session by id."""
    row = await conn.fetchrow(Q.get_session, session_id)
    return None if row is None else _session(row)


async def get_session_for_handoff(
    conn: Connection, session_id: UUID, agent_name: str
) -> tuple[Session | None, AgentState]:
    """One session by id, and the state of the agent named to take it over (None if no
    agent has that name)."""
    row = await conn.fetchrow(Q.get_session_for_handoff, session_id, agent_name)
    if row is None:
        return None, None
    state: AgentState = row["to_agent_state"]
    return _session(row), state


async def lock_session(conn: Connection, session_id: UUID) -> Session | None:
    """One session, row-locked until the transaction ends."""
    row = await conn.fetchrow(Q.lock_session, session_id)
    return None if row is None else _session(row)


async def update_session_content(
    conn: Connection,
    session_id: UUID,
    expected_version: int,
    content: SessionContent,
    changed_by: str,
    change_reason: str,
    now: datetime,
    decision: msgspec.Struct | None = None,
) -> tuple[Session, UUID | None] | None:
    """Write new content and record it as the next version, if the session is still at
    ``expected_version``; None otherwise. ``decision`` (a record of coordination_decisions
    columns) is logged with the new version; its id comes back with the session."""
    state, sequence, metadata = storage_json(content)
    row = await conn.fetchrow(
        Q.update_session_content,
        session_id,
        expected_version,
        state,
        sequence,
        metadata,
        content.current_agent,
        content.progress_percentage,
        content.status,
        content.priority,
        content.preserve,
        content.completed_at,
        now,
        changed_by,
        change_reason,
        None if decision is None else msgspec.to_builtins(decision),
    )
    return None if row is None else (_session(row), row["decision_id"])


async def insert_session_version(
    conn: Connection,
    session_id: UUID,
    version: int,
    content: SessionContent,
    changed_by: str,
    change_reason: str,
    now: datetime,
) -> None:
    """Record one committed change."""
    state, sequence, metadata = storage_json(content)
    await conn.execute(
        Q.insert_session_version,
        session_id,
        version,
        state,
        sequence,
        metadata,
        content.current_agent,
        content.progress_percentage,
        content.status,
        content.priority,
        changed_by,
        change_reason,
        now,
    )


async def touch_session(
    conn: Connection, session_id: UUID, now: datetime, extension: timedelta
) -> Session | None:
    """Heartbeat; None if the session does not exist."""
    row = await conn.fetchrow(Q.touch_session, session_id, now, extension)
    return None if row is None else _session(row)


async def list_user_sessions(
    conn: Connection,
    user_id: UUID,
    status: str | None,
    before: tuple[datetime, UUID],
    limit: int,
) -> list[Session]:
    """A keyset page of a user's sessions, newest first, strictly before ``before``."""
    if status is None:
        rows = await conn.fetch(Q.list_user_sessions, user_id, before[0], before[1], limit)
    else:
        rows = await conn.fetch(
            Q.list_user_sessions_by_status, user_id, status, before[0], before[1], limit
        )
    return [_session(row) for row in rows]


async def list_session_versions(
    conn: Connection, session_id: UUID, before_version: int, limit: int
) -> list[SessionVersion]:
    """A page of a session's history, newest first."""
    rows = await conn.fetch(Q.list_session_versions, session_id, before_version, limit)
    return [_version(row) for row in rows]


async def get_session_version(
    conn: Connection, session_id: UUID, version: int
) -> SessionVersion | None:
    """One version of a session."""
    row = await conn.fetchrow(Q.get_session_version, session_id, version)
    return None if row is None else _version(row)
