"""Trace ids on the rows a trace leaves behind: decisions and outbox events.

A coordination decision keeps the trace id of the request (or task) that made it, the id
its answer named in X-Trace-Id and its log lines carry. An outbox event keeps the whole
traceparent of the transaction that wrote it (work done later from an event, its delivery,
can continue that trace) and its trace id beside it, generated. Events are written by set
statements inside jobs and requests, so the traceparent comes from the transaction rather
than from each statement: current_traceparent() reads what app/db/pool.py sets with
set_config(..., true) when a transaction is opened with trace=True, and is the column's
default. Rows from before have none.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION current_traceparent() RETURNS text
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT t FROM (SELECT current_setting('switchboard.traceparent', true) AS t) AS setting
    WHERE t ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
$$;

ALTER TABLE coordination_decisions ADD COLUMN trace_id text;

ALTER TABLE outbox_events
    ADD COLUMN traceparent text DEFAULT current_traceparent(),
    ADD COLUMN trace_id text GENERATED ALWAYS AS (substr(traceparent, 4, 32)) STORED;
"""

DOWNGRADE = r"""
ALTER TABLE outbox_events DROP COLUMN trace_id, DROP COLUMN traceparent;
ALTER TABLE coordination_decisions DROP COLUMN trace_id;
DROP FUNCTION current_traceparent();
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
