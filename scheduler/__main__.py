"""``python -m scheduler``: the maintenance scheduler as a process of its own (for
deployments that run API replicas with ``switchboard serve --no-scheduler``)."""

from __future__ import annotations

import asyncio

from app.jobs.process import run_scheduler
from app.logs import configure_logging
from app.settings import Settings


def main() -> None:
    """Entry point."""
    settings = Settings()
    configure_logging(settings.logging)
    asyncio.run(run_scheduler(settings))


if __name__ == "__main__":
    main()
