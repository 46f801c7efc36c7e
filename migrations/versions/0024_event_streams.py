"""Event streams: outbox events get a position in commit order, and the changes clients
watch live are events too.

``GET /v1/sessions/{id}/events`` and ``GET /v1/events/stream`` (app/events/streams.py)
serve the outbox as Server-Sent Events whose ``id`` is ``outbox_events.position``. An
identity column would number events in the order they were *inserted*, and a reader
that saw number 7 committed could later meet number 6 committed after it: a resumed
stream would skip it. So an event is written without a position and numbered after it
committed, by ``outbox_sequence()``, which takes its turn under a transaction-level
advisory lock: numbering runs one after another, each numbers only committed events, so a
reader that sees a position has already seen (or will never see) every lower one.
``outbox_fan_out()`` also NOTIFYs ``switchboard_outbox`` so the replicas streaming
number and read the new events at once.

New events: ``session.version`` (every new version of a session; ``session.handoff`` for
a handoff's), ``task.transition`` (every task transition), ``breaker.changed`` (a
breaker's state changed).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE SEQUENCE outbox_events_position_seq;
ALTER TABLE outbox_events ADD COLUMN position bigint;
CREATE UNIQUE INDEX outbox_events_position_idx ON outbox_events (position)
    WHERE position IS NOT NULL;
CREATE INDEX outbox_events_unsequenced_idx ON outbox_events (created_at, event_id)
    WHERE position IS NULL;
CREATE INDEX outbox_events_session_position_idx
    ON outbox_events ((payload ->> 'session_id'), position) WHERE position IS NOT NULL;

CREATE FUNCTION outbox_sequence_lock() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1396852054::bigint  -- 'SBEV'
$$;

CREATE FUNCTION outbox_sequence(batch integer) RETURNS bigint
    LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    numbered bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(outbox_sequence_lock());
    WITH due AS (
        SELECT e.event_id FROM outbox_events e
        WHERE e.position IS NULL
        ORDER BY e.created_at, e.event_id
        LIMIT batch
    ), numbers AS (
        SELECT due.event_id, nextval('outbox_events_position_seq') AS position FROM due
    )
    UPDATE outbox_events e SET position = numbers.position
    FROM numbers
    WHERE e.event_id = numbers.event_id AND e.position IS NULL;
    GET DIAGNOSTICS numbered = ROW_COUNT;
    RETURN numbered;
END
$$;

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

CREATE FUNCTION session_version_told() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT CASE WHEN v.change_reason LIKE 'handoff to %' THEN 'session.handoff'
                ELSE 'session.version' END,
           jsonb_build_object('session_id', v.session_id, 'user_id', s.user_id,
                              'version', v.version, 'status', v.status,
                              'current_agent', v.current_agent,
                              'progress_percentage', v.progress_percentage,
                              'changed_by', v.changed_by, 'change_reason', v.change_reason,
                              'merge_base', v.merge_base),
           v.created_at
    FROM written v
    JOIN session_coordination s ON s.session_id = v.session_id AND s.version = v.version
    ORDER BY v.session_id, v.version;
    RETURN NULL;
END
$$;

CREATE TRIGGER session_state_versions_told
    AFTER INSERT ON session_state_versions
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION session_version_told();

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
"""

DOWNGRADE = r"""
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
DROP TRIGGER session_state_versions_told ON session_state_versions;
DROP FUNCTION session_version_told();
CREATE OR REPLACE FUNCTION outbox_fan_out() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, e.created_at
    FROM written e
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type);
    RETURN NULL;
END
$$;
DROP FUNCTION outbox_sequence(integer);
DROP FUNCTION outbox_sequence_lock();
DELETE FROM outbox_events
WHERE event_type IN ('session.version', 'session.handoff', 'task.transition', 'breaker.changed');
DROP INDEX outbox_events_session_position_idx;
DROP INDEX outbox_events_unsequenced_idx;
DROP INDEX outbox_events_position_idx;
ALTER TABLE outbox_events DROP COLUMN position;
DROP SEQUENCE outbox_events_position_seq;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
