"""Indexes for the housekeeping job: events and job runs are purged oldest first.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE INDEX outbox_events_created_idx ON outbox_events (created_at);
CREATE INDEX job_runs_started_idx ON job_runs (started_at) WHERE status <> 'running';
"""

DOWNGRADE = r"""
DROP INDEX job_runs_started_idx;
DROP INDEX outbox_events_created_idx;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
