"""Coordination decisions by time alone, for the console's charts (issue 21).

The overview's activity_series query counts the decisions of the last hour (or 24 hours);
the only index on coordination_decisions leads with session_id, so it read the whole table.
Measured on 100k decisions over 30 days (docs/console.md): a sequential scan of 1725 pages,
about 25 ms, against an index scan of 6 pages, 0.2 ms, for the hour window.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE INDEX coordination_decisions_created_idx ON coordination_decisions (created_at);
"""

DOWNGRADE = r"""
DROP INDEX coordination_decisions_created_idx;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
