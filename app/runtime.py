"""Start-up resolution shared by the CLI entry points: which database, which admin key, and
how a process ends (letting go of the embedded PostgreSQL however it ends)."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import NoReturn

from app.auth.keys import load_or_create_admin_key
from app.db.embedded import embedded_database_url, release_embedded
from app.settings import Settings

logger = logging.getLogger("switchboard")


class Terminated(BaseException):
    """SIGTERM, raised in the main thread as KeyboardInterrupt is for SIGINT, so that the
    process unwinds (closing pools, letting go of the embedded server) before it ends."""


def _raise_terminated(_: int, __: FrameType | None) -> None:
    raise Terminated


def run_for_life(command: Callable[[], int]) -> int:
    """Run a whole command (``switchboard ...``, ``python -m scheduler``) so that the embedded
    PostgreSQL it joined is let go however it ends: a return, an exception, SIGINT or
    SIGTERM. The server stops when no other process uses it (app/db/embedded.py).

    uvicorn handles SIGTERM itself, shuts down gracefully, then raises the signal again:
    that lands here as ``Terminated``, and the process still ends by SIGTERM, as before."""
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return command()
    except Terminated:
        release_embedded()
        _end_by(signal.SIGTERM)
    finally:
        release_embedded()


def _end_by(signum: int) -> NoReturn:
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    raise SystemExit(128 + signum)  # not reached: the signal ends the process


def database_url(settings: Settings) -> str:
    """The configured URL, or the embedded server's (started on demand)."""
    if settings.database.url:
        return settings.database.url
    url = embedded_database_url(settings.data_dir)
    logger.info("using embedded PostgreSQL under %s", settings.data_dir / "pg")
    return url


def admin_key_path(settings: Settings) -> Path:
    """Where the generated admin key is kept when SWITCHBOARD_ADMIN_KEY is unset."""
    return settings.auth.admin_key_file or settings.data_dir / "admin.key"


def admin_key(settings: Settings) -> str:
    """SWITCHBOARD_ADMIN_KEY, or the key file (generated on first use)."""
    if settings.auth.admin_key:
        return settings.auth.admin_key
    path = admin_key_path(settings)
    key = load_or_create_admin_key(path)
    logger.info("admin key: read it from %s", path)
    return key
