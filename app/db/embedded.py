"""An embedded PostgreSQL 16 (the ``pgserver`` package) for machines without a server.

Used only when no database URL is configured. Data lives under ``<data_dir>/pg``; the
server keeps running while any process that asked for it is alive and stops after the last
one exits.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger("switchboard.embedded")

_servers: dict[Path, Any] = {}


def embedded_database_url(data_dir: Path, *, keep_running: bool = False) -> str:
    """Start (or join) the embedded server under ``data_dir/pg`` and return its URL."""
    pgdata = (data_dir / "pg").resolve()
    if pgdata not in _servers:
        import pgserver  # imported lazily: a configured server never needs it

        pgdata.parent.mkdir(parents=True, exist_ok=True)
        logger.info("starting embedded PostgreSQL in %s", pgdata)
        _servers[pgdata] = pgserver.get_server(
            pgdata, cleanup_mode=None if keep_running else "stop"
        )
    url: str = _servers[pgdata].get_uri()
    return url


def stop_embedded(data_dir: Path) -> None:
    """Stop the embedded server if one runs under ``data_dir/pg``."""
    pgdata = (data_dir / "pg").resolve()
    if not (pgdata / "postmaster.pid").exists():
        return
    import pgserver

    server = pgserver.get_server(pgdata, cleanup_mode="stop")
    server.cleanup()
