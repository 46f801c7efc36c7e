"""Branch rows in and out of PostgreSQL. Rows leave as :class:`Branch` views."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg
import msgspec

from app.branches.schemas import MAIN, Branch, BranchVersion
from app.db.pool import Connection
from app.db.queries import QUERIES
from app.events.schemas import NewEvent
from app.sessions.repository import document_fields, version_fields
from app.sessions.schemas import WrittenContent
from app.sessions.state import storage_json

Q = QUERIES.branches


def _branch(row: asyncpg.Record) -> Branch:
    return Branch(
        **document_fields(row),
        name=row["name"],
        parent=MAIN,
        purpose=row["purpose"],
        owner_agent=row["owner_agent"],
        state=row["state"],
        base_version=row["base_version"],
        forked_at_version=row["forked_at_version"],
        merged_version=row["merged_version"],
        created_by=row["created_by"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        last_activity_at=row["last_activity_at"],
    )


def _version(row: asyncpg.Record) -> BranchVersion:
    return BranchVersion(
        **version_fields(row), branch=row["branch"], parent_version=row["parent_version"]
    )


async def fork_branch(
    conn: Connection,
    session_id: UUID,
    at_version: int,
    name: str,
    purpose: str,
    owner_agent: str,
    created_by: str,
    now: datetime,
) -> Branch | None:
    """A new branch with the content of session version ``at_version``; None if the
    session has no such version. Raises asyncpg.UniqueViolationError for a taken name."""
    row = await conn.fetchrow(
        Q.fork_branch, session_id, at_version, name, purpose, owner_agent, created_by, now
    )
    return None if row is None else _branch(row)


async def list_branches(conn: Connection, session_id: UUID) -> list[Branch]:
    """A session's branches, oldest first."""
    return [_branch(row) for row in await conn.fetch(Q.list_branches, session_id)]


async def get_branch(conn: Connection, session_id: UUID, name: str) -> Branch | None:
    """One branch."""
    row = await conn.fetchrow(Q.get_branch, session_id, name)
    return None if row is None else _branch(row)


async def lock_branch(conn: Connection, session_id: UUID, name: str) -> Branch | None:
    """One branch, row-locked until the transaction ends."""
    row = await conn.fetchrow(Q.lock_branch, session_id, name)
    return None if row is None else _branch(row)


async def update_branch_content(
    conn: Connection,
    branch: Branch,
    content: WrittenContent,
    changed_by: str,
    change_reason: str,
    now: datetime,
    *,
    rebased_onto: int | None = None,
    merge_base: int | None = None,
    decision: msgspec.Struct | None = None,
    event: NewEvent | None = None,
) -> tuple[Branch, UUID | None] | None:
    """Write new content as the branch's next version if it is still open at the version
    ``branch`` has; None otherwise. A coordinator's change comes with its ``decision``
    (stored naming the branch; its id comes back with the branch) and ``event`` (to the
    outbox), written by the same statement."""
    state, sequence, metadata = storage_json(content)
    row = await conn.fetchrow(
        Q.update_branch_content,
        branch.session_id,
        branch.name,
        branch.version,
        state,
        sequence,
        metadata,
        content.current_agent,
        content.progress_percentage,
        content.priority,
        now,
        changed_by,
        change_reason,
        rebased_onto,
        merge_base,
        None if decision is None else msgspec.to_builtins(decision),
        None if event is None else event.event_type,
        None if event is None else event.payload,
    )
    return None if row is None else (_branch(row), row["decision_id"])


async def mark_branch_merged(
    conn: Connection, session_id: UUID, name: str, merged_version: int, now: datetime
) -> Branch:
    """Record that the branch was merged as session version ``merged_version``."""
    row = await conn.fetchrow(Q.mark_branch_merged, session_id, name, merged_version, now)
    if row is None:  # the caller holds the branch's row lock
        raise RuntimeError("merged branch vanished")
    return _branch(row)


async def delete_branch(conn: Connection, session_id: UUID, name: str) -> bool:
    """Delete a branch and its versions; False if there was none."""
    return await conn.fetchval(Q.delete_branch, session_id, name) is not None


async def list_branch_versions(
    conn: Connection, session_id: UUID, name: str, before_version: int, limit: int
) -> list[BranchVersion]:
    """A page of a branch's history, newest first."""
    rows = await conn.fetch(Q.list_branch_versions, session_id, name, before_version, limit)
    return [_version(row) for row in rows]


async def get_branch_version(
    conn: Connection, session_id: UUID, name: str, version: int
) -> BranchVersion | None:
    """One version of a branch."""
    row = await conn.fetchrow(Q.get_branch_version, session_id, name, version)
    return None if row is None else _version(row)


async def graph_rows(
    conn: Connection, session_id: UUID
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The session's versions and its branches' versions, content left out."""
    main = [dict(row) for row in await conn.fetch(Q.session_graph_main, session_id)]
    branches = [dict(row) for row in await conn.fetch(Q.session_graph_branches, session_id)]
    return main, branches


async def expire_idle(conn: Connection, idle_before: datetime, limit: int) -> int:
    """One batch of idle open branches deleted (never one of a preserved session)."""
    return len(await conn.fetch(Q.expire_idle_branches, idle_before, limit))


async def count_idle(conn: Connection, idle_before: datetime) -> int:
    """How many branches the expiry would take."""
    return int(await conn.fetchval(Q.count_idle_branches, idle_before))
