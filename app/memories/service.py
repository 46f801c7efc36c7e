"""Memory rules: validation against the reference tables, access levels (applied by the
SQL itself), retention, upserts by key, the session context and the audit trail (erasing
a user's memories is app/erasure's)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import NoReturn, TypeVar
from uuid import UUID

import orjson

from app.auth.principal import Principal
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.db.pool import BeforeCommit, Connection, Database
from app.errors import (
    Conflict,
    NotFound,
    PayloadTooLarge,
    SwitchboardError,
    ValidationFailed,
    VersionConflict,
)
from app.memories import branch_repository as branch_repo
from app.memories import repository as repo
from app.memories.repository import (
    AccessLogRow,
    MemoryFilter,
    Reader,
    WriteReference,
)
from app.memories.schemas import (
    AccessLevel,
    AccessLogPage,
    AuditQuery,
    Category,
    CategoryChange,
    CategoryWrite,
    Memory,
    MemoryPage,
    MemoryType,
    MemoryTypeWrite,
    MemoryUpsert,
    MemoryWrite,
    SessionContext,
)
from app.sessions import repository as sessions_repo
from app.sessions.schemas import Session
from app.settings import MemorySettings
from app.webhooks.idempotency import ClaimedWrite, KeyClaim

FALLBACK_CATEGORY = "session_data"
T = TypeVar("T")
_BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """A validated write: everything the INSERT/UPDATE needs."""

    item: MemoryWrite | MemoryUpsert
    category: str
    access_level: str
    content_size: int


class Denied(Exception):
    """Raised inside a transaction so it rolls back; the audit row is written after."""

    def __init__(self, error: SwitchboardError, entries: list[AccessLogRow]) -> None:
        super().__init__(error.detail)
        self.error = error
        self.entries = entries


def taken_key(plan: PlannedWrite, field: str) -> Conflict:
    """The 409 for a write whose key a live memory already holds."""
    return Conflict(
        f"The key {plan.item.key!r} is already in use for this user in category "
        f"{plan.category!r}. PUT /v1/memories/by-key replaces it if it is a memory you can "
        "read; otherwise choose another key (every agent writing this category shares its "
        "keys: prefixing yours with your agent name avoids collisions).",
        errors=[{"field": field, "message": "key already in use"}],
    )


def _as_created(
    before_commit: BeforeCommit[tuple[Memory, bool]],
) -> BeforeCommit[list[Memory]]:
    """``before_commit`` of ``remember`` for a single write: its memory, created."""

    async def run(conn: Connection, stored: list[Memory]) -> None:
        await before_commit(conn, (stored[0], True))

    return run


def reader_of(principal: Principal) -> Reader:
    """The access rules a principal reads and writes under."""
    return Reader(name=principal.name, is_admin=principal.is_admin, roles=sorted(principal.roles))


class MemoryService:
    """Shared memories for agents. Every read and write is audited."""

    def __init__(self, database: Database, clock: Clock, settings: MemorySettings) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings

    # -- writes ------------------------------------------------------------------------

    async def write(
        self,
        items: list[MemoryWrite],
        principal: Principal,
        *,
        batch: bool,
        before_commit: BeforeCommit[list[Memory]] | None = None,
    ) -> list[Memory]:
        """Store one memory or a batch, all or nothing; ``before_commit`` runs in the same
        transaction (an idempotent webhook stores its answer there)."""
        now = self._clock.now()

        async def run(conn: Connection) -> list[Memory]:
            if not batch and len(items) == 1:
                stored_one = await self._write_one(conn, items[0], principal, now)
                if before_commit is not None:
                    await before_commit(conn, [stored_one])
                return [stored_one]
            plans = await self._plan(conn, items, batch=batch)
            stored: list[Memory] = []
            for index, plan in enumerate(plans):
                memory = await self._insert(conn, plan, principal, now)  # audited with it
                if memory is None:  # the level was checked in _plan: the key is taken
                    field = f"{index}.key" if batch else "key"
                    taken = taken_key(plan, field)
                    await self._refuse_taken_key(conn, principal, plan, now, field, taken)
                stored.append(memory)
            if before_commit is not None:
                await before_commit(conn, stored)
            return stored

        # One memory is one INSERT (with its audit row), atomic on its own: the checks
        # before it only read, and retiring an expired key is a complete change by itself.
        # A batch needs the transaction for all or nothing, and so does a write that must
        # commit with something else.
        atomic = len(items) > 1 or before_commit is not None
        return await self._audited_transaction(run, atomic=atomic)

    async def upsert_by_key(
        self,
        data: MemoryUpsert,
        bases: set[int] | None,
        create_only: bool,
        principal: Principal,
        before_commit: BeforeCommit[tuple[Memory, bool]] | None = None,
    ) -> tuple[Memory, bool]:
        """Create or replace the memory (user_id, category, key); returns (memory, created).

        ``If-Match`` (bases) makes the replace conditional on the version; ``If-None-Match: *``
        (create_only) refuses to replace. ``before_commit`` runs in the same transaction.
        """
        return await self._upsert(
            data, data.category, data.key, bases, create_only, principal, before_commit
        )

    async def _upsert(
        self,
        data: MemoryUpsert | MemoryWrite,
        category: str,
        key: str,
        bases: set[int] | None,
        create_only: bool,
        principal: Principal,
        before_commit: BeforeCommit[tuple[Memory, bool]] | None,
    ) -> tuple[Memory, bool]:
        """``upsert_by_key`` of ``data``, named (``category``, ``key``)."""
        now = self._clock.now()
        reader = reader_of(principal)

        async def run(conn: Connection) -> tuple[Memory, bool]:
            plan = (await self._plan(conn, [data], batch=False))[0]
            # Expired memories and ones the caller may not read are absent here, as for reads.
            current = await repo.lock_memory_by_key(conn, data.user_id, category, key, now, reader)
            if current is None:
                if bases is not None:
                    raise VersionConflict(
                        "No memory has this key yet; drop If-Match to create it.",
                        current_version=None,
                    )
                memory = await self._insert(conn, plan, principal, now)  # audited with it
                if memory is None:
                    raced = Conflict("A concurrent write created this key; retry.", retryable=True)
                    await self._refuse_taken_key(conn, principal, plan, now, "key", raced)
                created = True
            else:
                if create_only:
                    raise Conflict(
                        "A memory with this key exists (If-None-Match: *).",
                        current_version=current.version,
                    )
                if bases is not None and current.version not in bases:
                    raise VersionConflict(
                        f"The memory is at version {current.version}.",
                        current_version=current.version,
                    )
                memory = await repo.update_memory(
                    conn,
                    memory_id=current.memory_id,
                    content=data.content,
                    content_size=plan.content_size,
                    access_level=plan.access_level,
                    memory_type=data.memory_type,
                    session_id=data.session_id,
                    now=now,
                    expected_version=current.version,
                    reader=reader,
                )
                if memory is None:  # locked, visible and version-checked above
                    raise RuntimeError("update_memory refused a row it had locked")
                await repo.insert_access_logs(
                    conn,
                    [self.audit_entry(principal, "update", memory.memory_id, None, True, 1, now)],
                )
                created = False
            if before_commit is not None:
                await before_commit(conn, (memory, created))
            return memory, created

        return await self._audited_transaction(run)

    async def remember(
        self,
        item: MemoryWrite,
        principal: Principal,
        before_commit: BeforeCommit[tuple[Memory, bool]] | None = None,
    ) -> tuple[Memory, bool]:
        """Store a memory a caller names or not: with a category and a key it creates or
        replaces the memory of that name (as ``upsert_by_key``), without them it is written
        as new. Returns (memory, created); ``before_commit`` runs in the same transaction.
        What an agent's answer and the n8n memory webhook ask to store comes through here."""
        if item.category is not None and item.key is not None:
            return await self._upsert(
                item, item.category, item.key, None, False, principal, before_commit
            )
        then = None if before_commit is None else _as_created(before_commit)
        memory = (await self.write([item], principal, batch=False, before_commit=then))[0]
        return memory, True

    async def remember_new_claiming_key(
        self, item: MemoryWrite, principal: Principal, claim: KeyClaim
    ) -> ClaimedWrite | None:
        """A memory without a key (always new), written as ``remember`` writes it, in one
        statement with the claim of its request's Idempotency-Key and its stored answer
        (the n8n memory webhook's, ``{"action": "write", "created": true, "memory": …}``).
        None for a memory that cannot go this way (named, or too large: refused as usual)."""
        if item.key is not None:
            return None
        size = len(orjson.dumps(item.content))
        if size > self._settings.max_content_bytes:
            return None
        async with self._db.connection() as conn:
            return await repo.insert_checked_memory_claiming_key(
                conn,
                user_id=item.user_id,
                session_id=item.session_id,
                agent_name=principal.name,
                memory_type=item.memory_type,
                category=item.category,
                content=item.content,
                content_size=size,
                access_level=item.access_level,
                now=self._clock.now(),
                acting_principal=principal.delegated_by,
                claim=claim,
            )

    async def delete(self, memory_id: UUID, principal: Principal) -> None:
        """Delete a memory the caller can see (404 otherwise, as for a read)."""
        now = self._clock.now()
        reader = reader_of(principal)

        async def run(conn: Connection) -> None:
            if not await repo.delete_memory(conn, memory_id, now, reader):
                await self._refuse_unseen(conn, principal, "delete", memory_id, now)
            await repo.insert_access_logs(
                conn, [self.audit_entry(principal, "delete", memory_id, None, True, 1, now)]
            )

        await self._audited_transaction(run)

    # -- reads -------------------------------------------------------------------------

    async def get(self, memory_id: UUID, principal: Principal) -> Memory:
        """One live memory the caller may read; 404 for absent, expired or forbidden."""
        now = self._clock.now()
        reader = reader_of(principal)

        async def run(conn: Connection) -> Memory:
            memory = await repo.get_memory(conn, memory_id, now, reader)
            if memory is None:
                await self._refuse_unseen(conn, principal, "read", memory_id, now)
            await repo.insert_access_logs(
                conn, [self.audit_entry(principal, "read", memory_id, None, True, 1, now)]
            )
            return memory

        return await self._audited_transaction(run)

    async def get_by_key(
        self, user_id: UUID, category: str, key: str, principal: Principal
    ) -> Memory:
        """The live memory named (user, category, key), if the caller may read it (else 404)."""
        now = self._clock.now()
        reader = reader_of(principal)
        query = {"user_id": str(user_id), "category": category, "key": key}
        async with self._db.connection() as conn:  # a read, then one audit row: see list
            memory = await repo.get_memory_by_key(conn, user_id, category, key, now, reader)
            await repo.insert_access_logs(
                conn,
                [
                    self.audit_entry(
                        principal,
                        "read",
                        memory.memory_id if memory else None,
                        query,
                        memory is not None,
                        int(memory is not None),
                        now,
                    )
                ],
            )
        if memory is None:
            raise NotFound(f"No memory with key {key!r} in {category!r} for user {user_id}.")
        return memory

    async def list_memories(
        self,
        where: MemoryFilter,
        limit: int,
        cursor: str | None,
        principal: Principal,
        query: AuditQuery,
    ) -> MemoryPage:
        """Live memories the caller may read, newest first; ``query`` is what gets audited."""
        if (
            where.user_id is None
            and where.session_id is None
            and where.agent_name is None
            and where.contains is None
        ):
            raise ValidationFailed(
                "Name at least one of user_id, session_id, agent_name or contains.",
                errors=[{"field": "user_id", "message": "a filter is required"}],
            )
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        now = self._clock.now()
        # One statement reads the page and writes its audit row: no transaction needed.
        async with self._db.connection() as conn:
            items = await repo.list_memories(
                conn,
                where,
                before,
                now,
                reader_of(principal),
                limit + 1,
                (principal.delegated_by, query),
            )
        page, next_cursor = cut_page(items, limit, lambda m: (m.created_at, m.memory_id))
        return MemoryPage(items=page, next_cursor=next_cursor)

    async def read_user_category(
        self,
        conn: Connection,
        user_id: UUID,
        category: str,
        principal: Principal,
        purpose: str,
        limit: int,
    ) -> list[Memory]:
        """A user's live memories of one category that ``principal`` may read, newest first,
        for a read the server does on the caller's behalf (a fallback filling in a template).

        Runs on the caller's connection so it needs no second one from the pool; the same
        access-checked statement as ``GET /v1/memories`` and one audited list row, with
        ``purpose`` in its query so the trail says why the read happened.
        """
        now = self._clock.now()
        where = MemoryFilter(user_id=user_id, category=category)
        query = {"user_id": str(user_id), "category": category, "purpose": purpose}
        items = await repo.list_memories(
            conn,
            where,
            FIRST_PAGE,
            now,
            reader_of(principal),
            limit + 1,
            (principal.delegated_by, query),
        )
        return items[:limit]

    async def context(
        self, session_id: UUID, principal: Principal, limit: int, max_bytes: int | None
    ) -> SessionContext:
        """The session and, newest first, the memories the caller may see for it and its
        user, as many as fit in ``limit`` and ``max_bytes`` of content."""
        budget = max_bytes or self._settings.context_default_max_bytes
        query: AuditQuery = {"session_id": str(session_id), "limit": limit, "max_bytes": budget}
        now = self._clock.now()
        async with self._db.connection() as conn:  # reads, then one audit row: see list
            session, candidates = await self._context_read(
                conn, session_id, principal, now, limit, FIRST_PAGE
            )
            chosen: list[Memory] = []
            used = 0
            for memory in candidates[:limit]:
                if used + memory.content_size > budget:
                    break
                chosen.append(memory)
                used += memory.content_size
            await self._audit_context(conn, principal, query, len(chosen), now)
        return SessionContext(
            session=session,
            memories=chosen,
            memory_bytes=used,
            truncated=len(chosen) < len(candidates),
        )

    async def session_memories(
        self, session_id: UUID, principal: Principal, limit: int, cursor: str | None
    ) -> MemoryPage:
        """The memories ``context`` would give the caller for the session (the session's and
        its user's session-less ones it may see), newest first, a page at a time with no
        byte budget: what the console shows an operator. Audited as a context read."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        query: dict[str, str | int] = {"session_id": str(session_id), "limit": limit}
        if cursor:
            query["cursor"] = cursor
        now = self._clock.now()
        async with self._db.connection() as conn:  # reads, then one audit row: see list
            _, items = await self._context_read(conn, session_id, principal, now, limit, before)
            page, next_cursor = cut_page(items, limit, lambda m: (m.created_at, m.memory_id))
            await self._audit_context(conn, principal, query, len(page), now)
        return MemoryPage(items=page, next_cursor=next_cursor)

    async def _context_read(
        self,
        conn: Connection,
        session_id: UUID,
        principal: Principal,
        now: datetime,
        limit: int,
        before: tuple[datetime, UUID],
    ) -> tuple[Session, list[Memory]]:
        """The live session (404 otherwise) and up to ``limit + 1`` of the memories the
        context rule lets ``principal`` see for it, older than ``before``."""
        session = await sessions_repo.get_session(conn, session_id)
        if session is None:
            raise NotFound(f"No session {session_id}.")
        memories = await repo.list_context_memories(
            conn,
            session.user_id,
            session_id,
            now,
            reader_of(principal),
            limit + 1,
            before,
        )
        return session, memories

    async def _audit_context(
        self, conn: Connection, principal: Principal, query: AuditQuery, rows: int, now: datetime
    ) -> None:
        entry = self.audit_entry(principal, "context", None, query, True, rows, now)
        await repo.insert_access_logs(conn, [entry])

    async def audit_log(
        self, agent_name: str | None, since: datetime | None, limit: int, cursor: str | None
    ) -> AccessLogPage:
        """The audit trail, newest first, optionally for one agent and since a time."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            items = await repo.list_access_log(
                conn, agent_name, since or _BEGINNING, before, limit + 1
            )
        page, next_cursor = cut_page(items, limit, lambda e: (e.at, e.log_id))
        return AccessLogPage(items=page, next_cursor=next_cursor)

    # -- categories, types, levels -----------------------------------------------------

    async def list_categories(self) -> list[Category]:
        """Every category."""
        async with self._db.connection() as conn:
            return await repo.list_categories(conn)

    async def get_category(self, name: str) -> Category:
        """One category (404 if unknown)."""
        async with self._db.connection() as conn:
            category = await repo.get_category(conn, name)
        if category is None:
            raise NotFound(f"No memory category {name!r}.")
        return category

    async def put_category(self, name: str, data: CategoryWrite, reapply: bool) -> CategoryChange:
        """Create or change a category. New retention applies to later writes; with
        ``reapply`` existing memories get their expiry recomputed now, in the same transaction."""
        retention = (
            None if data.retention_seconds is None else timedelta(seconds=data.retention_seconds)
        )
        async with self._db.transaction() as conn:
            levels = {level.level for level in await repo.list_access_levels(conn)}
            if data.default_access_level not in levels:
                raise ValidationFailed(
                    f"Unknown access level {data.default_access_level!r}.",
                    errors=[
                        {"field": "default_access_level", "message": f"one of {sorted(levels)}"}
                    ],
                )
            category, created = await repo.upsert_category(
                conn,
                name,
                retention,
                data.default_access_level,
                data.description,
                self._clock.now(),
            )
            changed = None
            if reapply:
                changed = await repo.reapply_category_retention(conn, name)
                changed += await branch_repo.reapply_category_retention(conn, name)
        return CategoryChange(category=category, created=created, memories_reexpired=changed)

    async def list_memory_types(self) -> list[MemoryType]:
        """Every memory type."""
        async with self._db.connection() as conn:
            return await repo.list_memory_types(conn)

    async def add_memory_type(self, data: MemoryTypeWrite) -> MemoryType:
        """Register a memory type (409 if it exists, 422 for an unknown category)."""
        async with self._db.transaction() as conn:
            if await repo.get_category(conn, data.default_category) is None:
                raise ValidationFailed(
                    f"Unknown category {data.default_category!r}.",
                    errors=[{"field": "default_category", "message": "unknown category"}],
                )
            created = await repo.insert_memory_type(
                conn, data.name, data.default_category, data.description, self._clock.now()
            )
        if created is None:
            raise Conflict(f"Memory type {data.name!r} already exists.")
        return created

    async def list_access_levels(self) -> list[AccessLevel]:
        """Every access level and the role it needs."""
        async with self._db.connection() as conn:
            return await repo.list_access_levels(conn)

    # -- for the branch overlay (app/memories/branch_service.py) ------------------------

    async def plan_write(self, conn: Connection, item: MemoryUpsert) -> PlannedWrite:
        """Validate one write against the reference data (422/413), as every write is."""
        return (await self._plan(conn, [item], batch=False))[0]

    async def audited_transaction(self, run: Callable[[Connection], Awaitable[T]]) -> T:
        """Run ``run(conn)`` in a transaction; a Denied raised in it rolls it back and is
        audited after."""
        return await self._audited_transaction(run)

    # -- helpers -----------------------------------------------------------------------

    async def _write_one(
        self, conn: Connection, item: MemoryWrite, principal: Principal, now: datetime
    ) -> Memory:
        """One memory (not a batch) in one round trip: the statement checks it against the
        reference data and inserts it with its audit row. When it writes nothing, the
        reference data it returns explain why, exactly as ``_plan`` would (422/413), or
        the key is taken and the write goes the way of any other (``_insert``)."""
        size = len(orjson.dumps(item.content))
        if size > self._settings.max_content_bytes:
            # Checked first, as _plan does: too large is the answer whatever else is wrong.
            raise self._too_large([{"field": "content", "message": f"{size} bytes"}])
        written = await repo.insert_checked_memory(
            conn,
            user_id=item.user_id,
            session_id=item.session_id,
            agent_name=principal.name,
            memory_type=item.memory_type,
            category=item.category,
            key=item.key,
            content=item.content,
            content_size=size,
            access_level=item.access_level,
            now=now,
            acting_principal=principal.delegated_by,
        )
        if isinstance(written, Memory):
            return written
        plan = self._checked([item], written, batch=False)[0]
        memory = await self._insert(conn, plan, principal, now)  # audited with it
        if memory is None:  # the checks passed: the key is taken
            taken = taken_key(plan, "key")
            await self._refuse_taken_key(conn, principal, plan, now, "key", taken)
        return memory

    def _too_large(self, too_large: list[dict[str, str]]) -> PayloadTooLarge:
        return PayloadTooLarge(
            f"Memory content may be at most {self._settings.max_content_bytes} bytes serialized.",
            errors=too_large,
        )

    async def _plan(
        self,
        conn: Connection,
        items: Sequence[MemoryWrite | MemoryUpsert],
        *,
        batch: bool,
    ) -> list[PlannedWrite]:
        """Validate every item against the reference data; 422/413 before any write.

        No access level is refused: any agent may write at any level, and it keeps reading
        what it wrote (owner access), so results can flow to readers the writer is not."""
        ref = await repo.write_reference(
            conn,
            sorted({item.user_id for item in items}),
            sorted({item.session_id for item in items if item.session_id is not None}),
        )
        return self._checked(items, ref, batch=batch)

    def _checked(
        self,
        items: Sequence[MemoryWrite | MemoryUpsert],
        ref: WriteReference,
        *,
        batch: bool,
    ) -> list[PlannedWrite]:
        """Every item checked against ``ref``: its plan, or 413/422 naming what is wrong."""
        errors: list[dict[str, str]] = []
        too_large: list[dict[str, str]] = []
        plans: list[PlannedWrite] = []
        for index, item in enumerate(items):
            prefix = f"{index}." if batch else ""
            plan = self._plan_one(item, ref, prefix, errors, too_large)
            if plan is not None:
                plans.append(plan)
        if too_large:
            raise self._too_large(too_large)
        if errors:
            raise ValidationFailed("Some memories cannot be stored as given.", errors=errors)
        return plans

    def _plan_one(
        self,
        item: MemoryWrite | MemoryUpsert,
        ref: WriteReference,
        prefix: str,
        errors: list[dict[str, str]],
        too_large: list[dict[str, str]],
    ) -> PlannedWrite | None:
        # insert_checked_memory (sql/queries/memories.sql) makes these checks in SQL for a
        # single write and inserts only what passes them: a check changed here is changed
        # there too (a stricter statement only costs a round trip; a looser one would
        # store what this refuses).
        failures_before = len(errors) + len(too_large)
        if item.memory_type not in ref.types:
            errors.append({"field": prefix + "memory_type", "message": "unknown memory type"})
        category = item.category or ref.types.get(item.memory_type) or FALLBACK_CATEGORY
        if category not in ref.categories:
            errors.append({"field": prefix + "category", "message": "unknown category"})
        level = item.access_level or ref.categories.get(category, "")
        if item.access_level is not None and item.access_level not in ref.levels:
            errors.append({"field": prefix + "access_level", "message": "unknown access level"})
        if item.user_id not in ref.users:
            errors.append({"field": prefix + "user_id", "message": "unknown user"})
        if item.session_id is not None:
            owner = ref.session_owners.get(item.session_id)
            if owner is None:
                errors.append({"field": prefix + "session_id", "message": "unknown session"})
            elif owner != item.user_id:
                errors.append(
                    {"field": prefix + "session_id", "message": "session belongs to another user"}
                )
        size = len(orjson.dumps(item.content))
        if size > self._settings.max_content_bytes:
            too_large.append({"field": prefix + "content", "message": f"{size} bytes"})
        if len(errors) + len(too_large) > failures_before:
            return None
        return PlannedWrite(item=item, category=category, access_level=level, content_size=size)

    async def _insert(
        self, conn: Connection, plan: PlannedWrite, principal: Principal, now: datetime
    ) -> Memory | None:
        """Insert a planned write; None if a live memory holds its key. An expired memory
        holding the key is retired first: it is gone for readers already."""
        item = plan.item
        for _ in range(2):
            memory = await repo.insert_memory(
                conn,
                user_id=item.user_id,
                session_id=item.session_id,
                agent_name=principal.name,
                memory_type=item.memory_type,
                category=plan.category,
                key=item.key,
                content=item.content,
                content_size=plan.content_size,
                access_level=plan.access_level,
                now=now,
                acting_principal=principal.delegated_by,
            )
            if memory is not None or item.key is None:
                return memory
            if not await repo.retire_expired_memory_by_key(
                conn, item.user_id, plan.category, item.key, now
            ):
                return None
        return None

    async def _refuse_taken_key(
        self,
        conn: Connection,
        principal: Principal,
        plan: PlannedWrite,
        now: datetime,
        field: str,
        if_visible: SwitchboardError,
    ) -> NoReturn:
        """Raise for a key held by a live memory: ``if_visible`` when the caller can read
        that memory, else the plain taken-key 409 (audited as a denied write).

        The key is unique per user and category, so a memory the caller cannot read still
        takes it; the least the answer can say is that the key is in use. It says no more:
        the same 409 as a POST with any used key, without the hidden memory's level,
        version or id, never the 403 that would tell the level is above the caller's.
        """
        item = plan.item
        key = item.key or ""
        reader = reader_of(principal)
        if await repo.get_memory_by_key(conn, item.user_id, plan.category, key, now, reader):
            raise if_visible
        query = {"user_id": str(item.user_id), "category": plan.category, "key": key}
        raise Denied(
            taken_key(plan, field),
            [self.audit_entry(principal, "write", None, query, False, 0, now)],
        )

    async def _refuse_unseen(
        self, conn: Connection, principal: Principal, action: str, memory_id: UUID, now: datetime
    ) -> NoReturn:
        """Raise 404 for a memory the caller cannot see, auditing a denial if it exists."""
        level = await repo.live_memory_level(conn, memory_id, now)
        error = NotFound(f"No memory {memory_id}.")
        if level is None:
            raise error
        raise Denied(error, [self.audit_entry(principal, action, memory_id, None, False, 0, now)])

    async def _audited_transaction(
        self, run: Callable[[Connection], Awaitable[T]], *, atomic: bool = True
    ) -> T:
        """Run ``run(conn)`` in a transaction (or, not ``atomic``, statement by statement);
        a denial rolls it back and is audited after."""
        try:
            async with self._db.transaction() if atomic else self._db.connection() as conn:
                return await run(conn)
        except Denied as denied:
            async with self._db.transaction() as conn:
                await repo.insert_access_logs(conn, denied.entries)
            raise denied.error from None

    @staticmethod
    def audit_entry(
        principal: Principal,
        action: str,
        memory_id: UUID | None,
        query: AuditQuery | None,
        allowed: bool,
        rows: int,
        at: datetime,
    ) -> AccessLogRow:
        """One audit row of ``principal``'s access."""
        return AccessLogRow(
            principal.name, principal.delegated_by, action, memory_id, query, allowed, rows, at
        )
