"""The session expiry index leaves out completed sessions.

The expiry sweep and the expiry warning never touch completed sessions (the archival job
takes them after their retention), but the index held them, so every sweep for up to 30
days stepped over each expired completed session again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP INDEX session_coordination_expiry_idx;
CREATE INDEX session_coordination_expiry_idx
    ON session_coordination (expires_at) WHERE NOT preserve AND status <> 'completed';
"""

DOWNGRADE = r"""
DROP INDEX session_coordination_expiry_idx;
CREATE INDEX session_coordination_expiry_idx
    ON session_coordination (expires_at) WHERE NOT preserve;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
