"""Agents tell every replica when they change (issue 22, the message path).

The coordinator read every agent on every message (one statement of the four a message
sends). Each replica now keeps the list and drops it when told: a statement-level trigger on
agents sends NOTIFY switchboard_agents for any change, whoever makes it (the API on any
replica, the card refresh, an operator's SQL). app/agents/directory.py listens.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION agents_changed() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('switchboard_agents', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER agents_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON agents
    FOR EACH STATEMENT EXECUTE FUNCTION agents_changed();
"""

DOWNGRADE = r"""
DROP TRIGGER agents_changed ON agents;
DROP FUNCTION agents_changed();
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
