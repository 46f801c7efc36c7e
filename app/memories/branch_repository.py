"""Branch memory rows (branch_memories) in and out of PostgreSQL; access levels are
applied by the statements (sql/queries/branch_memories.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import asyncpg

from app.common.jsontypes import JsonValue
from app.db.pool import Connection
from app.db.queries import QUERIES
from app.memories.repository import Reader, row_values
from app.memories.schemas import BranchMemory

Q = QUERIES.branch_memories


@dataclass(frozen=True, slots=True)
class MergeRow:
    """A live branch row as a merge reads it, with main's live memory of its key now."""

    memory_id: UUID
    user_id: UUID
    agent_name: str
    memory_type: str
    category: str
    key: str
    content: JsonValue
    content_size: int
    access_level: str
    base_memory_id: UUID | None
    base_version: int | None
    base_content: JsonValue
    main_id: UUID | None
    main_version: int | None
    main_content: JsonValue
    ours_readable: bool
    theirs_readable: bool

    @property
    def main_changed(self) -> bool:
        """Main's memory of the key is not the one the branch first saw."""
        return (self.main_id, self.main_version) != (self.base_memory_id, self.base_version)


def _access(reader: Reader) -> tuple[bool, list[str], str]:
    return reader.is_admin, reader.roles, reader.name


# A branch memory row's values, in the order of BranchMemory's fields (Memory's, then branch).
_branch_memory_values = row_values(BranchMemory.__struct_fields__)


def _memory(row: asyncpg.Record) -> BranchMemory:
    return BranchMemory(*_branch_memory_values(row))


async def get_memory(
    conn: Connection,
    session_id: UUID,
    branch: str,
    user_id: UUID,
    category: str,
    key: str,
    now: datetime,
    reader: Reader,
) -> BranchMemory | None:
    """The memory (category, key) as the branch sees it, if the reader may."""
    row = await conn.fetchrow(
        Q.get_branch_memory, session_id, branch, user_id, category, key, now, *_access(reader)
    )
    return None if row is None else _memory(row)


async def list_memories(
    conn: Connection,
    session_id: UUID,
    branch: str,
    user_id: UUID,
    category: str | None,
    before: tuple[datetime, UUID],
    now: datetime,
    reader: Reader,
    limit: int,
) -> list[BranchMemory]:
    """The user's memories as the branch sees them, newest first, before the cursor."""
    rows = await conn.fetch(
        Q.list_branch_memories,
        session_id,
        branch,
        user_id,
        category,
        *before,
        now,
        *_access(reader),
        limit,
    )
    return [_memory(row) for row in rows]


async def lock_memory(
    conn: Connection,
    session_id: UUID,
    branch: str,
    category: str,
    key: str,
    now: datetime,
    reader: Reader,
) -> BranchMemory | None:
    """The branch's own row of the key, locked, if live and the reader may see it."""
    row = await conn.fetchrow(
        Q.lock_branch_memory, session_id, branch, category, key, now, *_access(reader)
    )
    return None if row is None else _memory(row)


async def key_holder(
    conn: Connection,
    session_id: UUID,
    branch: str,
    user_id: UUID,
    category: str,
    key: str,
    now: datetime,
) -> str | None:
    """'branch' or 'main' for whoever holds the key live (regardless of reader), or None."""
    holder: str | None = await conn.fetchval(
        Q.branch_key_holder, session_id, branch, user_id, category, key, now
    )
    return holder


async def retire_expired(
    conn: Connection, session_id: UUID, branch: str, category: str, key: str, now: datetime
) -> None:
    """Remove an expired branch row holding the key."""
    await conn.execute(Q.retire_expired_branch_memory, session_id, branch, category, key, now)


async def insert_memory(
    conn: Connection,
    *,
    user_id: UUID,
    session_id: UUID,
    branch: str,
    owner: str,
    memory_type: str,
    access_level: str,
    category: str,
    key: str,
    content: JsonValue,
    version: int,
    now: datetime,
    content_size: int,
    shadowed: tuple[UUID, int, JsonValue] | None,
) -> BranchMemory:
    """The branch's first row of a key, shadowing main's memory ``shadowed`` (id,
    version, content) if it has one."""
    base_id, base_version, base_content = shadowed or (None, None, None)
    row = await conn.fetchrow(
        Q.insert_branch_memory,
        user_id,
        session_id,
        branch,
        owner,
        memory_type,
        access_level,
        key,
        content,
        version,
        now,
        content_size,
        base_id,
        base_version,
        base_content,
        category,
    )
    if row is None:  # the category was validated in this transaction
        raise RuntimeError("insert_branch_memory found no category")
    return _memory(row)


