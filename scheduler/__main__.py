"""``python -m scheduler``: the maintenance scheduler as a process of its own (for
deployments that run API replicas with ``switchboard serve --no-scheduler``)."""

from __future__ import annotations

import asyncio
import sys

from app import runtime
from app.auth.keys import UnusableAdminKey
from app.db.embedded import EmbeddedError
from app.jobs.process import run_scheduler
from app.logs import configure_logging
from app.settings import Settings, SettingsInvalid, load_settings


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
        asyncio.run(run_scheduler(settings))
    except (EmbeddedError, UnusableAdminKey) as exc:
        print(f"scheduler: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
