"""``python -m scheduler``: the maintenance scheduler as a process of its own (for
deployments that run API replicas with ``switchboard serve --no-scheduler``)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from app import runtime
from app.asgi import replica_name
from app.auth.keys import UnusableAdminKey
from app.clock import SystemClock
from app.db.embedded import EmbeddedError
from app.db.pool import Database
from app.logs import configure_logging
from app.maintenance.events import EventService
from app.maintenance.service import MaintenanceService
from app.outbound.policy import OutboundPolicy
from app.outbound.transport import outbound_client
from app.settings import Settings, SettingsInvalid, load_settings
from app.tracing import Tracing
from scheduler.runner import Scheduler


async def run(settings: Settings) -> None:
    """Run the jobs and the event delivery until SIGINT or SIGTERM."""
    database = Database(runtime.database_url(settings), settings.database)
    await database.open()
    clock = SystemClock()
    replica = replica_name()
    outbound = OutboundPolicy(settings.outbound)
    tracing = Tracing(settings.tracing)
    tracing.start()
    async with outbound_client(outbound, tracing=tracing) as http:
        scheduler = Scheduler(
            MaintenanceService(database, clock, settings.scheduler, settings.sessions, replica),
            EventService(database, clock, settings.scheduler, http, outbound),
            tracing,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, stop.set)
        scheduler.start()
        try:
            await stop.wait()
        finally:
            scheduler.shutdown()
            await database.close()
            await asyncio.to_thread(tracing.shutdown)


def main() -> int:
    """Entry point."""
    try:
        settings = load_settings()
    except SettingsInvalid as exc:
        print(f"scheduler: error: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.logging)
    return runtime.run_for_life(lambda: _run(settings))


def _run(settings: Settings) -> int:
    try:
        asyncio.run(run(settings))
    except (EmbeddedError, UnusableAdminKey) as exc:
        print(f"scheduler: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
