"""Apply the alembic migrations programmatically (used by the CLI and the tests)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config

from app.settings import PROJECT_ROOT


def alembic_config(database_url: str) -> Config:
    """An alembic config pointed at ``database_url``."""
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate up to ``revision``. Blocking: call from a thread inside an event loop."""
    command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str = "base") -> None:
    """Migrate down to ``revision``. Blocking: call from a thread inside an event loop."""
    command.downgrade(alembic_config(database_url), revision)
