"""Next step and escalation: the next-step rules as data, the decision log's next_step and
its escalated / resolved outcomes, one escalation path (session_escalate) that the dead
letter takes too, tasks held while their session waits for a person, and escalated
sessions kept from lapsing meanwhile.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE coordination_decisions ADD COLUMN next_step jsonb;
ALTER TABLE coordination_decisions DROP CONSTRAINT coordination_decisions_outcome_check;
ALTER TABLE coordination_decisions ADD CONSTRAINT coordination_decisions_outcome_check
    CHECK (outcome IN ('agent', 'fallback', 'clarification', 'accepted', 'escalated',
                       'resolved'));

CREATE TABLE next_step_rules (
    position integer PRIMARY KEY CHECK (position >= 0),
    name text NOT NULL UNIQUE CHECK (name ~ '^[a-z][a-z0-9_]{0,63}$'),
    event text CHECK (event IN ('answered', 'fallback', 'clarification', 'accepted')),
    condition text NOT NULL
        CHECK (condition IN ('always', 'step_retries_exhausted', 'fallbacks_exceeded',
                             'handoffs_exceeded', 'stalled', 'complete', 'handoff_suggested',
                             'queue_waiting')),
    outcome text NOT NULL
        CHECK (outcome IN ('continue', 'hand_off', 'ask_user', 'finalize',
                           'request_manual_intervention')),
    description text NOT NULL DEFAULT ''
);

INSERT INTO next_step_rules (position, name, event, condition, outcome, description) VALUES
    (10, 'step_retries', NULL, 'step_retries_exhausted', 'request_manual_intervention',
     'the same step (intent and agent) failed again after its last allowed retry'),
    (20, 'consecutive_fallbacks', NULL, 'fallbacks_exceeded', 'request_manual_intervention',
     'more fallback answers in a row than allowed'),
    (30, 'handoffs_without_progress', NULL, 'handoffs_exceeded', 'request_manual_intervention',
     'more handoffs than allowed without the progress moving'),
    (40, 'stalled', NULL, 'stalled', 'request_manual_intervention',
     'no progress for longer than allowed'),
    (50, 'clarification', 'clarification', 'always', 'ask_user',
     'the intents were too close to call: the user picks'),
    (60, 'finished', 'answered', 'complete', 'finalize',
     'the agent reported 100% and nothing waits in the queue'),
    (70, 'handoff', NULL, 'handoff_suggested', 'hand_off',
     'the turn passed the request on, or the answer suggested a registered agent'),
    (80, 'next_intent', NULL, 'queue_waiting', 'continue',
     'a queued intent waits: process it next (POST .../pending/next)'),
    (90, 'wait_for_user', NULL, 'always', 'ask_user',
     'nothing else to do: the next message is the user''s');

-- Whether a task waits for its session: a session that waits for a person (escalated)
-- holds its tasks in the queue (queued, not failed) until it is resolved. A dead letter's
-- requeue is a person's own decision and is not held.
CREATE FUNCTION agent_task_held(sid uuid, requeue_of uuid) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT requeue_of IS NULL AND EXISTS (
        SELECT 1 FROM session_coordination s
        WHERE s.session_id = sid AND s.status = 'escalated')
$$;

-- Manual intervention: session `sid` marked escalated at `at` (a new version by `actor`,
-- when it is active or idle), the decision that records why (outcome 'escalated', message
-- `why`, the context in response.output_data, the next-step decision in next_step) and
-- the event session.escalated, in one statement. Returns the decision's id; NULL when the
-- session is not active or idle (already escalated, completed, gone): nothing is written.
-- The one way the server escalates: the coordinator's next-step decision
-- (app/coordination/escalation.py) and a task's dead letter both come here.
CREATE FUNCTION session_escalate(
    sid uuid, actor text, why text, context jsonb, decided jsonb, at timestamptz,
    trace text, task uuid)
    RETURNS uuid
    LANGUAGE sql VOLATILE
AS $$
    WITH escalated AS (
        UPDATE session_coordination c
        SET status = 'escalated', version = c.version + 1, updated_at = at
        WHERE c.session_id = sid AND c.status IN ('active', 'idle')
        RETURNING c.*
    ), recorded AS (
        INSERT INTO session_state_versions
        SELECT v.* FROM escalated e, session_version(e, actor, 'escalated: ' || why, at) v
    ), decision AS (
        INSERT INTO coordination_decisions (
            session_id, session_version, message, classifier, intents, outcome, degraded,
            response, execution_time_ms, created_by, created_at, trace_id, task_id, next_step)
        SELECT e.session_id, e.version, why, 'next_step', '[]', 'escalated', false,
               jsonb_build_object('text', why, 'output_data', context,
                                  'next_agent_suggestions', '[]'::jsonb),
               0, actor, at, trace, task, decided
        FROM escalated e
        RETURNING decision_id, session_version
    ), told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT 'session.escalated',
               jsonb_build_object('session_id', sid, 'session_version', d.session_version,
                                  'decision_id', d.decision_id, 'reason', why,
                                  'escalated_by', actor, 'task_id', task, 'context', context),
               at
        FROM decision d
    )
    SELECT decision_id FROM decision
$$;

CREATE OR REPLACE FUNCTION session_may_lapse(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT s.preserve AND NOT session_running(s) AND s.status <> 'escalated'
$$;

CREATE OR REPLACE FUNCTION agent_tasks_claim(
    now timestamptz, owner text, lease_until timestamptz, wanted integer,
    limited_agents text[], agent_limits integer[], default_limit integer)
    RETURNS SETOF agent_tasks
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(agent_tasks_claim_lock());
    RETURN QUERY
    WITH running AS (
        SELECT agent_name, count(*) AS n FROM agent_tasks
        WHERE lease_owner IS NOT NULL GROUP BY agent_name
    ), limits AS (
        SELECT agent_name, n FROM unnest($5::text[], $6::integer[]) AS l (agent_name, n)
    ), candidates AS (
        SELECT t.task_id, t.agent_name, t.priority, t.scheduled_at
        FROM agent_tasks t
        WHERE t.status IN ('submitted', 'working') AND t.lease_owner IS NULL
          AND t.scheduled_at <= $1
          AND NOT agent_task_held(t.session_id, t.requeue_of)
          AND coalesce((SELECT r.n FROM running r WHERE r.agent_name = t.agent_name), 0)
              < coalesce((SELECT l.n FROM limits l WHERE l.agent_name = t.agent_name), $7)
        ORDER BY t.priority DESC, t.scheduled_at
        LIMIT $4::integer * 4
        FOR UPDATE SKIP LOCKED
    ), chosen AS (
        SELECT c.task_id FROM (
            SELECT c.*, row_number() OVER (PARTITION BY c.agent_name
                                           ORDER BY c.priority DESC, c.scheduled_at) AS k
            FROM candidates c) c
        WHERE c.k + coalesce((SELECT r.n FROM running r WHERE r.agent_name = c.agent_name), 0)
              <= coalesce((SELECT l.n FROM limits l WHERE l.agent_name = c.agent_name), $7)
        ORDER BY c.priority DESC, c.scheduled_at
        LIMIT $4
    )
    UPDATE agent_tasks t
    SET status = 'working', attempt = t.attempt + 1, lease_owner = $2, lease_expires_at = $3,
        started_at = coalesce(t.started_at, $1), status_actor = $2, status_reason = 'claimed'
    FROM chosen
    WHERE t.task_id = chosen.task_id
    RETURNING t.*;
END
$$;

CREATE OR REPLACE FUNCTION agent_task_dead_lettered(t agent_tasks, why text, at timestamptz)
    RETURNS uuid
    LANGUAGE plpgsql
AS $$
DECLARE
    letter uuid;
    level integer;
    errors jsonb;
BEGIN
    SELECT coalesce(max(d.escalation_level), 0) + 1 INTO level
    FROM dead_letters d WHERE d.task_id = t.requeue_of;
    INSERT INTO dead_letters (task_id, failure_reason, last_error, failed_at, escalation_level)
    VALUES (t.task_id, why, t.last_error, at, level)
    RETURNING dead_letter_id INTO letter;
    -- The last errors: the failed attempts' own, newest first (a retry's reason is
    -- 'retry after: <error>'), the final one first of all.
    SELECT coalesce(jsonb_agg(e.reason ORDER BY e.at DESC), '[]') INTO errors
    FROM (SELECT x.reason, x.at FROM agent_task_transitions x
          WHERE x.task_id = t.task_id AND x.reason LIKE 'retry after: %'
          ORDER BY x.at DESC LIMIT 4) e;
    IF t.last_error IS NOT NULL THEN
        errors := jsonb_build_array(t.last_error) || errors;
    END IF;
    PERFORM session_escalate(
        t.session_id, 'task:' || t.task_id::text,
        'task ' || t.task_id::text || ' (' || t.agent_name || ') failed for good: ' || why,
        jsonb_build_object(
            'event', 'dead_lettered',
            'what_failed', jsonb_build_object('task_id', t.task_id, 'agent', t.agent_name,
                                              'kind', t.kind, 'failure_reason', why,
                                              'dead_letter_id', letter),
            'how_often', jsonb_build_object('attempts', t.attempt,
                                            'escalation_level', level),
            'limits', jsonb_build_object('max_attempts', t.max_attempts),
            'last_errors', errors),
        jsonb_build_object(
            'outcome', 'request_manual_intervention', 'rule', 'dead_lettered',
            'reason', 'a task failed for good: its dead letter needs a person',
            'inputs', jsonb_build_object(
                'event', 'dead_lettered',
                'counters', jsonb_build_object('attempts', t.attempt,
                                               'escalation_level', level),
                'limits', jsonb_build_object('max_attempts', t.max_attempts))),
        at, t.trace_id, t.task_id)
    WHERE t.session_id IS NOT NULL;
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('task.dead_lettered',
            jsonb_build_object('dead_letter_id', letter, 'task_id', t.task_id,
                               'session_id', t.session_id, 'user_id', t.user_id,
                               'agent_name', t.agent_name, 'kind', t.kind,
                               'failure_reason', why, 'last_error', t.last_error,
                               'attempts', t.attempt, 'escalation_level', level),
            at);
    RETURN letter;
END
$$;
"""

DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION agent_task_dead_lettered(t agent_tasks, why text, at timestamptz)
    RETURNS uuid
    LANGUAGE plpgsql
AS $$
DECLARE
    letter uuid;
    level integer;
BEGIN
    SELECT coalesce(max(d.escalation_level), 0) + 1 INTO level
    FROM dead_letters d WHERE d.task_id = t.requeue_of;
    INSERT INTO dead_letters (task_id, failure_reason, last_error, failed_at, escalation_level)
    VALUES (t.task_id, why, t.last_error, at, level)
    RETURNING dead_letter_id INTO letter;
    WITH escalated AS (
        UPDATE session_coordination s
        SET status = 'escalated', version = s.version + 1, updated_at = at
        WHERE s.session_id = t.session_id AND s.status IN ('active', 'idle')
        RETURNING s.*
    )
    INSERT INTO session_state_versions
    SELECT v.* FROM escalated e,
        session_version(e, 'task:' || t.task_id::text, 'task dead-lettered: ' || why, at) v;
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('task.dead_lettered',
            jsonb_build_object('dead_letter_id', letter, 'task_id', t.task_id,
                               'session_id', t.session_id, 'user_id', t.user_id,
                               'agent_name', t.agent_name, 'kind', t.kind,
                               'failure_reason', why, 'last_error', t.last_error,
                               'attempts', t.attempt, 'escalation_level', level),
            at);
    RETURN letter;
