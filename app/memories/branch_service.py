"""Memories scoped to a branch of a session: an overlay on the user's memories.

A memory written on a branch is the branch's value of (category, key) for the session's
user. Reads on the branch see the branch's rows shadowing main's; main never sees them.
Merging the branch writes them into main (``merge_branch_memories``, called by the branch
merge in its transaction); deleting or expiring the branch drops them. Access levels,
validation and the audit trail are main's: the same reference checks (``plan_write``), the
same SQL access rule, the same audit rows (with the branch in ``query``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from app.auth.principal import Principal
from app.branches import repository as branches_repo
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.db.pool import Connection, Database
from app.errors import (
    Conflict,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
    VersionConflict,
)
from app.memories import branch_repository as repo
from app.memories import repository as memories_repo
from app.memories.branch_repository import MergeRow
from app.memories.schemas import (
    BranchMemory,
    BranchMemoryPage,
    BranchMemoryWrite,
    MemoryUpsert,
)
from app.memories.service import Denied, MemoryService, reader_of
from app.sessions import repository as sessions_repo
from app.sessions.merge import MISSING, Choice, MergeConflict, pointer
from app.sessions.service import require_open

# Conflict paths of memories in a branch merge: /memories/{category}/{key}.
MEMORY_PATHS = "/memories/"


def memory_path(category: str, key: str) -> str:
    """The JSON Pointer a merge names a memory key by."""
    return pointer(["memories", category, key])


class BranchMemoryService:
    """Write, read, list and drop the memories of a branch."""

    def __init__(self, database: Database, clock: Clock, memories: MemoryService) -> None:
        self._db = database
        self._clock = clock
        self._memories = memories

    async def put(
        self,
        session_id: UUID,
        branch: str,
        data: BranchMemoryWrite,
        bases: set[int] | None,
        create_only: bool,
        principal: Principal,
    ) -> tuple[BranchMemory, bool]:
        """Create or replace the branch's value of (category, key); returns (memory,
        created). ``If-Match`` is checked against the memory the branch sees (its own row,
        else main's); ``If-None-Match: *`` refuses if the branch sees one."""
        now = self._clock.now()
        reader = reader_of(principal)
        category, key = data.category, data.key
        query = {"branch": branch, "category": category, "key": key}

        async def run(conn: Connection) -> tuple[BranchMemory, bool]:
            user_id = await _open_branch(conn, session_id, branch)
            plan = await self._memories.plan_write(
                conn,
                MemoryUpsert(
                    user_id=user_id,
                    session_id=session_id,
                    category=category,
                    key=key,
                    memory_type=data.memory_type,
                    content=data.content,
                    access_level=data.access_level,
                ),
            )
            own = await repo.lock_memory(conn, session_id, branch, category, key, now, reader)
            if own is not None:
                _check_preconditions(own.version, bases, create_only)
                memory = await repo.update_memory(
                    conn,
                    memory_id=own.memory_id,
                    content=data.content,
                    content_size=plan.content_size,
                    access_level=plan.access_level,
                    memory_type=data.memory_type,
                    expected_version=own.version,
                    now=now,
                    reader=reader,
                )
                if memory is None:  # locked, visible and version-checked above
                    raise RuntimeError("update_branch_memory refused a row it had locked")
                action, created = "update", False
            else:
                holder = await repo.key_holder(
                    conn, session_id, branch, user_id, category, key, now
                )
                main = await memories_repo.lock_memory_by_key(
                    conn, user_id, category, key, now, reader
                )
                if holder == "branch" or (holder == "main" and main is None):
                    # Live, and hidden from the caller: the key is in use, and that is all
                    # the answer says (as on main).
                    raise Denied(
                        Conflict(
                            f"The key {key!r} is already in use in category {category!r}.",
                            errors=[{"field": "key", "message": "key already in use"}],
                        ),
                        [MemoryService.audit_entry(principal, "write", None, query, False, 0, now)],
                    )
                _check_preconditions(None if main is None else main.version, bases, create_only)
                await repo.retire_expired(conn, session_id, branch, category, key, now)
                memory = await repo.insert_memory(
                    conn,
                    user_id=user_id,
                    session_id=session_id,
                    branch=branch,
                    owner=principal.name if main is None else main.agent_name,
                    memory_type=data.memory_type,
                    access_level=plan.access_level,
                    category=plan.category,
                    key=key,
                    content=data.content,
                    version=1 if main is None else main.version + 1,
                    now=now,
                    content_size=plan.content_size,
                    shadowed=None if main is None else (main.memory_id, main.version, main.content),
                )
                action, created = "write", main is None
            await repo.touch_branch(conn, session_id, branch, now)
            await memories_repo.insert_access_logs(
                conn,
                [
                    MemoryService.audit_entry(
                        principal, action, memory.memory_id, query, True, 1, now
                    )
                ],
            )
            return memory, created

        return await self._memories.audited_transaction(run)

    async def get(
        self, session_id: UUID, branch: str, category: str, key: str, principal: Principal
    ) -> BranchMemory:
        """The memory (category, key) as the branch sees it (404: none the caller may read)."""
        now = self._clock.now()
        query = {"branch": branch, "category": category, "key": key}
        async with self._db.connection() as conn:
            user_id = await _branch_user(conn, session_id, branch)
            memory = await repo.get_memory(
                conn, session_id, branch, user_id, category, key, now, reader_of(principal)
            )
            await memories_repo.insert_access_logs(
                conn,
                [
                    MemoryService.audit_entry(
                        principal,
                        "read",
                        None if memory is None else memory.memory_id,
                        query,
                        memory is not None,
                        int(memory is not None),
                        now,
                    )
                ],
            )
        if memory is None:
            raise NotFound(f"Branch {branch!r} sees no memory {key!r} in {category!r}.")
        return memory

    async def list_memories(
        self,
        session_id: UUID,
        branch: str,
        category: str | None,
        limit: int,
        cursor: str | None,
        principal: Principal,
    ) -> BranchMemoryPage:
        """The session user's memories as the branch sees them, newest first."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        now = self._clock.now()
        async with self._db.connection() as conn:
            user_id = await _branch_user(conn, session_id, branch)
            items = await repo.list_memories(
                conn,
                session_id,
                branch,
                user_id,
                category,
                before,
                now,
                reader_of(principal),
                limit + 1,
            )
            query: dict[str, str | int] = {"branch": branch, "user_id": str(user_id)}
            if category is not None:
                query["category"] = category
            await memories_repo.insert_access_logs(
                conn,
                [
                    MemoryService.audit_entry(
                        principal, "list", None, query, True, min(len(items), limit), now
                    )
                ],
            )
        page, next_cursor = cut_page(items, limit, lambda m: (m.created_at, m.memory_id))
        return BranchMemoryPage(items=page, next_cursor=next_cursor)

    async def delete(
        self, session_id: UUID, branch: str, category: str, key: str, principal: Principal
    ) -> None:
        """Drop the branch's value of the key: main's memory shows through again."""
        now = self._clock.now()
        query = {"branch": branch, "category": category, "key": key}

        async def run(conn: Connection) -> None:
            await _open_branch(conn, session_id, branch)
            gone = await repo.delete_memory(
                conn, session_id, branch, category, key, now, reader_of(principal)
            )
            if gone is None:
                raise NotFound(f"Branch {branch!r} has written no memory {key!r} in {category!r}.")
            await repo.touch_branch(conn, session_id, branch, now)
            await memories_repo.insert_access_logs(
                conn, [MemoryService.audit_entry(principal, "delete", gone, query, True, 1, now)]
            )

        await self._memories.audited_transaction(run)


def _check_preconditions(seen: int | None, bases: set[int] | None, create_only: bool) -> None:
    """``If-Match`` and ``If-None-Match: *`` against the version the branch sees."""
    if seen is None and bases is not None:
        raise VersionConflict(
            "The branch sees no memory with this key yet; drop If-Match to create it.",
            current_version=None,
        )
    if seen is not None and create_only:
        raise Conflict(
            "The branch sees a memory with this key (If-None-Match: *).", current_version=seen
        )
    if seen is not None and bases is not None and seen not in bases:
        raise VersionConflict(f"The memory is at version {seen}.", current_version=seen)


async def _branch_user(conn: Connection, session_id: UUID, branch: str) -> UUID:
    """The user of the branch's session (404 for an unknown session or branch)."""
    if await branches_repo.get_branch(conn, session_id, branch) is None:
        raise NotFound(f"Session {session_id} has no branch {branch!r}.")
    session = await sessions_repo.get_session(conn, session_id)
    if session is None:  # a branch goes with its session
        raise NotFound(f"No session {session_id}.")
    return session.user_id


async def _open_branch(conn: Connection, session_id: UUID, branch: str) -> UUID:
    """Hold the session's user, then lock the branch (its writers and its merge go one at a
    time); return the user. 404 unknown, 409 merged or the session closed."""
    session = await sessions_repo.get_session(conn, session_id)
    if session is None:
        raise NotFound(f"No session {session_id}.")
    await repo.hold_user(conn, session.user_id)
    found = await branches_repo.lock_branch(conn, session_id, branch)
    if found is None:
        raise NotFound(f"Session {session_id} has no branch {branch!r}.")
    if found.state != "open":
        raise Conflict(
            f"Branch {branch!r} was merged as session version {found.merged_version}; it takes "
            "no more changes. Fork a new branch to go on.",
            branch_state=found.state,
        )
    require_open(session)
    return session.user_id


# -- merge (called by app/branches/service.py inside the merge's transaction) -------------


async def branch_memory_conflicts(
    conn: Connection,
    session_id: UUID,
    user_id: UUID,
    branch: str,
    now: datetime,
    principal: Principal,
) -> tuple[list[MergeRow], list[MergeConflict]]:
    """The branch's live rows (locked, after the user: see hold_user) and the keys both
    sides changed: main's memory of the key is not the one the branch first saw, and
    differs from the branch's value. A value the merging caller may not read is withheld
    (null, ``*_present`` false)."""
    await repo.hold_user(conn, user_id)
    rows = await repo.lock_for_merge(conn, session_id, branch, now, reader_of(principal))
    conflicts: list[MergeConflict] = []
    for row in rows:
        if not row.main_changed:
            continue
        if row.main_id is not None and row.main_content == row.content:
            continue  # both sides wrote the same value
        hidden = not (row.ours_readable and row.theirs_readable)
        conflicts.append(
            MergeConflict(
                path=memory_path(row.category, row.key),
                base=MISSING if hidden or row.base_memory_id is None else row.base_content,
                current=MISSING if hidden or row.main_id is None else row.main_content,
                proposed=MISSING if hidden else row.content,
            )
        )
    return rows, conflicts


async def merge_branch_memories(
    conn: Connection,
    session_id: UUID,
    branch: str,
    rows: list[MergeRow],
    conflicts: list[MergeConflict],
    choices: dict[str, Choice],
    principal: Principal,
    now: datetime,
    max_content_bytes: int,
) -> int:
    """Write the branch's rows into main (conflicting keys as ``choices`` settle them: the
    caller has checked there is exactly one per conflict), then drop the branch's rows.
    Returns how many main memories changed. A main memory changed since ``rows`` were
    read makes the merge a retryable 409 (the transaction rolls back)."""
    conflicting = {conflict.path for conflict in conflicts}
    entries = []
    changed = 0
    for row in rows:
        path = memory_path(row.category, row.key)
        choice = choices.get(path) if path in conflicting else Choice("ours")
        if choice is None or choice.take == "theirs":
            continue
        if choice.take == "remove":
            if row.main_id is not None:
                if not await repo.merge_delete(conn, row):
                    raise _raced(path)
                entries.append((row.main_id, "delete"))
                changed += 1
            continue
        content: Any = row.content if choice.take == "ours" else choice.value
        size = len(orjson.dumps(content))
        if choice.take == "value":
            if content is None:
                raise ValidationFailed(
                    "A memory's value may not be null (take remove to delete it).",
                    errors=[{"field": f"choices.{path}.value", "message": "null"}],
                )
            if size > max_content_bytes:
                raise PayloadTooLarge(
                    f"Memory content may be at most {max_content_bytes} bytes serialized.",
                    errors=[{"field": f"choices.{path}.value", "message": f"{size} bytes"}],
                )
        if row.main_id is not None:
            if not await repo.merge_update(conn, row, content, size, now):
                raise _raced(path)
            entries.append((row.main_id, "update"))
        else:
            await memories_repo.retire_expired_memory_by_key(
                conn, row.user_id, row.category, row.key, now
            )
            if not await repo.merge_insert(conn, row, session_id, content, size, now):
                raise _raced(path)
            entries.append((row.memory_id, "write"))
        changed += 1
    await repo.drop_branch_memories(conn, session_id, branch)
    query = {"merged_branch": branch}
    await memories_repo.insert_access_logs(
        conn,
        [
            MemoryService.audit_entry(principal, action, memory_id, query, True, 1, now)
            for memory_id, action in entries
        ],
    )
    return changed


def _raced(path: str) -> Conflict:
    return Conflict(
        f"Main's memory {path} changed while the branch was merging; retry the merge.",
        retryable=True,
    )
