"""How long memories and their audit trail are kept: the sweeps the jobs run. Expired
memories go (interaction patterns move to the memory archive instead), the archive is
purged after its retention, and each user whose memories went is told (memory.purged) in
the statement that took them. The statements are in memories.sql."""

from __future__ import annotations

from datetime import datetime

from app.db.pool import Connection
from app.jobs.sweep import Sweep
from app.memories import branch_repository as branch_repo
from app.memories import repository as repo
from app.settings import SchedulerSettings


class MemoryRetention:
    """Enforces memory retention and the access audit's retention."""

    def __init__(self, settings: SchedulerSettings) -> None:
        self._settings = settings

    async def enforce(self, sweep: Sweep) -> None:
        """Expired memories (main's and branches') are deleted, main's expired interaction
        patterns archived, archive rows older than the archive retention purged; each user
        whose memories of main went is told."""
        now = sweep.now
        reached: datetime | None = None

        async def delete_expired(conn: Connection, limit: int) -> tuple[int, bool]:
            # Each batch starts after the expiry the previous one reached, so no batch
            # walks again over the index entries of rows earlier batches deleted. A batch
            # reaches `limit` index entries on, interaction patterns among them, so it may
            # take fewer rows than the limit: the walk is done when nothing was left beyond.
            nonlocal reached
            taken, reached = await repo.delete_expired(conn, now, limit, reached)
            return taken, reached is None

        await sweep.walk(
            "memories_deleted", delete_expired, lambda conn: repo.count_expired(conn, now)
        )
        # Branch rows are drafts that were never main's: expired ones are deleted, an
        # interaction pattern among them too (nothing of main's history to archive).
        await sweep.step(
            "branch_memories_deleted",
            lambda conn, limit: branch_repo.delete_expired(conn, now, limit),
            lambda conn: branch_repo.count_expired(conn, now),
        )
        await sweep.step(
            "patterns_archived",
            lambda conn, limit: repo.archive_expired_patterns(conn, now, limit),
            lambda conn: repo.count_expired_patterns(conn, now),
        )
        before = now - self._settings.memory_archive_retention
        await sweep.step(
            "archive_purged",
            lambda conn, limit: repo.purge_archive(conn, before, now, limit),
            lambda conn: repo.count_purgeable_archive(conn, before),
        )

    async def purge_access_log(self, sweep: Sweep) -> None:
        """Access audit rows older than the audit retention are purged."""
        before = sweep.now - self._settings.audit_retention
        await sweep.step(
            "access_log_purged",
            lambda conn, limit: repo.purge_access_log(conn, before, limit),
            lambda conn: repo.count_purgeable_access_log(conn, before),
        )
