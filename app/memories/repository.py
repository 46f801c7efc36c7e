"""Memory rows in and out of PostgreSQL. Access levels are applied by the statements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, NamedTuple
from uuid import UUID

import asyncpg

from app.common.jsontypes import JsonValue
from app.common.pagination import FIRST_PAGE
from app.db.pool import Connection
from app.db.queries import QUERIES
from app.memories.schemas import (
    AccessLevel,
    AccessLogEntry,
    AuditQuery,
    Category,
    Memory,
    MemoryType,
)
from app.webhooks.idempotency import ClaimedWrite, KeyClaim

Q = QUERIES.memories


class AccessLogRow(NamedTuple):
    """One audit row to append, in insert_access_log's parameter order."""

    agent_name: str
    acting_principal: str | None
    action: str
    memory_id: UUID | None
    query: AuditQuery | None
    allowed: bool
    rows: int
    at: datetime


@dataclass(frozen=True, slots=True)
class Reader:
    """Whose access rules a statement applies: the caller's name (it always sees what it
    wrote itself), the admin flag and the agent's roles."""

    name: str
    is_admin: bool
    roles: list[str]


@dataclass(frozen=True, slots=True)
class WriteReference:
    """The reference data a write is validated against."""

    types: dict[str, str]
    categories: dict[str, str]
    levels: frozenset[str]
    users: frozenset[UUID]
    session_owners: dict[UUID, UUID]


@dataclass(frozen=True, slots=True)
class MemoryFilter:
    """Optional filters of a memory list; at least one of the first four is set."""

    user_id: UUID | None = None
    session_id: UUID | None = None
    agent_name: str | None = None
    # A JSON object or array the content must contain (jsonb @>).
    contains: JsonValue = None
    memory_type: str | None = None
    category: str | None = None
    since: datetime | None = None


def _access(reader: Reader) -> tuple[bool, list[str], str]:
    """The access parameters of the single-memory statements: is_admin, roles, caller."""
    return reader.is_admin, reader.roles, reader.name


def row_values(columns: tuple[str, ...]) -> Callable[[asyncpg.Record], tuple[Any, ...]]:
    """What takes a row's values in the order of ``columns``, a memory struct's fields, for
    the struct to take positionally (the cheapest way to build many: itemgetter is C)."""
    return itemgetter(*columns)


# A memory row's values, in the order of Memory's fields.
memory_values = row_values(Memory.__struct_fields__)


def _memory(row: asyncpg.Record) -> Memory:
    return Memory(*memory_values(row))


