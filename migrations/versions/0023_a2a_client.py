"""A2A: agents called with A2A SendMessage, discovered cards, and tasks waiting for input.

An agent whose card declares an A2A JSON-RPC interface is called with the a2a-sdk client
(app/outbound/a2a.py): ``a2a_url`` and ``a2a_protocol_version`` are that interface, taken
from the card when it is published or discovered. Discovery (POST /v1/agents/{name}/discover
and the agent_cards job) records how the last fetch of the card went: ``card_status``,
``card_error``, ``card_fetched_at``, ``card_checked_at``. ``agent_shown`` returns them (its
row type changes, so it is dropped and created again). A task that waits for the user's
input (A2A input-required or auth-required) is announced on switchboard_task_finished like
a finished one: its waiter returns with the agent's question; every message looks for such
a task of its session (agent_tasks_awaiting_input_idx).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE agents
    ADD COLUMN a2a_url text CHECK (a2a_url ~ '^https?://[^\s]+$' AND char_length(a2a_url) <= 2000),
    ADD COLUMN a2a_protocol_version text CHECK (char_length(a2a_protocol_version) <= 20),
    ADD COLUMN card_status text
        CHECK (card_status IN ('published', 'discovered', 'unreachable', 'invalid')),
    ADD COLUMN card_error text CHECK (char_length(card_error) <= 2000),
    ADD COLUMN card_fetched_at timestamptz,
    ADD COLUMN card_checked_at timestamptz;
UPDATE agents SET card_status = 'published' WHERE card IS NOT NULL;
CREATE INDEX agent_tasks_awaiting_input_idx ON agent_tasks (session_id, created_at DESC)
    WHERE status IN ('input-required', 'auth-required');

DROP FUNCTION agent_shown(agents);
CREATE FUNCTION agent_shown(a agents)
    RETURNS TABLE (
        agent_id uuid, name text, roles text[], created_at timestamptz,
        disabled_at timestamptz, description text, url text, timeout_ms integer,
        retry_attempts integer, fallback_strategy text, intents text[], skills jsonb,
        enabled boolean, fail_max integer, reset_timeout_ms integer, has_key boolean,
        updated_at timestamptz, a2a_url text, a2a_protocol_version text, card_status text,
        card_error text, card_fetched_at timestamptz, card_checked_at timestamptz)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.agent_id, a.name, a.roles, a.created_at, a.disabled_at, a.description, a.url,
           a.timeout_ms, a.retry_attempts, a.fallback_strategy, a.intents, a.skills,
           a.enabled AND a.disabled_at IS NULL, a.fail_max, a.reset_timeout_ms,
           a.api_key_hash IS NOT NULL, a.updated_at, a.a2a_url, a.a2a_protocol_version,
           a.card_status, a.card_error, a.card_fetched_at, a.card_checked_at
$$;

CREATE OR REPLACE FUNCTION agent_task_transition() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    allowed boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        allowed := NEW.status IN ('submitted', 'working');
    ELSE
        allowed := CASE OLD.status
            WHEN 'submitted' THEN NEW.status IN ('working', 'canceled', 'rejected', 'failed')
            WHEN 'working' THEN NEW.status IN ('working', 'completed', 'failed', 'canceled',
                                               'input-required', 'auth-required')
            WHEN 'input-required' THEN NEW.status IN ('working', 'canceled', 'failed')
            WHEN 'auth-required' THEN NEW.status IN ('working', 'canceled', 'failed')
            ELSE false
        END;
    END IF;
    IF NOT allowed THEN
        RAISE EXCEPTION 'task % cannot go from % to %', NEW.task_id,
            CASE WHEN TG_OP = 'INSERT' THEN 'nothing' ELSE OLD.status END, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'agent_tasks_transition';
    END IF;
    INSERT INTO agent_task_transitions (task_id, from_status, to_status, attempt, actor, reason,
                                        due_at)
    VALUES (NEW.task_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
            NEW.attempt, coalesce(NEW.status_actor, NEW.created_by), NEW.status_reason,
            NEW.scheduled_at);
    IF NEW.status IN ('completed', 'failed', 'canceled', 'rejected', 'input-required',
                      'auth-required') THEN
        PERFORM pg_notify('switchboard_task_finished', NEW.task_id::text);
    END IF;
    RETURN NULL;
END
$$;
"""

DOWNGRADE = r"""
DROP INDEX agent_tasks_awaiting_input_idx;
CREATE OR REPLACE FUNCTION agent_task_transition() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    allowed boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        allowed := NEW.status IN ('submitted', 'working');
    ELSE
        allowed := CASE OLD.status
            WHEN 'submitted' THEN NEW.status IN ('working', 'canceled', 'rejected', 'failed')
            WHEN 'working' THEN NEW.status IN ('working', 'completed', 'failed', 'canceled',
                                               'input-required', 'auth-required')
            WHEN 'input-required' THEN NEW.status IN ('working', 'canceled', 'failed')
            WHEN 'auth-required' THEN NEW.status IN ('working', 'canceled', 'failed')
            ELSE false
        END;
    END IF;
    IF NOT allowed THEN
        RAISE EXCEPTION 'task % cannot go from % to %', NEW.task_id,
            CASE WHEN TG_OP = 'INSERT' THEN 'nothing' ELSE OLD.status END, NEW.status
            USING ERRCODE = 'check_violation', CONSTRAINT = 'agent_tasks_transition';
    END IF;
    INSERT INTO agent_task_transitions (task_id, from_status, to_status, attempt, actor, reason,
                                        due_at)
    VALUES (NEW.task_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
            NEW.attempt, coalesce(NEW.status_actor, NEW.created_by), NEW.status_reason,
            NEW.scheduled_at);
    IF NEW.status IN ('completed', 'failed', 'canceled', 'rejected') THEN
        PERFORM pg_notify('switchboard_task_finished', NEW.task_id::text);
    END IF;
    RETURN NULL;
END
$$;

DROP FUNCTION agent_shown(agents);
CREATE FUNCTION agent_shown(a agents)
    RETURNS TABLE (
        agent_id uuid, name text, roles text[], created_at timestamptz,
        disabled_at timestamptz, description text, url text, timeout_ms integer,
        retry_attempts integer, fallback_strategy text, intents text[], skills jsonb,
        enabled boolean, fail_max integer, reset_timeout_ms integer, has_key boolean,
        updated_at timestamptz)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.agent_id, a.name, a.roles, a.created_at, a.disabled_at, a.description, a.url,
           a.timeout_ms, a.retry_attempts, a.fallback_strategy, a.intents, a.skills,
           a.enabled AND a.disabled_at IS NULL, a.fail_max, a.reset_timeout_ms,
           a.api_key_hash IS NOT NULL, a.updated_at
$$;

ALTER TABLE agents
    DROP COLUMN a2a_url,
    DROP COLUMN a2a_protocol_version,
    DROP COLUMN card_status,
    DROP COLUMN card_error,
    DROP COLUMN card_fetched_at,
    DROP COLUMN card_checked_at;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
