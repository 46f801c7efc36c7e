"""Run a raw SQL script (several statements, dollar-quoted bodies) inside a migration.

SQLAlchemy's asyncpg dialect prepares every statement, and a prepared statement holds one
command only. The driver connection's own ``execute`` uses the simple query protocol,
which takes a whole script, so migrations hand their SQL to it unchanged.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy.util import await_only


def run_sql(script: str) -> None:
    """Execute ``script`` on the migration's connection, in the migration's transaction."""
    raw = op.get_bind().connection.driver_connection
    await_only(raw.execute(script))
