"""A coordination decision names the branch its turn was written to (issue 20).

Messages can be coordinated on a branch of a session (POST
/v1/sessions/{id}/branches/{branch}/messages): the turn is written as a new version of the
branch, and its decision, kept with the session's, names the branch; its session_version
is then the branch's version. NULL: the session itself (main). No foreign key: a decision
is the record of what was decided and outlives its branch (deleted, expired, merged).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE coordination_decisions ADD COLUMN branch text;
"""

DOWNGRADE = r"""
DELETE FROM coordination_decisions WHERE branch IS NOT NULL;
ALTER TABLE coordination_decisions DROP COLUMN branch;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
