"""The worker every replica runs (and ``switchboard worker`` runs alone): claims due tasks
while it has free slots, wakes at once when this process queued one (the insert trigger
announces on ``switchboard_tasks``, app/db/announce.py), on a NOTIFY of that channel (sent,
coalesced, by another process after it queued some) and on an attempt ending here, and
polls every ``poll_interval`` seconds for what nothing announces (a retry whose backoff
ended, a task written by another tool, a NOTIFY missed while the LISTEN connection was
down). Each poll also reaps expired leases."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from app.common.background import stop_loop
from app.db.listener import Listener
from app.db.pool import Database
from app.tasks.service import QUEUED_CHANNEL, TaskService

logger = logging.getLogger("switchboard.tasks.worker")


class TaskWorker:
    """Claims and starts tasks up to ``worker_concurrency`` at once; reaps lost leases."""

    def __init__(self, database: Database, tasks: TaskService) -> None:
        self._tasks = tasks
        self._settings = tasks.settings
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._listener = Listener(
            database.url,
            QUEUED_CHANNEL,
            self._on_notify,
            catch_up=self._poll,
            interval=self._settings.poll_interval,
        )
        # A task queued by this process wakes its worker at once (app/db/announce.py).
        database.announcer.listen(QUEUED_CHANNEL, lambda _payload: self._wake.set())
        self._announcer = database.announcer

    def _on_notify(self, payload: str) -> None:
        # This process's own NOTIFY woke the worker already, at its commit.
        if self._announcer.from_elsewhere(payload):
            self._wake.set()

    async def start(self) -> None:
        """Start claiming (the LISTEN connection comes up in the background)."""
        self._stopping.clear()
        self._wake.set()
        self._loop_task = asyncio.create_task(self._claim_loop(), name="task-worker")
        await self._listener.start()

    async def stop(self) -> None:
        """Stop claiming. Running attempts are stopped by ``TaskService.stop``."""
        await self._listener.stop()
        if self._loop_task is not None:
            self._wake.set()
            await stop_loop(self._loop_task, self._stopping)
            self._loop_task = None

    async def _poll(self) -> None:
        try:
            await self._tasks.reap()
        except Exception:
            logger.warning("reaping expired task leases failed", exc_info=True)
        self._wake.set()

    async def _claim_loop(self) -> None:
        slot_freed = self._tasks.slot_freed
        while not self._stopping.is_set():
            free = self._settings.worker_concurrency - self._tasks.running_count
            if free > 0:
                self._wake.clear()
                slot_freed.clear()
                try:
                    claimed = await self._tasks.claim(free)
                except Exception:
                    logger.warning("claiming tasks failed", exc_info=True)
                    claimed = []
                if len(claimed) == free:
                    continue  # the batch was full: there may be more
            else:
                slot_freed.clear()
            await self._sleep(slot_freed)

    async def _sleep(self, slot_freed: asyncio.Event) -> None:
        """Until a task is queued, an attempt ends here, the poll interval passes or the
        worker stops."""
        waits = [
            asyncio.ensure_future(self._wake.wait()),
            asyncio.ensure_future(slot_freed.wait()),
            asyncio.ensure_future(self._stopping.wait()),
        ]
        try:
            await asyncio.wait(
                waits, timeout=self._settings.poll_interval, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waits:
                waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*waits, return_exceptions=True)
