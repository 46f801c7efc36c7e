"""Alembic environment: async engine over asyncpg, one advisory lock so that replicas
starting together apply migrations once, and no autogenerate (migrations are raw SQL)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from alembic import context
from alembic.runtime.migration import MigrationInfo
from sqlalchemy import text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

# Any constant works; it only has to be the same for every Switchboard process.
MIGRATION_LOCK_KEY = 0x5357_4254_4D49_4752  # "SWBTMIGR"


def _database_url() -> str:
    url = context.config.attributes.get("database_url") or os.environ.get(
        "SWITCHBOARD_DATABASE_URL"
    )
    if not url:
        raise RuntimeError(
            "no database URL: run `switchboard migrate` or set SWITCHBOARD_DATABASE_URL"
        )
    _, _, rest = str(url).partition("://")
    return f"postgresql+asyncpg://{rest}"


def _record(*, step: MigrationInfo, **_: Any) -> None:
    """Note each step applied, for the caller's one log line (app/db/migrate.py)."""
    steps: list[str] = context.config.attributes.setdefault("applied_steps", [])
    steps.append(",".join(step.destination_revision_ids) or "base")


def _run(connection: Connection) -> None:
    # A session-level lock survives the commit below and is held until released.
    connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
    connection.commit()
    try:
        context.configure(
            connection=connection, transaction_per_migration=True, on_version_apply=_record
        )
        with context.begin_transaction():
            context.run_migrations()
    finally:
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
        connection.commit()


async def _run_async() -> None:
    engine = create_async_engine(_database_url(), poolclass=NullPool)
    try:
        async with engine.connect() as connection:
            await connection.run_sync(_run)
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise RuntimeError("offline (--sql) mode is not supported; migrations need a live database")
asyncio.run(_run_async())