def _category(row: asyncpg.Record) -> Category:
    retention: timedelta | None = row["retention"]
    return Category(
        name=row["name"],
        retention_seconds=None if retention is None else int(retention.total_seconds()),
        default_access_level=row["default_access_level"],
        description=row["description"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


async def write_reference(
    conn: Connection, user_ids: list[UUID], session_ids: list[UUID]
) -> WriteReference:
    """Types, categories and levels, and which of the named users and sessions exist (with
    each session's owner)."""
    row = await conn.fetchrow(Q.write_reference, user_ids, session_ids)
    if row is None:  # a SELECT without FROM always returns one row
        raise RuntimeError("write_reference returned no row")
    return _reference(row)


def _reference(row: asyncpg.Record, prefix: str = "") -> WriteReference:
    return WriteReference(
        types=row[prefix + "types"],
        categories=row[prefix + "categories"],
        levels=frozenset(row[prefix + "levels"]),
        users=frozenset(row[prefix + "users"]),
        session_owners={UUID(s): UUID(u) for s, u in row[prefix + "session_owners"].items()},
    )


async def insert_checked_memory(
    conn: Connection,
    *,
    user_id: UUID,
    session_id: UUID | None,
    agent_name: str,
    memory_type: str,
    category: str | None,
    key: str | None,
    content: JsonValue,
    content_size: int,
    access_level: str | None,
    now: datetime,
    acting_principal: str | None,
) -> Memory | WriteReference:
    """The memory inserted and audited, if it passes the checks against the reference
    data and its key is free; else the reference data it was checked against, to say why
    (read from the row only then)."""
    row = await conn.fetchrow(
        Q.insert_checked_memory,
        user_id,
        session_id,
        agent_name,
        memory_type,
        category,
        key,
        content,
        content_size,
        access_level,
        now,
        acting_principal,
    )
    if row is None:  # the reference CTE is one row, joined to what was stored
        raise RuntimeError("insert_checked_memory returned no row")
    return _reference(row, "ref_") if row["memory_id"] is None else _memory(row)


async def insert_checked_memory_claiming_key(
    conn: Connection,
    *,
    user_id: UUID,
    session_id: UUID | None,
    agent_name: str,
    memory_type: str,
    category: str | None,
    content: JsonValue,
    content_size: int,
    access_level: str | None,
    now: datetime,
    acting_principal: str | None,
    claim: KeyClaim,
) -> ClaimedWrite:
    """A new memory without a key, checked, inserted and audited with the claim of the
    request's Idempotency-Key and its stored answer, in one statement: what it did."""
    row = await conn.fetchrow(
        Q.insert_checked_memory_claiming_key,
        user_id,
        session_id,
        agent_name,
        memory_type,
        category,
        content,
        content_size,
        access_level,
        now,
        acting_principal,
        claim.principal,
        claim.key,
        claim.endpoint,
        claim.fingerprint,
        claim.now,
        claim.expires_at,
        claim.owner,
        claim.lease_expires_at,
        claim.renewed_before,
    )
    if row is None:  # one row, joined to the claim if there was one
        raise RuntimeError("insert_checked_memory_claiming_key returned no row")
    return ClaimedWrite(token=row["token"], answer=row["answer"])


async def insert_memory(
    conn: Connection,
    *,
    user_id: UUID,
    session_id: UUID | None,
    agent_name: str,
    memory_type: str,
    category: str,
    key: str | None,
    content: JsonValue,
    content_size: int,
    access_level: str,
    now: datetime,
    acting_principal: str | None,
) -> Memory | None:
    """Insert and audit it as a "write" by ``agent_name``, its owner; None (nothing
    written, nothing logged) if the key is taken."""
    row = await conn.fetchrow(
        Q.insert_memory,
        user_id,
        session_id,
        agent_name,
        memory_type,
        category,
        key,
        content,
        content_size,
        access_level,
        now,
        acting_principal,
    )
    return None if row is None else _memory(row)


async def lock_memory_by_key(
    conn: Connection, user_id: UUID, category: str, key: str, now: datetime, reader: Reader
) -> Memory | None:
    """The named memory, row-locked, if it is live and the reader may see it."""
    row = await conn.fetchrow(Q.lock_memory_by_key, user_id, category, key, now, *_access(reader))
    return None if row is None else _memory(row)


async def retire_expired_memory_by_key(
    conn: Connection, user_id: UUID, category: str, key: str, now: datetime
) -> bool:
    """Remove (or archive, as retention would) an expired memory holding the key; True if
    there was one."""
    return bool(await conn.fetchval(Q.retire_expired_memory_by_key, user_id, category, key, now))


async def update_memory(
    conn: Connection,
    *,
    memory_id: UUID,
    content: JsonValue,
    content_size: int,
    access_level: str,
    memory_type: str,
    session_id: UUID | None,
    now: datetime,
    expected_version: int,
    reader: Reader,
) -> Memory | None:
    """Rewrite for ``reader`` (the memory keeps its owner); None if the version moved or the
    reader may not see the memory."""
    row = await conn.fetchrow(
        Q.update_memory,
        memory_id,
        content,
        content_size,
        access_level,
        memory_type,
        session_id,
        reader.name,
        now,
        expected_version,
        reader.is_admin,
        reader.roles,
    )
    return None if row is None else _memory(row)


async def get_memory(
    conn: Connection, memory_id: UUID, now: datetime, reader: Reader
) -> Memory | None:
    """One memory, if it is live and the reader may see it."""
    row = await conn.fetchrow(Q.get_memory, memory_id, now, *_access(reader))
    return None if row is None else _memory(row)


async def get_memory_by_key(
    conn: Connection, user_id: UUID, category: str, key: str, now: datetime, reader: Reader
) -> Memory | None:
    """The named memory, if it is live and the reader may see it."""
    row = await conn.fetchrow(Q.get_memory_by_key, user_id, category, key, now, *_access(reader))
    return None if row is None else _memory(row)


async def delete_memory(conn: Connection, memory_id: UUID, now: datetime, reader: Reader) -> bool:
    """Delete a live memory the reader may see; False if there was none."""
    deleted = await conn.fetchval(Q.delete_memory, memory_id, now, *_access(reader))
    return deleted is not None


async def list_memories(
    conn: Connection,
    where: MemoryFilter,
    before: tuple[datetime, UUID],
    now: datetime,
    reader: Reader,
    limit: int,
    audit: tuple[str | None, AuditQuery],
) -> list[Memory]:
    """A keyset page of up to ``limit`` rows (fetch one more than a page), newest first,
    through the index that fits the filter. The same statement writes the read's audit
    row: ``audit`` is (acting principal, the filters as asked); the reader is logged as the
    agent, and sees its own memories as well as those its levels allow."""
    # The statements differ only in the index they read through (memories.sql says why).
    if where.session_id is not None:
        query = Q.list_memories_by_session
    elif where.user_id is not None:
        query = Q.list_memories_by_user
    else:
        query = Q.list_memories_by_agent_or_content
    rows = await conn.fetch(
        query,
        where.session_id,
        where.user_id,
        where.agent_name,
        where.contains,
        where.memory_type,
        where.category,
        where.since,
        before[0],
        before[1],
        now,
        reader.is_admin,
        reader.roles,
        reader.name,
        limit,
        *audit,
    )
    return [_memory(row) for row in rows]


async def list_context_memories(
    conn: Connection,
    user_id: UUID,
    session_id: UUID,
    now: datetime,
    reader: Reader,
    limit: int,
    before: tuple[datetime, UUID] = FIRST_PAGE,
) -> list[Memory]:
    """The session's and the user's session-less memories the reader may see, newest
    first, older than ``before`` (a keyset cursor; the first page by default)."""
    rows = await conn.fetch(
        Q.list_context_memories,
        user_id,
        session_id,
        now,
        reader.is_admin,
        reader.roles,
        limit,
        reader.name,
        before[0],
        before[1],
    )
    return [_memory(row) for row in rows]


async def list_access_log(
    conn: Connection,
    agent_name: str | None,
    since: datetime,
    before: tuple[datetime, UUID],
    limit: int,
) -> list[AccessLogEntry]:
    """A page of the audit log, newest first."""
    if agent_name is None:
        rows = await conn.fetch(Q.list_access_log, since, before[0], before[1], limit)
    else:
        rows = await conn.fetch(
            Q.list_access_log_by_agent, agent_name, since, before[0], before[1], limit
        )
    return [
        AccessLogEntry(
            log_id=row["log_id"],
            agent_name=row["agent_name"],
            acting_principal=row["acting_principal"],
            action=row["action"],
            memory_id=row["memory_id"],
            query=row["query"],
            allowed=row["allowed"],
            rows=row["rows"],
            at=row["at"],
        )
        for row in rows
    ]


async def list_categories(conn: Connection) -> list[Category]:
    """Every category."""
    return [_category(row) for row in await conn.fetch(Q.list_categories)]


async def get_category(conn: Connection, name: str) -> Category | None:
    """One category."""
    row = await conn.fetchrow(Q.get_category, name)
    return None if row is None else _category(row)


async def upsert_category(
    conn: Connection,
    name: str,
    retention: timedelta | None,
    default_access_level: str,
    description: str,
    now: datetime,
) -> tuple[Category, bool]:
    """Create or change a category; (category, created)."""
    row = await conn.fetchrow(
        Q.upsert_category, name, retention, default_access_level, description, now
    )
    if row is None:
        raise RuntimeError("upsert_category returned no row")
    return _category(row), bool(row["inserted"])


async def reapply_category_retention(conn: Connection, name: str) -> int:
    """Recompute expiry of a category's memories; how many changed."""
    status = await conn.execute(Q.reapply_category_retention, name)
    return int(status.rsplit(" ", 1)[-1])


async def list_memory_types(conn: Connection) -> list[MemoryType]:
    """Every memory type."""
    return [
        MemoryType(
            name=row["name"],
            default_category=row["default_category"],
            description=row["description"],
            created_at=row["created_at"],
        )
        for row in await conn.fetch(Q.list_memory_types)
    ]


async def insert_memory_type(
    conn: Connection, name: str, default_category: str, description: str, now: datetime
) -> MemoryType | None:
    """Register a type; None if the name is taken."""
    row = await conn.fetchrow(Q.insert_memory_type, name, default_category, description, now)
    if row is None:
        return None
    return MemoryType(
        name=row["name"],
        default_category=row["default_category"],
        description=row["description"],
        created_at=row["created_at"],
    )


async def list_access_levels(conn: Connection) -> list[AccessLevel]:
    """Every access level and the role it needs."""
    return [
        AccessLevel(
            level=row["level"], required_role=row["required_role"], description=row["description"]
        )
        for row in await conn.fetch(Q.list_access_levels)
    ]


async def live_memory_level(conn: Connection, memory_id: UUID, now: datetime) -> str | None:
    """The access level of a live memory, whoever asks; None if there is none."""
    level: str | None = await conn.fetchval(Q.live_memory_level, memory_id, now)
    return level


async def insert_access_logs(conn: Connection, entries: list[AccessLogRow]) -> None:
    """Append audit rows."""
    if len(entries) == 1:
        # Most requests log one row: a plain execute is one message, executemany more.
        await conn.execute(Q.insert_access_log, *entries[0])
    elif entries:
        await conn.executemany(Q.insert_access_log, entries)


# -- retention (app/memories/retention.py) -------------------------------------------------


async def delete_expired(
    conn: Connection, now: datetime, limit: int, after: datetime | None
) -> tuple[int, datetime | None]:
    """One batch of expired memories (not interaction patterns) deleted, after the expiry
    ``after`` (None: from the first), stepping over expired interaction patterns before
    the first memory: how many went and the expiry the batch reached (None: it took the
    rest)."""
    reach = await conn.fetchrow(Q.expired_memories_reach, now, limit, after)
    if reach is None:  # the statement always returns one row
        raise RuntimeError("expired_memories_reach returned no row")
    start: datetime | None = reach["start"]
    if start is None:  # no expired memory left: nothing to delete
        return 0, None
    upto: datetime | None = reach["upto"]
    if reach["told"]:
        taken = int(await conn.fetchval(Q.delete_expired_memories_told, now, start, upto))
    else:
        status = await conn.execute(Q.delete_expired_memories, now, start, upto)
        taken = int(status.rsplit(" ", 1)[-1])
    return taken, upto


async def count_expired(conn: Connection, now: datetime) -> int:
    """How many expired memories (not interaction patterns) there are."""
    return int(await conn.fetchval(Q.count_expired_memories, now))


async def archive_expired_patterns(conn: Connection, now: datetime, limit: int) -> int:
    """One batch of expired interaction patterns moved to the memory archive."""
    return int(await conn.fetchval(Q.archive_interaction_patterns, now, limit))


async def count_expired_patterns(conn: Connection, now: datetime) -> int:
    """How many expired interaction patterns there are."""
    return int(await conn.fetchval(Q.count_archivable_patterns, now))


async def purge_archive(conn: Connection, before: datetime, now: datetime, limit: int) -> int:
    """One batch of archived memories archived before ``before``, gone for good."""
    return int(await conn.fetchval(Q.purge_memory_archive, before, now, limit))


async def count_purgeable_archive(conn: Connection, before: datetime) -> int:
    """How many archived memories were archived before ``before``."""
    return int(await conn.fetchval(Q.count_purgeable_memory_archive, before))


async def purge_access_log(conn: Connection, before: datetime, limit: int) -> int:
    """One batch of access audit rows older than ``before`` purged."""
    return len(await conn.fetch(Q.purge_access_log, before, limit))


async def count_purgeable_access_log(conn: Connection, before: datetime) -> int:
    """How many access audit rows are older than ``before``."""
    return int(await conn.fetchval(Q.count_purgeable_access_log, before))
