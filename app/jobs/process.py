"""The scheduler as a process of its own (``python -m scheduler``, ``switchboard
scheduler``), for deployments that run API replicas with ``switchboard serve
--no-scheduler``."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from app import runtime
from app.clock import SystemClock
from app.db.pool import Database
from app.jobs.scheduler import Scheduler
from app.services import build_services
from app.settings import Settings


async def run_scheduler(settings: Settings) -> None:
    """Run the jobs and the event delivery until SIGINT or SIGTERM."""
    database = Database(runtime.database_url(settings), settings.database)
    await database.open()
    services = build_services(settings, database, SystemClock())
    scheduler = Scheduler(services.jobs, services.events, services.event_hub, services.tracing)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    services.tracing.start()
    scheduler.start()
    try:
        await stop.wait()
    finally:
        scheduler.shutdown()
        await services.event_hub.stop()  # its numbering run (the scheduler's) ends first
        await services.aclose()
        await database.close()
