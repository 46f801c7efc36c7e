"""The task worker as a process of its own (``switchboard worker``): claims and runs tasks
like the worker inside every API replica, for deployments that add workers without API
capacity (or run API replicas with ``switchboard serve --no-worker``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal

from app import runtime
from app.clock import SystemClock
from app.db.pool import Database
from app.services import build_services
from app.settings import Settings
from app.tasks.worker import TaskWorker

logger = logging.getLogger("switchboard.tasks.worker")


async def run_worker(settings: Settings) -> None:
    """Run tasks until SIGINT or SIGTERM; running attempts are given back on the way out."""
    database = Database(runtime.database_url(settings), settings.database)
    await database.open()
    services = build_services(settings, database, SystemClock())
    worker = TaskWorker(database, services.tasks)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    services.tracing.start()
    try:
        await services.breakers.start()
        await services.tasks.start()
        await worker.start()
        logger.info(
            "task worker %s running (%d at once)",
            services.replica,
            settings.tasks.worker_concurrency,
        )
        await stop.wait()
    finally:
        await worker.stop()
        await services.tasks.stop()
        await services.breakers.stop()
        await services.aclose()
        await database.close()
