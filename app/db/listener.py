"""LISTEN on a connection of its own, kept up in the background.

A pooled connection cannot LISTEN (the pool hands it to the next request, and its reset
would not undo the LISTEN: see ``pool._reset_connection``), so a listener opens one of its
own. A NOTIFY sent while nobody listened (the connection was lost, the process started
late) is gone for good: whoever listens says how to ``catch_up`` (re-read what the
notifications announce), and the listener runs it every ``interval`` seconds, so also right
after it connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable

import asyncpg

from app.common.background import stop_loop

logger = logging.getLogger("switchboard.listener")

# Handed each notification's payload; runs on the event loop, so it must not block.
OnNotify = Callable[[str], None]
CatchUp = Callable[[], Awaitable[None]]


class Listener:
    """LISTENs on ``channel`` and hands every payload to ``on_notify``; reconnects after a
    lost connection and runs ``catch_up`` every ``interval`` seconds."""

    def __init__(
        self,
        url: str,
        channel: str,
        on_notify: OnNotify,
        *,
        catch_up: CatchUp,
        interval: float,
    ) -> None:
        self._url = url
        self.channel = channel
        self._on_notify = on_notify
        self._catch_up = catch_up
        self._interval = interval
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @property
    def listening(self) -> bool:
        """True while the LISTEN connection is open."""
        return self._conn is not None and not self._conn.is_closed()

    async def start(self) -> None:
        """Connect, LISTEN and catch up in the background; a database that is down does not
        stop the caller: the loop keeps trying every ``interval``."""
        self._stopping.clear()
        # A context of its own: a listener started from a request (the task queue's, on its
        # first wait) must not run, and reconnect, inside that request's trace for ever.
        self._task = asyncio.create_task(
            self._keep(), name=f"listen-{self.channel}", context=contextvars.Context()
        )

    async def stop(self) -> None:
        """Stop listening and close the connection."""
        if self._task is not None:
            await stop_loop(self._task, self._stopping)
            self._task = None
        await self._close()

    async def _keep(self) -> None:
        while not self._stopping.is_set():
            try:
                if not self.listening:
                    await self._connect()
                await self._catch_up()
            except Exception:
                logger.warning(
                    "LISTEN %s or its catch-up failed; retrying", self.channel, exc_info=True
                )
                await self._close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self._interval)

    async def _connect(self) -> None:
        await self._close()
        conn = await asyncpg.connect(
            self._url, server_settings={"application_name": "switchboard-listener"}
        )
        try:
            await conn.add_listener(self.channel, self._deliver)
        except BaseException:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=2)
            raise
        # Only now ``listening``: a caller that keeps what it read while it can be told of
        # changes (app/agents/directory.py) must not trust the connection before its LISTEN
        # is in place, and the catch-up that follows (``_keep``) runs without yielding.
        self._conn = conn

    def _deliver(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        try:
            self._on_notify(str(payload))
        except Exception:  # one bad notification must not stop the ones after it
            logger.warning("a notification on %s was not handled", self.channel, exc_info=True)

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(conn.close(), timeout=2)
