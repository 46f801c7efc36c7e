"""A session's status is never 'expired': the value leaves the CHECK.

No statement ever set it: an expired session leaves the live table for session_archive
(reason 'expired') and comes back 'active' when restored, while a preserved session or one
running a process stays what it was. Allowing the value made every "is it closed?" rule
spell two statuses and let clients filter by one that never matched. A row holding it
could only have been written by hand; it becomes 'active', as a restore would make it.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

UPGRADE = r"""
UPDATE session_coordination SET status = 'active' WHERE status = 'expired';
ALTER TABLE session_coordination DROP CONSTRAINT session_coordination_status_check;
ALTER TABLE session_coordination ADD CONSTRAINT session_coordination_status_check
    CHECK (status IN ('active', 'idle', 'completed', 'escalated'));
"""

DOWNGRADE = r"""
ALTER TABLE session_coordination DROP CONSTRAINT session_coordination_status_check;
ALTER TABLE session_coordination ADD CONSTRAINT session_coordination_status_check
    CHECK (status IN ('active', 'idle', 'completed', 'expired', 'escalated'));
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
