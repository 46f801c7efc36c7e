"""What time does to a session, and bringing it back: the sweeps the jobs run (idle,
expiry extension, expiry warning, expiry, archival of completed sessions, the archive's
end) and restore. Which rows each sweep takes is one predicate in sql/schema.sql, used by
its batch and by its dry-run count alike (the statements are in sessions.sql)."""

from __future__ import annotations

from uuid import UUID

from app.clock import Clock
from app.db.pool import Database
from app.errors import Conflict, NotFound
from app.jobs.sweep import Sweep
from app.sessions import repository as repo
from app.sessions.schemas import Session
from app.settings import SchedulerSettings, SessionSettings


class SessionLifecycle:
    """Idles, extends, warns, expires, archives and restores sessions."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        sessions: SessionSettings,
        scheduler: SchedulerSettings,
    ) -> None:
        self._db = database
        self._clock = clock
        self._sessions = sessions
        self._settings = scheduler

    # -- sweeps (called by the jobs) -----------------------------------------------------

    async def idle_inactive(self, sweep: Sweep) -> None:
        """Active sessions quiet for the inactivity threshold become idle (never one that
        is preserved or running a process). Not a content change: no new version."""
        before = sweep.now - self._settings.inactivity_threshold
        await sweep.step(
            "sessions_idled",
            lambda conn, limit: repo.idle_inactive(conn, before, limit),
            lambda conn: repo.count_inactive(conn, before),
        )

    async def extend_running(self, sweep: Sweep) -> None:
        """Sessions whose process moved recently live on: expiry = now + the extension,
        once their expiry is nearer than half of it. Like a heartbeat, not a content
        change: no new version."""
        now = sweep.now
        moved_since = now - self._settings.extension_recent_activity
        until = now + self._settings.extension_period
        expiring_before = now + self._settings.extension_period / 2
        await sweep.step(
            "sessions_extended",
            lambda conn, limit: repo.extend_running(
                conn, moved_since, until, expiring_before, limit
            ),
            lambda conn: repo.count_extendable(conn, moved_since, expiring_before),
        )

    async def warn_expiring(self, sweep: Sweep) -> None:
        """Users of sessions about to expire are told once (session.expiring)."""
        now, until = sweep.now, sweep.now + self._settings.warning_window
        await sweep.step(
            "sessions_warned",
            lambda conn, limit: repo.warn_expiring(conn, now, until, limit),
            lambda conn: repo.count_expiring(conn, now, until),
        )

    async def archive_expired(self, sweep: Sweep) -> None:
        """Expired sessions (not completed ones, not preserved, no running process) move to
        the archive with their history, restorable for the recovery window
        (session.expired)."""
        now, restorable_until = sweep.now, sweep.now + self._settings.recovery_window
        await sweep.step(
            "sessions_expired",
            lambda conn, limit: repo.archive_expired(conn, now, restorable_until, limit),
            lambda conn: repo.count_expired(conn, now),
        )

    async def purge_archive(self, sweep: Sweep) -> None:
        """Archived sessions past their recovery window are gone for good."""
        now = sweep.now
        await sweep.step(
            "archived_sessions_purged",
            lambda conn, limit: repo.purge_archive(conn, now, limit),
            lambda conn: repo.count_purgeable_archive(conn, now),
        )

    async def archive_completed(self, sweep: Sweep) -> None:
        """Sessions completed longer ago than the retention move to the archive with their
        history (session.archived)."""
        now = sweep.now
        completed_before = now - self._settings.completed_retention
        restorable_until = now + self._settings.recovery_window
        await sweep.step(
            "sessions_archived",
            lambda conn, limit: repo.archive_completed(
                conn, now, completed_before, restorable_until, limit
            ),
            lambda conn: repo.count_archivable(conn, completed_before),
        )

    # -- restore (called by the API) -----------------------------------------------------

    async def restore(self, session_id: UUID) -> Session:
        """Bring an expired or archived session back, with its history, within the window."""
        now = self._clock.now()
        # trace: session.restored carries the request's trace (the column's default).
        async with self._db.transaction(trace=True) as conn:
            archived = await repo.lock_restorable_session(conn, session_id, now)
            if archived is None:
                if await repo.session_exists(conn, session_id):
                    raise Conflict(f"Session {session_id} is live; there is nothing to restore.")
                raise NotFound(
                    f"Session {session_id} cannot be restored: it was never archived, or its "
                    f"recovery window ({self._settings.recovery_window}) has passed and it is "
                    "gone for good."
                )
            await repo.restore_session(conn, archived, now + self._sessions.default_ttl, now)
            session = await repo.get_session(conn, session_id)
        if session is None:  # inserted above in this transaction
            raise RuntimeError("restored session vanished")
        return session
