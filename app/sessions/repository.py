"""Session rows in and out of PostgreSQL. Rows leave as :class:`Session` views."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

import asyncpg
import msgspec

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.events.schemas import NewEvent
from app.sessions.schemas import Session, SessionContent, SessionVersion, WrittenContent
from app.sessions.state import show_mirrors, storage_json

Q = QUERIES.sessions


@dataclass(frozen=True, slots=True)
class MergeMark:
    """What a version row records about a merged write: the base it was merged from and,
    for a branch merge, the branch and branch version taken in."""

    base: int
    branch: str | None = None
    branch_version: int | None = None


# Whether a registered agent may be handed a session; None: no agent has that name.
AgentState = Literal["available", "switched_off", "revoked"] | None


def document_fields(row: asyncpg.Record) -> dict[str, Any]:
    """The versioned document of a row (a session, a branch, a version of either) as the
    API shows it: the content columns, the mirrored fields shown, its session and version."""
    state, metadata = show_mirrors(
        row["session_state"],
        row["coordination_metadata"],
        row["progress_percentage"],
        row["priority"],
    )
    return {
        "session_id": row["session_id"],
        "version": row["version"],
        "session_state": state,
        "agent_sequence": row["agent_sequence"],
        "coordination_metadata": metadata,
        "current_agent": row["current_agent"],
        "progress_percentage": row["progress_percentage"],
        "priority": row["priority"],
    }


def version_fields(row: asyncpg.Record) -> dict[str, Any]:
    """A version row (of a session or a branch): its document and how it came to be."""
    return {
        **document_fields(row),
        "changed_by": row["changed_by"],
        "change_reason": row["change_reason"],
        "created_at": row["created_at"],
        "merge_base": row["merge_base"],
    }


def _session(row: asyncpg.Record) -> Session:
    return Session(
        **document_fields(row),
        user_id=row["user_id"],
        session_type=row["session_type"],
        status=row["status"],
        preserve=row["preserve"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_activity_at=row["last_activity_at"],
        expires_at=row["expires_at"],
        completed_at=row["completed_at"],
    )


def _version(row: asyncpg.Record) -> SessionVersion:
    return SessionVersion(
        **version_fields(row),
        status=row["status"],
        merged_branch=row["merged_branch"],
        merged_branch_version=row["merged_branch_version"],
    )


async def insert_session(
    conn: Connection,
    *,
    user_id: UUID,
    session_type: str,
    content: SessionContent,
    now: datetime,
    expires_at: datetime,
    changed_by: str,
) -> Session | None:
    """Insert a new session at version 1 with the version row that records it; None if
    there is no such user."""
    state, sequence, metadata = storage_json(content)
    try:
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
            changed_by,
        )
    except asyncpg.ForeignKeyViolationError as exc:
        if exc.constraint_name == "session_coordination_user_id_fkey":
            return None
        raise
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
    content: WrittenContent,
    changed_by: str,
    change_reason: str,
    now: datetime,
    decision: msgspec.Struct | None = None,
    merge: MergeMark | None = None,
    event: NewEvent | None = None,
) -> tuple[Session, UUID | None] | None:
    """Write new content and record it as the next version, if the session is still at
    ``expected_version``; None otherwise. ``decision`` (a record of coordination_decisions
    columns) is logged with the new version; its id comes back with the session. ``merge``
    marks the version as merged (from which base, which branch). ``event`` goes to the
    outbox with it (its payload given the version and the decision id)."""
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
        None if merge is None else merge.base,
        None if merge is None else merge.branch,
        None if merge is None else merge.branch_version,
        None if event is None else event.event_type,
        None if event is None else event.payload,
    )
    return None if row is None else (_session(row), row["decision_id"])


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


# -- lifecycle: what time does to sessions (app/sessions/lifecycle.py) -----------------------


async def idle_inactive(conn: Connection, inactive_before: datetime, limit: int) -> int:
    """One batch of active sessions quiet since before ``inactive_before`` made idle."""
    return len(await conn.fetch(Q.idle_inactive_sessions, inactive_before, limit))


async def count_inactive(conn: Connection, inactive_before: datetime) -> int:
    """How many sessions the idling would take."""
    return int(await conn.fetchval(Q.count_inactive_sessions, inactive_before))


async def extend_running(
    conn: Connection,
    moved_since: datetime,
    expires_at: datetime,
    expiring_before: datetime,
    limit: int,
) -> int:
    """One batch of sessions whose process moved since ``moved_since`` and that expire
    before ``expiring_before``, given ``expires_at`` (no new version)."""
    return len(
        await conn.fetch(Q.extend_running_sessions, moved_since, expires_at, expiring_before, limit)
    )


async def count_extendable(
    conn: Connection, moved_since: datetime, expiring_before: datetime
) -> int:
    """How many sessions the extension would take."""
    return int(await conn.fetchval(Q.count_extendable_sessions, moved_since, expiring_before))


async def warn_expiring(conn: Connection, now: datetime, until: datetime, limit: int) -> int:
    """One batch of sessions expiring by ``until`` marked warned, with their events."""
    return len(await conn.fetch(Q.warn_expiring_sessions, now, until, limit))


async def count_expiring(conn: Connection, now: datetime, until: datetime) -> int:
    """How many sessions the warning would take."""
    return int(await conn.fetchval(Q.count_expiring_sessions, now, until))


async def archive_expired(
    conn: Connection, now: datetime, restorable_until: datetime, limit: int
) -> int:
    """One batch of expired sessions moved to the archive, with their events."""
    return int(await conn.fetchval(Q.archive_expired_sessions, now, restorable_until, limit))


async def count_expired(conn: Connection, now: datetime) -> int:
    """How many sessions the expiry would archive."""
    return int(await conn.fetchval(Q.count_expired_sessions, now))


async def archive_completed(
    conn: Connection,
    now: datetime,
    completed_before: datetime,
    restorable_until: datetime,
    limit: int,
) -> int:
    """One batch of sessions completed before ``completed_before`` moved to the archive."""
    return int(
        await conn.fetchval(
            Q.archive_completed_sessions, now, completed_before, restorable_until, limit
        )
    )


async def count_archivable(conn: Connection, completed_before: datetime) -> int:
    """How many completed sessions the archival would take."""
    return int(await conn.fetchval(Q.count_archivable_sessions, completed_before))


async def purge_archive(conn: Connection, now: datetime, limit: int) -> int:
    """One batch of archived sessions past their recovery window, gone for good."""
    return len(await conn.fetch(Q.purge_session_archive, now, limit))


async def count_purgeable_archive(conn: Connection, now: datetime) -> int:
    """How many archived sessions are past their recovery window."""
    return int(await conn.fetchval(Q.count_purgeable_session_archive, now))


@dataclass(frozen=True, slots=True)
class ArchivedSession:
    """An archived session: its row and history as JSON, and why it was archived."""

    session_id: UUID
    reason: str
    session: dict[str, Any]
    versions: list[dict[str, Any]]


async def lock_restorable_session(
    conn: Connection, session_id: UUID, now: datetime
) -> ArchivedSession | None:
    """The archived session, row-locked for a restore, if its recovery window is open."""
    row = await conn.fetchrow(Q.lock_restorable_session, session_id, now)
    if row is None:
        return None
    return ArchivedSession(
        session_id=row["session_id"],
        reason=row["reason"],
        session=row["session"],
        versions=row["versions"],
    )


async def session_exists(conn: Connection, session_id: UUID) -> bool:
    """True if the session is live."""
    return bool(await conn.fetchval(Q.session_exists, session_id))


async def restore_session(
    conn: Connection, archived: ArchivedSession, expires_at: datetime, now: datetime
) -> None:
    """Put the row and its history back, drop the archive row, give it a fresh expiry and
    tell subscribers (session.restored)."""
    await conn.execute(Q.restore_session_row, archived.session)
    await conn.execute(Q.restore_session_versions, archived.versions)
    await conn.execute(Q.delete_archived_session, archived.session_id)
    await conn.execute(
        Q.restart_restored_session, archived.session_id, expires_at, now, archived.reason
    )
