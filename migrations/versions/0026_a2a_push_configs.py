"""A2A push notification configs, delivered through the signed outbox (issue 19).

A config (a2a_push_configs) belongs to a task and goes with it. Each has one delivery
target in ``subscriptions`` (push_config_id set, task_id its task), which goes with the
config: the fan-out gives such a target only its own task's task.transition events, and
the outbox's delivery loop posts them (retries, signature, redelivery) as A2A
StreamResponse bodies with the config's token. /v1/subscriptions lists only the others.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE TABLE a2a_push_configs (
    push_config_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    task_id uuid NOT NULL REFERENCES agent_tasks (task_id) ON DELETE CASCADE,
    config_id text NOT NULL CHECK (char_length(config_id) BETWEEN 1 AND 200),
    url text NOT NULL CHECK (url ~ '^https?://[^\s]+$' AND char_length(url) <= 2000),
    token text CHECK (char_length(token) <= 2000),
    authentication jsonb,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (task_id, config_id)
);

ALTER TABLE subscriptions
    ADD COLUMN push_config_id uuid UNIQUE
        REFERENCES a2a_push_configs (push_config_id) ON DELETE CASCADE,
    ADD COLUMN task_id uuid;

CREATE OR REPLACE FUNCTION outbox_fan_out() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, e.created_at
    FROM written e
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type)
        AND (sub.task_id IS NULL OR sub.task_id::text = e.payload ->> 'task_id');
    PERFORM pg_notify('switchboard_outbox', '');
    RETURN NULL;
END
$$;
"""

DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION outbox_fan_out() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, e.created_at
    FROM written e
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type);
    PERFORM pg_notify('switchboard_outbox', '');
    RETURN NULL;
END
$$;

DELETE FROM subscriptions WHERE push_config_id IS NOT NULL;
ALTER TABLE subscriptions DROP COLUMN push_config_id, DROP COLUMN task_id;
DROP TABLE a2a_push_configs;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
