"""Statistics on a session's running process, so the expiry sweep walks its index.

Every session sweep asks ``session_state ->> 'active_process' IS NULL``
(session_may_lapse). With no statistics on that expression the planner guessed 0.5 % of
rows match; picking a batch of 20,000 expired sessions out of 200,000 it then chose to
read and sort the whole table for every batch (the sort spilling to disk under
FOR UPDATE), instead of walking session_coordination_expiry_idx: the sweep grew with the
square of the table. Measured in docs/benchmarks.md.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE STATISTICS session_coordination_active_process_stats
    ON ((session_state ->> 'active_process')) FROM session_coordination;
-- CREATE STATISTICS builds nothing: without this the planner keeps guessing until the
-- next auto-analyze, and the sweep keeps its whole-table plan on a deployed database.
ANALYZE session_coordination;
"""

DOWNGRADE = r"""
DROP STATISTICS session_coordination_active_process_stats;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