async def update_memory(
    conn: Connection,
    *,
    memory_id: UUID,
    content: JsonValue,
    content_size: int,
    access_level: str,
    memory_type: str,
    expected_version: int,
    now: datetime,
    reader: Reader,
) -> BranchMemory | None:
    """Rewrite the branch's row, if the reader may and it is still at the version."""
    row = await conn.fetchrow(
        Q.update_branch_memory,
        memory_id,
        content,
        content_size,
        access_level,
        memory_type,
        expected_version,
        now,
        reader.name,
        reader.is_admin,
        reader.roles,
    )
    return None if row is None else _memory(row)


async def delete_memory(
    conn: Connection,
    session_id: UUID,
    branch: str,
    category: str,
    key: str,
    now: datetime,
    reader: Reader,
) -> UUID | None:
    """Drop the branch's row of the key, if the reader may; its id, or None."""
    gone: UUID | None = await conn.fetchval(
        Q.delete_branch_memory, session_id, branch, category, key, now, *_access(reader)
    )
    return gone


async def hold_user(conn: Connection, user_id: UUID) -> None:
    """Key-share lock the user before any memory row (see hold_user in the .sql)."""
    await conn.execute(Q.hold_user, user_id)


async def touch_branch(conn: Connection, session_id: UUID, branch: str, now: datetime) -> None:
    """Mark activity on the branch (the idle sweep counts from it)."""
    await conn.execute(Q.touch_branch, session_id, branch, now)


async def lock_for_merge(
    conn: Connection, session_id: UUID, branch: str, now: datetime, reader: Reader
) -> list[MergeRow]:
    """Every live row of the branch, locked, with main's memory of each key now."""
    rows = await conn.fetch(
        Q.lock_branch_memories_for_merge, session_id, branch, now, *_access(reader)
    )
    return [MergeRow(**dict(row)) for row in rows]


async def merge_update(
    conn: Connection,
    row: MergeRow,
    content: JsonValue,
    content_size: int,
    now: datetime,
) -> bool:
    """Write ``content`` into main's memory of the key, if still at the version read."""
    done = await conn.fetchval(
        Q.merge_update_memory,
        row.main_id,
        content,
        content_size,
        row.access_level,
        row.memory_type,
        row.main_version,
        now,
    )
    return done is not None


async def merge_insert(
    conn: Connection,
    row: MergeRow,
    session_id: UUID,
    content: JsonValue,
    content_size: int,
    now: datetime,
) -> bool:
    """Create main's memory of the key from the branch row; False if the key is taken."""
    done = await conn.fetchval(
        Q.merge_insert_memory,
        row.memory_id,
        row.user_id,
        session_id,
        row.agent_name,
        row.memory_type,
        row.category,
        row.key,
        content,
        content_size,
        row.access_level,
        now,
    )
    return done is not None


async def merge_delete(conn: Connection, row: MergeRow) -> bool:
    """Remove main's memory of the key, if still at the version read."""
    return await conn.fetchval(Q.merge_delete_memory, row.main_id, row.main_version) is not None


async def drop_branch_memories(conn: Connection, session_id: UUID, branch: str) -> None:
    """Delete every row of the branch."""
    await conn.execute(Q.drop_branch_memories, session_id, branch)


async def delete_expired(conn: Connection, now: datetime, limit: int) -> int:
    """One batch of expired branch rows deleted."""
    return len(await conn.fetch(Q.delete_expired_branch_memories, now, limit))


async def count_expired(conn: Connection, now: datetime) -> int:
    """How many branch rows have expired."""
    return int(await conn.fetchval(Q.count_expired_branch_memories, now))


async def reapply_category_retention(conn: Connection, name: str) -> int:
    """Recompute the expiry of the branches' rows of a category; how many changed."""
    status = await conn.execute(Q.reapply_category_retention_on_branches, name)
    return int(status.rsplit(" ", 1)[-1])
