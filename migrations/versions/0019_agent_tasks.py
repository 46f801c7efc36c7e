"""Durable agent tasks: the queue of agent calls, their transition history and the
dead-letter queue.

Every agent call becomes a row in agent_tasks that survives a crash: claimed with FOR
UPDATE SKIP LOCKED, held by a lease its replica renews, retried with backoff as a new
attempt of the same task, and after its last attempt written to dead_letters (its session
escalated, a task.dead_lettered event). agent_task_transition() refuses backward and
terminal transitions and writes the history (app/tasks/).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- One unit of agent work (an agent call), kept until it reaches a terminal state and
-- beyond: the queue, the lease of the replica running it, its retries and its result.
-- Status follows the A2A task states. A retry is the same task at a new attempt (status
-- stays 'working', the lease is cleared and scheduled_at moves to after the backoff);
-- agent_task_transition() below refuses every backward or terminal transition.
CREATE TABLE agent_tasks (
    task_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    session_id uuid REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    -- The user the work is for (as text: a task may be for a user Switchboard does not
    -- store); erasure deletes a user's tasks by it.
    user_id text CHECK (char_length(user_id) BETWEEN 1 AND 256),
    agent_name text NOT NULL CHECK (char_length(agent_name) BETWEEN 1 AND 100),
    kind text NOT NULL
        CHECK (kind IN ('message', 'pending_action', 'handoff', 'classify', 'agent_call')),
    -- The seed's request_format (AgentRequest) or what the kind's handler reads.
    input jsonb NOT NULL CHECK (jsonb_typeof(input) = 'object'),
    -- 10 is the most urgent and is claimed first.
    priority smallint NOT NULL DEFAULT 5 CHECK (priority BETWEEN 1 AND 10),
    -- Not claimed before this: the submission time, or the end of a retry's backoff.
    scheduled_at timestamptz NOT NULL DEFAULT now(),
    status text NOT NULL DEFAULT 'submitted'
        CHECK (status IN ('submitted', 'working', 'input-required', 'auth-required',
                          'completed', 'failed', 'canceled', 'rejected')),
    -- Claims so far (0 until the first); a claim adds one, a delay (open breaker) gives
    -- it back.
    attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts integer NOT NULL DEFAULT 6 CHECK (max_attempts BETWEEN 1 AND 100),
    -- The replica running the current attempt, until when (renewed while it runs).
    lease_owner text,
    lease_expires_at timestamptz,
    idempotency_key text CHECK (char_length(idempotency_key) BETWEEN 1 AND 255),
    -- The principal that submitted the task; idempotency keys are scoped by it.
    created_by text NOT NULL,
    trace_id text,
    traceparent text,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz,
    last_error text,
    -- The seed's response_format, once completed.
    result jsonb,
    -- The coordination decision that created the task.
    decision_id uuid,
    -- The waiter gave up and answered with the fallback; the answer is applied in the
    -- background when the task finishes.
    detached boolean NOT NULL DEFAULT false,
    -- A dead letter's requeue is a new task linked to the failed one.
    requeue_of uuid REFERENCES agent_tasks (task_id) ON DELETE SET NULL,
    -- Who made the latest transition and why; copied into agent_task_transitions.
    status_actor text,
    status_reason text,
    CONSTRAINT agent_tasks_lease_whole CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL))
);

-- The claim: queued tasks (never claimed, or waiting for their retry) in priority order.
CREATE INDEX agent_tasks_queue_idx ON agent_tasks (priority DESC, scheduled_at)
    WHERE status IN ('submitted', 'working') AND lease_owner IS NULL;
-- Running attempts: per-agent concurrency and the reaper's expired leases.
CREATE INDEX agent_tasks_leased_idx ON agent_tasks (agent_name, lease_expires_at)
    WHERE lease_owner IS NOT NULL;
-- Every claim and completion moves a task's row to a new version (status and lease are
-- indexed), which adds an entry to each index whose predicate the row meets: the indexes
-- below hold only the rows that have the value they look up.
-- An Idempotency-Key is unique per submitter (ON CONFLICT names this index).
CREATE UNIQUE INDEX agent_tasks_idempotency_key ON agent_tasks (created_by, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX agent_tasks_session_idx ON agent_tasks (session_id, created_at DESC, task_id DESC)
    WHERE session_id IS NOT NULL;
-- Erasure finds a user's tasks without a session by this.
CREATE INDEX agent_tasks_user_idx ON agent_tasks (user_id) WHERE user_id IS NOT NULL;
-- ON DELETE SET NULL of requeue_of looks up the requeues of a deleted task.
CREATE INDEX agent_tasks_requeue_of_idx ON agent_tasks (requeue_of) WHERE requeue_of IS NOT NULL;

-- Every transition of a task: who, when, why; written by agent_task_transition().
CREATE TABLE agent_task_transitions (
    task_id uuid NOT NULL REFERENCES agent_tasks (task_id) ON DELETE CASCADE,
    -- NULL for the task's creation.
    from_status text,
    to_status text NOT NULL,
    attempt integer NOT NULL,
    actor text NOT NULL,
    reason text,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- When the task is due next (a retry: the end of its backoff).
    due_at timestamptz NOT NULL
);

CREATE INDEX agent_task_transitions_task_idx ON agent_task_transitions (task_id, at);

-- Tasks that failed for good, for a person to requeue or discard. Discarding keeps the
-- row (discarded_at/by/reason): the audit trail of what was given up and by whom.
CREATE TABLE dead_letters (
    dead_letter_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    task_id uuid NOT NULL UNIQUE REFERENCES agent_tasks (task_id) ON DELETE CASCADE,
    failure_reason text NOT NULL
        CHECK (failure_reason IN ('attempts_exhausted', 'not_retryable', 'lease_expired')),
    last_error text,
    failed_at timestamptz NOT NULL,
    manual_intervention_required boolean NOT NULL DEFAULT true,
    -- 1, plus one for each dead letter the task's requeue chain already had.
    escalation_level integer NOT NULL DEFAULT 1 CHECK (escalation_level >= 1),
    requeued_task_id uuid REFERENCES agent_tasks (task_id) ON DELETE SET NULL,
    requeued_at timestamptz,
    requeued_by text,
    discarded_at timestamptz,
    discarded_by text,
    discard_reason text CHECK (char_length(discard_reason) <= 1000),
    CONSTRAINT dead_letters_settled_once CHECK (requeued_at IS NULL OR discarded_at IS NULL)
);

CREATE INDEX dead_letters_failed_idx ON dead_letters (failed_at DESC, dead_letter_id DESC);
-- Deleting a task (its session's or user's deletion) looks for letters requeued as it.
CREATE INDEX dead_letters_requeued_idx ON dead_letters (requeued_task_id)
    WHERE requeued_task_id IS NOT NULL;

-- The transition rule, in the database so that no writer (a worker, a request, a person
-- at psql) can move a task backwards or out of a terminal state, and the history of every
-- transition, written with it. A retry (working -> working at a new attempt, or a lease
-- given up) is recorded; a lease renewal or a detach is not a transition (the trigger's
-- WHEN leaves them out). AFTER, not BEFORE: the history row references the task row. A
-- finished task is announced on switchboard_task_finished (TaskService.wait listens).
CREATE FUNCTION agent_task_transition() RETURNS trigger
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

CREATE TRIGGER agent_tasks_created
    AFTER INSERT ON agent_tasks
    FOR EACH ROW EXECUTE FUNCTION agent_task_transition();

CREATE TRIGGER agent_tasks_transition
    AFTER UPDATE ON agent_tasks
    FOR EACH ROW
    WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.attempt <> NEW.attempt
          OR (OLD.lease_owner IS NOT NULL AND NEW.lease_owner IS NULL))
    EXECUTE FUNCTION agent_task_transition();

-- The key of the claimers' turn (also taken by a submission leased at once).
CREATE FUNCTION agent_tasks_claim_lock() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1396855377::bigint  -- 'SBRQ'
$$;
-- The claim: up to `wanted` due tasks leased to `owner` until `lease_until`, in priority
-- (10 first) then scheduled_at order, skipping rows another claimer holds and agents at
-- their concurrency limit (`limited_agents` with `agent_limits`, `default_limit` for the
-- rest). Claims take turns (a transaction-level advisory lock): the per-agent count they
-- read is then never read by two at once. A plpgsql function, so that the claim after the
-- lock reads a snapshot taken after it, in one round trip. A few more rows than wanted are
-- locked, so that per-agent trimming still fills the batch.
CREATE FUNCTION agent_tasks_claim(
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

-- A queued task wakes the workers (they also poll): once per statement, whatever it wrote.
CREATE FUNCTION agent_task_queued() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_notify('switchboard_tasks', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER agent_tasks_queued
    AFTER INSERT ON agent_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION agent_task_queued();

-- A task that failed for good (`t`, already 'failed'): its dead letter, its session
-- marked escalated (a new version, when the session is active or idle) and a
-- task.dead_lettered event, at `at`. Returns the dead letter's id. Every way a task fails
-- for good (a last attempt, a refusal, a lease that ran out on the last attempt) ends here.
CREATE FUNCTION agent_task_dead_lettered(t agent_tasks, why text, at timestamptz)
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
"""

DOWNGRADE = r"""
DROP FUNCTION agent_task_dead_lettered(agent_tasks, text, timestamptz);
DROP FUNCTION agent_tasks_claim(timestamptz, text, timestamptz, integer, text[], integer[],
                                integer);
DROP TABLE dead_letters;
DROP TABLE agent_task_transitions;
DROP TABLE agent_tasks;
DROP FUNCTION agent_task_queued();
DROP FUNCTION agent_task_transition();
DROP FUNCTION agent_tasks_claim_lock();
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
