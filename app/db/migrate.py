"""Apply the alembic migrations programmatically (used by the CLI and the tests).

alembic's own INFO lines (one per step and two on every run, even with nothing to do)
are quiet below DEBUG (app/logs.py); a run that changes the schema logs one line here."""

from __future__ import annotations

import logging

from alembic import command
from alembic.config import Config

from app.settings import PROJECT_ROOT

logger = logging.getLogger("switchboard.migrate")


def alembic_config(database_url: str) -> Config:
    """An alembic config pointed at ``database_url``."""
    config = Config(str(PROJECT_ROOT / "alembic.ini"))
    config.attributes["database_url"] = database_url
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate up to ``revision``. Blocking: call from a thread inside an event loop."""
    config = alembic_config(database_url)
    command.upgrade(config, revision)
    _report(config, "applied")


def downgrade(database_url: str, revision: str = "base") -> None:
    """Migrate down to ``revision``. Blocking: call from a thread inside an event loop."""
    config = alembic_config(database_url)
    command.downgrade(config, revision)
    _report(config, "reverted")


def _report(config: Config, verb: str) -> None:
    steps: list[str] = config.attributes.get("applied_steps", [])
    if steps:
        logger.info(
            "%s %d migration%s: the schema is at %s",
            verb,
            len(steps),
            "" if len(steps) == 1 else "s",
            steps[-1],
            extra={"migrations": len(steps), "revision": steps[-1]},
        )
