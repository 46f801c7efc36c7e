"""Replica presence: a session-level advisory lock that lives exactly as long as this process.

Each API process takes the lock (replica_lock_space(), hashtext(replica name)) on a
connection of its own, outside the pool, and keeps it. When the process dies, however it
dies, the kernel closes its sockets; PostgreSQL reads end-of-file on the idle connection
and drops the lock at once. ``replica_is_present(name)`` (sql/schema.sql) is how another
replica asks. Idempotency claims name their replica (``owner``), so a retry knows at once
that the request holding its key died with its process.

A process that is alive but cut off from PostgreSQL keeps its lock until the server notices
the dead connection (TCP keepalive, hours by default): claims carry a lease for that case.
While the lock is not held (start-up, a lost connection), ``owner`` is None and claims rely
on their lease alone, since their holder's presence cannot be seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg

from app.common.background import stop_loop
from app.db.queries import QUERIES

logger = logging.getLogger("switchboard.presence")

Q = QUERIES.presence


class ReplicaPresence:
    """Holds this replica's presence lock and takes it again after a lost connection."""

    def __init__(
        self, url: str, replica: str, *, check_interval: float, connect_timeout: float
    ) -> None:
        self._url = url
        self.replica = replica
        self._check_interval = check_interval
        self._connect_timeout = connect_timeout
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None
        self._held = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        # Set when the connection is lost, so the lock is taken again at once.
        self._nudge = asyncio.Event()

    @property
    def owner(self) -> str | None:
        """The name claims should carry: this replica's while its lock is held, else None."""
        return self.replica if self._held else None

    async def start(self) -> None:
        """Take the lock now if PostgreSQL is there (so the first request has it), then keep
        it in the background; a database that is down does not stop the service."""
        with contextlib.suppress(Exception):
            await self._check()
        self._task = asyncio.create_task(self._keep(), name="replica-presence")

    async def stop(self) -> None:
        """Give the lock up (closing its connection)."""
        if self._task is not None:
            self._nudge.set()  # wake it now, not at its next check
            await stop_loop(self._task, self._stopping)
            self._task = None
        await self._close()

    async def _keep(self) -> None:
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudge.wait(), timeout=self._check_interval)
            self._nudge.clear()
            if self._stopping.is_set():
                return
            try:
                await self._check()
            except Exception:
                logger.warning("replica presence lost; taking it again", exc_info=True)
                await self._close()

    async def _check(self) -> None:
        """Connect and take the lock if needed; confirm it is still held."""
        if self._conn is None or self._conn.is_closed():
            self._held = False
            self._conn = await asyncpg.connect(
                self._url,
                timeout=self._connect_timeout,
                server_settings={
                    "application_name": "switchboard-presence",
                    # An idle connection is this lock's whole job: never time it out.
                    "idle_session_timeout": "0",
                },
            )
            # The moment the connection is lost, stop naming this replica in new claims.
            self._conn.add_termination_listener(self._on_lost)
        conn = self._conn
        if await conn.fetchval(Q.replica_is_present, self.replica, timeout=self._check_interval):
            self._held = True
            return
        self._held = bool(
            await conn.fetchval(Q.take_replica_presence, self.replica, timeout=self._check_interval)
        )
        if not self._held:
            # Another live connection holds a lock with the same 32-bit hash: this replica's
            # claims are then judged by their lease alone.
            logger.warning("presence lock of %s is taken by another replica", self.replica)

    def _on_lost(self, _conn: object) -> None:
        self._held = False
        self._nudge.set()

    async def _close(self) -> None:
        self._held = False
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=2)
