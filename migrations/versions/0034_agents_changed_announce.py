"""The agent list is dropped at the depth every other listener is told: the announcement.

0033 made a statement-level trigger on agents NOTIFY switchboard_agents for any change, and
AgentService dropped its own process's kept list by hand after each of its writes (a writer
that forgot, or a new one, would have left it stale until the NOTIFY came back). Now a
write through a Switchboard pool (client_min_messages = debug1, app/db/pool.py) calls
``announce_after_commit('switchboard_agents', '')``: its own process drops the list when the
connection is given back after the commit, the others when its coalesced NOTIFY arrives,
and no NOTIFY is queued in the writing transaction. A write from psql or another tool hears
no announcement, so it still NOTIFYs in its statement (agents change rarely: the
commit-time lock a NOTIFY takes costs nothing here).

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE OR REPLACE FUNCTION agents_changed() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    IF current_setting('client_min_messages') LIKE 'debug%' THEN
        PERFORM announce_after_commit('switchboard_agents', '');
    ELSE
        PERFORM pg_notify('switchboard_agents', '');
    END IF;
    RETURN NULL;
END
$$;
"""

DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION agents_changed() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('switchboard_agents', '');
    RETURN NULL;
END
$$;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