END
$$;

CREATE OR REPLACE FUNCTION agent_tasks_claim(
    now timestamptz, owner text, lease_until timestamptz, wanted integer,
    limited_agents text[], agent_limits integer[], default_limit integer)
    RETURNS SETOF agent_tasks
    LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(agent_tasks_claim_lock());
    RETURN QUERY
    WITH running AS (
        SELECT agent_name, count(*) AS n FROM agent_tasks
        WHERE lease_owner IS NOT NULL GROUP BY agent_name
    ), limits AS (
        SELECT agent_name, n FROM unnest($5::text[], $6::integer[]) AS l (agent_name, n)
    ), candidates AS (
        SELECT t.task_id, t.agent_name, t.priority, t.scheduled_at
        FROM agent_tasks t
        WHERE t.status IN ('submitted', 'working') AND t.lease_owner IS NULL
          AND t.scheduled_at <= $1
          AND coalesce((SELECT r.n FROM running r WHERE r.agent_name = t.agent_name), 0)
              < coalesce((SELECT l.n FROM limits l WHERE l.agent_name = t.agent_name), $7)
        ORDER BY t.priority DESC, t.scheduled_at
        LIMIT $4::integer * 4
        FOR UPDATE SKIP LOCKED
    ), chosen AS (
        SELECT c.task_id FROM (
            SELECT c.*, row_number() OVER (PARTITION BY c.agent_name
                                           ORDER BY c.priority DESC, c.scheduled_at) AS k
            FROM candidates c) c
        WHERE c.k + coalesce((SELECT r.n FROM running r WHERE r.agent_name = c.agent_name), 0)
              <= coalesce((SELECT l.n FROM limits l WHERE l.agent_name = c.agent_name), $7)
        ORDER BY c.priority DESC, c.scheduled_at
        LIMIT $4
    )
    UPDATE agent_tasks t
    SET status = 'working', attempt = t.attempt + 1, lease_owner = $2, lease_expires_at = $3,
        started_at = coalesce(t.started_at, $1), status_actor = $2, status_reason = 'claimed'
    FROM chosen
    WHERE t.task_id = chosen.task_id
    RETURNING t.*;
END
$$;

CREATE OR REPLACE FUNCTION session_may_lapse(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT s.preserve AND NOT session_running(s)
$$;

DROP FUNCTION session_escalate(uuid, text, text, jsonb, jsonb, timestamptz, text, uuid);
DROP FUNCTION agent_task_held(uuid, uuid);
DROP TABLE next_step_rules;
DELETE FROM coordination_decisions WHERE outcome IN ('escalated', 'resolved');
ALTER TABLE coordination_decisions DROP CONSTRAINT coordination_decisions_outcome_check;
ALTER TABLE coordination_decisions ADD CONSTRAINT coordination_decisions_outcome_check
    CHECK (outcome IN ('agent', 'fallback', 'clarification', 'accepted'));
ALTER TABLE coordination_decisions DROP COLUMN next_step;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
