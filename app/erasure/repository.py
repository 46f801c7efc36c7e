"""Erasure statements (sql/queries/erasure.sql): find a user's footprint, then delete or
redact every row that holds it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.memories.schemas import AuditQuery

Q = QUERIES.erasure


@dataclass(frozen=True, slots=True)
class Footprint:
    """What identifies a user's data: the ids of their sessions and memories, live or
    archived, read while the user is locked; and the id the erasure will be recorded under."""

    erasure_id: UUID
    session_ids: list[UUID]
    memory_ids: list[UUID]


def _count(status: str) -> int:
    """Rows an UPDATE or DELETE touched, from its command tag ("UPDATE 3")."""
    return int(status.rsplit(" ", 1)[-1])


async def lock_user_sessions(conn: Connection, user_id: UUID) -> None:
    """Lock the user's live sessions (before the user: see the statement)."""
    await conn.execute(Q.lock_user_sessions, user_id)


async def lock_user(conn: Connection, user_id: UUID) -> bool:
    """Lock the user's row until commit; False if there is no such user."""
    return await conn.fetchval(Q.lock_user, user_id) is not None


async def user_footprint(conn: Connection, user_id: UUID) -> Footprint:
    """The user's session and memory ids, and a new erasure id."""
    row = await conn.fetchrow(Q.user_footprint, user_id)
    if row is None:  # a SELECT without FROM always returns one row
        raise RuntimeError("user_footprint returned no row")
    return Footprint(
        erasure_id=row["erasure_id"],
        session_ids=list(row["session_ids"]),
        memory_ids=list(row["memory_ids"]),
    )


# The next four scan their table in full; ``time_limit`` (seconds) replaces the pool's
# command timeout for them.


async def redact_access_log(
    conn: Connection, user_id: UUID, ids: list[UUID], erasure_id: UUID, time_limit: float
) -> int:
    """Redact audit rows naming ``ids`` or matching the user's memory content; how many."""
    status = await conn.execute(Q.redact_access_log, user_id, ids, erasure_id, timeout=time_limit)
    return _count(status)


async def delete_idempotency_keys(conn: Connection, ids: list[UUID], time_limit: float) -> int:
    """Forget stored webhook responses that name ``ids``; how many."""
    return int(await conn.fetchval(Q.delete_idempotency_keys, ids, timeout=time_limit))


async def delete_events(conn: Connection, ids: list[UUID], time_limit: float) -> tuple[int, int]:
    """Delete events whose payload names ``ids``; (events, their deliveries)."""
    row = await conn.fetchrow(Q.delete_events, ids, timeout=time_limit)
    if row is None:
        raise RuntimeError("delete_events returned no row")
    return int(row["events"]), int(row["deliveries"])


async def redact_job_runs(
    conn: Connection, ids: list[UUID], erasure_id: UUID, time_limit: float
) -> int:
    """Redact job run errors and details that name ``ids``; how many runs."""
    return _count(await conn.execute(Q.redact_job_runs, ids, erasure_id, timeout=time_limit))


async def delete_user_memories(conn: Connection, user_id: UUID) -> dict[str, int]:
    """Delete the user's memories, live, archived and on branches; rows per table."""
    row = await conn.fetchrow(Q.delete_user_memories, user_id)
    if row is None:
        raise RuntimeError("delete_user_memories returned no row")
    return {table: int(count) for table, count in row.items()}


async def delete_user(conn: Connection, user_id: UUID) -> dict[str, int]:
    """Delete the user, their sessions with history and decisions, and their archived
    sessions; rows per table."""
    row = await conn.fetchrow(Q.delete_user, user_id)
    if row is None:
        raise RuntimeError("delete_user returned no row")
    return {table: int(count) for table, count in row.items()}


async def record_erasure(
    conn: Connection,
    *,
    erasure_id: UUID,
    user_id: UUID,
    scope: str,
    erased_by: str,
    acting_principal: str | None,
    at: datetime,
    counts: dict[str, dict[str, int]],
    audit_query: AuditQuery,
    memories_erased: int,
) -> None:
    """Write the erasure record (user id hashed) and its audit row."""
    await conn.execute(
        Q.record_erasure,
        erasure_id,
        user_id,
        scope,
        erased_by,
        at,
        counts,
        acting_principal,
        audit_query,
        memories_erased,
    )
