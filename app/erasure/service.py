"""Erasure rules: what erasing a user, or only their memories, removes and redacts.

One transaction per erasure, all or nothing. The user's row is locked (after their live
sessions, for the lock order: see erasure.sql), so the footprint read next (their session
and memory ids, live and archived) cannot grow before the commit. Rows that mention the
footprint are handled before the rows that define it: the audit trail's contains filters
are matched against memories that still exist. See sql/queries/erasure.sql for what each
table gets and why.
"""

from __future__ import annotations

from uuid import UUID

from app.auth.principal import Principal
from app.clock import Clock
from app.db.pool import Connection, Database
from app.erasure import repository as repo
from app.erasure.schemas import MemoriesErased, UserErased
from app.errors import NotFound


class ErasureService:
    """Erases a user (DELETE /v1/users/{id}) or their memories (DELETE .../memories)."""

    def __init__(self, database: Database, clock: Clock, scan_timeout: float) -> None:
        self._db = database
        self._clock = clock
        # Seconds each full-table scan for the user's ids may take (see erasure.sql).
        self._scan_timeout = scan_timeout

    async def erase_user(self, user_id: UUID, principal: Principal) -> UserErased:
        """Delete the user and everything about them; redact what must stay (the audit
        trail, job records); record the erasure under a hash of the id."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            await repo.lock_user_sessions(conn, user_id)
            if not await repo.lock_user(conn, user_id):
                raise NotFound(f"No user {user_id}.")
            footprint = await repo.user_footprint(conn, user_id)
            ids = [user_id, *footprint.session_ids, *footprint.memory_ids]
            mentions_deleted, redacted = await self._erase_mentions(
                conn, user_id, ids, footprint.erasure_id
            )
            memories = await repo.delete_user_memories(conn, user_id)
            deleted = {**await repo.delete_user(conn, user_id), **memories, **mentions_deleted}
            await repo.record_erasure(
                conn,
                erasure_id=footprint.erasure_id,
                user_id=user_id,
                scope="user",
                erased_by=principal.name,
                acting_principal=principal.delegated_by,
                at=now,
                counts={"deleted": deleted, "redacted": redacted},
                audit_query={"erasure_id": str(footprint.erasure_id)},
                memories_erased=sum(memories.values()),
            )
        return UserErased(
            user_id=user_id,
            sessions_deleted=deleted["session_coordination"],
            erasure_id=footprint.erasure_id,
            deleted=deleted,
            redacted=redacted,
        )

    async def erase_memories(self, user_id: UUID, principal: Principal) -> MemoriesErased:
        """Delete the user's memories, live and archived, with every copy of them: stored
        webhook responses that carry them, audit queries that name or match them."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            if not await repo.lock_user(conn, user_id):
                raise NotFound(f"No user {user_id}.")
            footprint = await repo.user_footprint(conn, user_id)
            mentions_deleted, redacted = await self._erase_mentions(
                conn, user_id, footprint.memory_ids, footprint.erasure_id
            )
            memories = await repo.delete_user_memories(conn, user_id)
            deleted = {**memories, **mentions_deleted}
            await repo.record_erasure(
                conn,
                erasure_id=footprint.erasure_id,
                user_id=user_id,
                scope="memories",
                erased_by=principal.name,
                acting_principal=principal.delegated_by,
                at=now,
                counts={"deleted": deleted, "redacted": redacted},
                audit_query={"user_id": str(user_id), "erasure_id": str(footprint.erasure_id)},
                memories_erased=sum(memories.values()),
            )
        return MemoriesErased(
            user_id=user_id,
            memories_deleted=memories["memories"],
            archived_deleted=memories["memory_archive"],
            erasure_id=footprint.erasure_id,
            deleted=deleted,
            redacted=redacted,
        )

    async def _erase_mentions(
        self, conn: Connection, user_id: UUID, ids: list[UUID], erasure_id: UUID
    ) -> tuple[dict[str, int], dict[str, int]]:
        """Delete or redact rows that mention ``ids`` (or, in the audit trail, match the
        user's memory content); (deleted, redacted) rows per table."""
        if not ids:  # nothing to find: a user without memories, for a memory erasure
            return (
                {"idempotency_keys": 0, "outbox_events": 0, "event_deliveries": 0},
                {"memory_access_log": 0, "job_runs": 0},
            )
        limit = self._scan_timeout
        audit = await repo.redact_access_log(conn, user_id, ids, erasure_id, limit)
        keys = await repo.delete_idempotency_keys(conn, ids, limit)
        events, deliveries = await repo.delete_events(conn, ids, limit)
        runs = await repo.redact_job_runs(conn, ids, erasure_id, limit)
        return (
            {"idempotency_keys": keys, "outbox_events": events, "event_deliveries": deliveries},
            {"memory_access_log": audit, "job_runs": runs},
        )
