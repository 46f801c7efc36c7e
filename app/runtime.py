"""Start-up resolution shared by the CLI entry points: which database, which admin key."""

from __future__ import annotations

import logging
from pathlib import Path

from app.auth.keys import load_or_create_admin_key
from app.db.embedded import embedded_database_url
from app.settings import Settings

logger = logging.getLogger("switchboard")


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
