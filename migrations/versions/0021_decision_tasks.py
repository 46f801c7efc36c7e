"""A coordination decision names the agent task it waited for, and may have accepted one.

Since the coordinator runs its agent calls as durable tasks (revision 0019), a decision
names the task behind its answer: the task the request waited for, the one it stopped
waiting for (the fallback answered, degraded), or the one whose late answer it records
(app/coordination/completion.py). No foreign key: a decision is the record of what was
decided and outlives its task's row (the task's own record is in agent_tasks while it
lasts). The outcome ``accepted``: the caller asked for `Prefer: respond-async` and was
answered 202 with the task, nobody's answer yet.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE coordination_decisions ADD COLUMN task_id uuid;
ALTER TABLE coordination_decisions DROP CONSTRAINT coordination_decisions_outcome_check;
ALTER TABLE coordination_decisions ADD CONSTRAINT coordination_decisions_outcome_check
    CHECK (outcome IN ('agent', 'fallback', 'clarification', 'accepted'));
"""

DOWNGRADE = r"""
DELETE FROM coordination_decisions WHERE outcome = 'accepted';
ALTER TABLE coordination_decisions DROP CONSTRAINT coordination_decisions_outcome_check;
ALTER TABLE coordination_decisions ADD CONSTRAINT coordination_decisions_outcome_check
    CHECK (outcome IN ('agent', 'fallback', 'clarification'));
ALTER TABLE coordination_decisions DROP COLUMN task_id;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
