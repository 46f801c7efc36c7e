"""Scheduler: job claims, session archive, expiry warnings, event outbox and subscriptions.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- When the user was last told the session is about to expire (NULL: not since it last moved).
ALTER TABLE session_coordination ADD COLUMN expiry_warned_at timestamptz;

-- Sessions that left the live tables, with their whole history, for the recovery window.
CREATE TABLE session_archive (
    session_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    reason text NOT NULL CHECK (reason IN ('expired', 'completed')),
    -- The session_coordination row and its session_state_versions rows, as JSON.
    session jsonb NOT NULL,
    versions jsonb NOT NULL CHECK (jsonb_typeof(versions) = 'array'),
    archived_at timestamptz NOT NULL,
    restorable_until timestamptz NOT NULL
);

CREATE INDEX session_archive_user_idx ON session_archive (user_id);
CREATE INDEX session_archive_restorable_idx ON session_archive (restorable_until);

-- One row per scheduled (or manual) run of a job: the exactly-once claim and its record.
CREATE TABLE job_runs (
    run_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    job_name text NOT NULL,
    -- The interval-aligned slot of a scheduled run; NULL for a manual run (never deduplicated).
    slot_start timestamptz CHECK (slot_start IS NOT NULL OR trigger = 'manual'),
    trigger text NOT NULL CHECK (trigger IN ('schedule', 'manual')),
    dry_run boolean NOT NULL DEFAULT false,
    status text NOT NULL CHECK (status IN ('running', 'succeeded', 'failed')),
    claimed_by text NOT NULL,
    attempts integer NOT NULL DEFAULT 1,
    started_at timestamptz NOT NULL,
    lease_expires_at timestamptz NOT NULL,
    finished_at timestamptz,
    rows_affected bigint NOT NULL DEFAULT 0,
    details jsonb NOT NULL DEFAULT '{}',
    error text,
    CONSTRAINT job_runs_slot_unique UNIQUE (job_name, slot_start)
);

CREATE INDEX job_runs_job_started_idx ON job_runs (job_name, started_at DESC, run_id DESC);

-- Who hears about events (an n8n webhook, say), and the secret their signatures use.
CREATE TABLE subscriptions (
    subscription_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    url text NOT NULL CHECK (url ~ '^https?://[^\s]+$' AND char_length(url) <= 2000),
    event_types text[] NOT NULL CHECK (cardinality(event_types) > 0),
    secret text NOT NULL CHECK (char_length(secret) >= 16),
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);

-- Events written in the same transaction as the change they describe (transactional outbox).
CREATE TABLE outbox_events (
    event_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    event_type text NOT NULL,
    payload jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX outbox_events_type_created_idx ON outbox_events (event_type, created_at DESC);

-- One delivery per event and subscriber, with its retry state.
CREATE TABLE event_deliveries (
    event_id uuid NOT NULL REFERENCES outbox_events (event_id) ON DELETE CASCADE,
    subscription_id uuid NOT NULL REFERENCES subscriptions (subscription_id) ON DELETE CASCADE,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL,
    last_error text,
    delivered_at timestamptz,
    PRIMARY KEY (event_id, subscription_id)
);

CREATE INDEX event_deliveries_due_idx ON event_deliveries (next_attempt_at) WHERE status = 'pending';
"""

DOWNGRADE = """
DROP TABLE event_deliveries;
DROP TABLE outbox_events;
DROP TABLE subscriptions;
DROP TABLE job_runs;
DROP TABLE session_archive;
ALTER TABLE session_coordination DROP COLUMN expiry_warned_at;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
