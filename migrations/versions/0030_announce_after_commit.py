"""No NOTIFY inside a writing transaction (issue 22): the triggers announce instead.

A transaction that queued a NOTIFY takes one database-wide lock at commit
(PreCommit_Notify), held through its commit's WAL flush, so every commit that wrote an
outbox event (every session write: session.version), queued a task or finished one waited
for the one before it. Measured alone, 8 connections of one-row inserts: 1,145-1,477/s
without the NOTIFY against 214-329/s with it.

``outbox_fan_out()``, ``agent_task_transition()`` and ``agent_task_queued()`` now call
``announce_after_commit(channel, payload)``: a DEBUG message in the statement's own reply
to the writing client. The writing process wakes its own listeners after the commit and
sends one coalesced NOTIFY per channel from a short statement of its own, off the request
path (app/db/announce.py); the listeners' timers find what other tools write.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION announce_after_commit(channel text, payload text) RETURNS void
    LANGUAGE plpgsql
AS $$
BEGIN
    RAISE DEBUG USING MESSAGE = 'switchboard announce', DETAIL = channel, HINT = payload;
END
$$;

CREATE OR REPLACE FUNCTION outbox_fan_out() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, e.created_at
    FROM written e
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type)
        AND (sub.task_id IS NULL OR sub.task_id::text = e.payload ->> 'task_id');
    PERFORM announce_after_commit('switchboard_outbox', '');
    RETURN NULL;
END
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
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('task.transition',
            jsonb_build_object('task_id', NEW.task_id, 'session_id', NEW.session_id,
                               'user_id', NEW.user_id, 'agent_name', NEW.agent_name,
                               'kind', NEW.kind,
                               'from_status', CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END,
                               'to_status', NEW.status, 'attempt', NEW.attempt,
                               'actor', coalesce(NEW.status_actor, NEW.created_by),
                               'reason', NEW.status_reason),
            clock_timestamp());
    IF NEW.status IN ('completed', 'failed', 'canceled', 'rejected', 'input-required',
                      'auth-required') THEN
        PERFORM announce_after_commit('switchboard_task_finished', NEW.task_id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION agent_task_queued() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM announce_after_commit('switchboard_tasks', '');
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
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type)
        AND (sub.task_id IS NULL OR sub.task_id::text = e.payload ->> 'task_id');
    PERFORM pg_notify('switchboard_outbox', '');
    RETURN NULL;
END
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
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('task.transition',
            jsonb_build_object('task_id', NEW.task_id, 'session_id', NEW.session_id,
                               'user_id', NEW.user_id, 'agent_name', NEW.agent_name,
                               'kind', NEW.kind,
                               'from_status', CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END,
                               'to_status', NEW.status, 'attempt', NEW.attempt,
                               'actor', coalesce(NEW.status_actor, NEW.created_by),
                               'reason', NEW.status_reason),
            clock_timestamp());
    IF NEW.status IN ('completed', 'failed', 'canceled', 'rejected', 'input-required',
                      'auth-required') THEN
        PERFORM pg_notify('switchboard_task_finished', NEW.task_id::text);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION agent_task_queued() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('switchboard_tasks', '');
    RETURN NULL;
END
$$;

DROP FUNCTION announce_after_commit(text, text);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
