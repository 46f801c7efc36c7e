-- Durable agent tasks (app/tasks/): submission, the claim, the running attempt's lease,
-- its outcome (completed, a retry, a delay, a failure for good), cancel, detach, reads.
-- Every statement that ends an attempt is fenced by (lease_owner, attempt): a replica
-- whose lease was taken over changes nothing. The transition rule and the history are
-- the trigger's (agent_task_transition in schema.sql); the dead letter, the session's
-- escalation and the event are agent_task_dead_lettered's.

-- name: insert_task
-- A queued task. No row back when the principal already used the idempotency key: the
-- caller reads that task (get_task_by_key). $1 task id, $2 session, $3 user, $4 agent,
-- $5 kind, $6 input, $7 priority, $8 scheduled at, $9 max attempts, $10 key,
-- $11 created by, $12 trace id, $13 traceparent, $14 now, $15 decision, $16 requeue of.
INSERT INTO agent_tasks (task_id, session_id, user_id, agent_name, kind, input, priority,
                         scheduled_at, max_attempts, idempotency_key, created_by, trace_id,
                         traceparent, created_at, decision_id, requeue_of, status_reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, 'submitted')
ON CONFLICT (created_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *

-- name: insert_task_leased
-- The same task already leased to the submitting replica at its first attempt (it runs
-- it at once), unless the agent has $19 attempts running or the task's session holds it
-- (escalated: agent_task_held): then no row, and the caller queues it with insert_task. Called under claim_lock, like the claim. $17 owner,
-- $18 lease until.
INSERT INTO agent_tasks (task_id, session_id, user_id, agent_name, kind, input, priority,
                         scheduled_at, max_attempts, idempotency_key, created_by, trace_id,
                         traceparent, created_at, decision_id, requeue_of, status, attempt,
                         lease_owner, lease_expires_at, started_at, status_actor,
                         status_reason)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, 'working', 1,
       $17, $18, $14, $17, 'run where submitted'
WHERE (SELECT count(*) FROM agent_tasks WHERE agent_name = $4 AND lease_owner IS NOT NULL)
      < $19
  AND NOT agent_task_held($2, $16)
ON CONFLICT (created_by, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING *

-- name: claim_lock
-- A leased submission takes the claimers' turn (agent_tasks_claim in schema.sql), so that
-- the per-agent limit it checks is not read by a claim at the same time.
SELECT pg_advisory_xact_lock(agent_tasks_claim_lock())

-- name: claim_tasks
-- Up to $4 due tasks for replica $2, leased until $3 ($1 now; $5 agents with a
-- concurrency limit of their own, $6 those limits, $7 everyone else's): one round trip,
-- agent_tasks_claim() in schema.sql takes the claimers' turn and claims.
SELECT * FROM agent_tasks_claim($1, $2, $3, $4, $5, $6, $7)

-- name: renew_leases
-- The attempts replica $1 runs (tasks $2 at attempts $4) keep their tasks until $3; a task
-- not returned has lost its lease (taken over, canceled, or claimed again as a later
-- attempt after this one's lease ran out), and its attempt must stop.
UPDATE agent_tasks
SET lease_expires_at = $3
WHERE (task_id, attempt) IN (SELECT * FROM unnest($2::uuid[], $4::integer[]))
  AND lease_owner = $1
RETURNING task_id

-- name: complete_tasks
-- The results of attempts replica $1 ran, stored together (a completion waits at most
-- for the statement before it: group commit). $2 tasks, $3 their attempts, $4 their
-- results, $5 now. Returns the ids stored and whether each was detached meanwhile (the
-- caller holds the rest of each row); a task whose lease was lost is not among them.
UPDATE agent_tasks t
SET status = 'completed', result = c.result, finished_at = $5, lease_owner = NULL,
    lease_expires_at = NULL, last_error = NULL, status_actor = $1, status_reason = 'completed'
FROM unnest($2::uuid[], $3::integer[], $4::jsonb[]) AS c (task_id, attempt, result)
WHERE t.task_id = c.task_id AND t.lease_owner = $1 AND t.attempt = c.attempt
RETURNING t.task_id, t.detached

-- name: retry_task
-- The attempt failed and another one is due at $5 (after the backoff): the same task,
-- still working, its lease given up. $4 the error.
UPDATE agent_tasks
SET lease_owner = NULL, lease_expires_at = NULL, scheduled_at = $5, last_error = $4,
    status_actor = $2, status_reason = 'retry after: ' || $4
WHERE task_id = $1 AND lease_owner = $2 AND attempt = $3
RETURNING *

-- name: interrupt_task
-- The agent answered that it waits for the user (A2A input-required or auth-required, $4):
-- the task waits in that state, its lease given up, holding the agent's question and the
-- remote task to continue ($5). Not terminal: the user's next message resumes it.
UPDATE agent_tasks
SET status = $4, result = $5, lease_owner = NULL, lease_expires_at = NULL, last_error = NULL,
    status_actor = $2, status_reason = 'agent asks: ' || $4
WHERE task_id = $1 AND lease_owner = $2 AND attempt = $3
RETURNING *

-- name: resume_task
-- The user answered a task that waits for input: the same task works again, with the new
-- request ($3), leased to $2 until $4 as a new attempt, with a fresh budget of $5 attempts
-- (at most 100). No row: it no longer waits (canceled, or resumed by another message).
UPDATE agent_tasks
SET status = 'working', input = $3, result = NULL, attempt = attempt + 1, lease_owner = $2,
    lease_expires_at = $4, max_attempts = least(100, attempt + $5), detached = false,
    scheduled_at = $6, status_actor = $2, status_reason = 'the user answered'
WHERE task_id = $1 AND status IN ('input-required', 'auth-required')
RETURNING *

-- name: session_task_awaiting_input
-- The newest task of a session that waits for the user's input, if any
-- (agent_tasks_awaiting_input_idx).
SELECT * FROM agent_tasks
WHERE session_id = $1 AND status IN ('input-required', 'auth-required')
ORDER BY created_at DESC, task_id DESC
LIMIT 1

-- name: delay_task
-- The attempt was never made (the agent's circuit is open): the attempt is given back and
-- the task waits until $5, when the breaker may let a probe through. $4 why.
UPDATE agent_tasks
SET lease_owner = NULL, lease_expires_at = NULL, scheduled_at = $5,
    attempt = attempt - 1, status_actor = $2, status_reason = 'delayed: ' || $4
WHERE task_id = $1 AND lease_owner = $2 AND attempt = $3
RETURNING *

-- name: fail_task
-- The task failed for good ($6: 'attempts_exhausted' or 'not_retryable'): failed, its
-- dead letter, its session escalated (session_escalate), the events. $4 the error, $5 now.
WITH failed AS (
    UPDATE agent_tasks
    SET status = 'failed', last_error = $4, finished_at = $5, lease_owner = NULL,
        lease_expires_at = NULL, status_actor = $2, status_reason = $6
    WHERE task_id = $1 AND lease_owner = $2 AND attempt = $3
    RETURNING *
)
SELECT f.*, agent_task_dead_lettered(ROW(f.*)::agent_tasks, $6, $5) AS dead_letter_id
FROM failed f

-- name: release_expired_leases
-- The reaper: attempts whose replica stopped renewing (killed) before their last attempt
-- go back to the queue at once; the next claim is a new attempt. $1 now, $2 reaper.
UPDATE agent_tasks t
SET lease_owner = NULL, lease_expires_at = NULL, scheduled_at = $1,
    last_error = 'lease of ' || t.lease_owner || ' expired', status_actor = $2,
    status_reason = 'lease expired'
WHERE t.task_id = ANY (ARRAY(
        SELECT x.task_id FROM agent_tasks x
        WHERE x.lease_owner IS NOT NULL AND x.lease_expires_at < $1
          AND x.attempt < x.max_attempts
        ORDER BY x.lease_expires_at
        LIMIT 100
        FOR UPDATE SKIP LOCKED))
RETURNING t.task_id

-- name: fail_expired_leases
-- The same for attempts that were the last: the task fails for good (lease_expired).
WITH failed AS (
    UPDATE agent_tasks t
    SET status = 'failed', finished_at = $1, lease_owner = NULL, lease_expires_at = NULL,
        last_error = 'lease of ' || t.lease_owner || ' expired on the last attempt',
        status_actor = $2, status_reason = 'lease_expired'
    WHERE t.task_id = ANY (ARRAY(
            SELECT x.task_id FROM agent_tasks x
            WHERE x.lease_owner IS NOT NULL AND x.lease_expires_at < $1
              AND x.attempt >= x.max_attempts
            ORDER BY x.lease_expires_at
            LIMIT 100
            FOR UPDATE SKIP LOCKED))
    RETURNING t.*
)
SELECT f.*, agent_task_dead_lettered(ROW(f.*)::agent_tasks, 'lease_expired', $1)
           AS dead_letter_id
FROM failed f

-- name: cancel_task
-- $2 who, $3 now, $4 why. No row: the task is already over (or does not exist).
UPDATE agent_tasks
SET status = 'canceled', finished_at = $3, lease_owner = NULL, lease_expires_at = NULL,
    status_actor = $2, status_reason = $4
WHERE task_id = $1 AND status NOT IN ('completed', 'failed', 'canceled', 'rejected')
RETURNING *

-- name: detach_task
-- Serialised with completion by the row lock: exactly one of the two sees the other. A
-- task waiting for input is settled like a finished one: its question is the answer.
UPDATE agent_tasks
SET detached = true
WHERE task_id = $1 AND status IN ('submitted', 'working')
RETURNING *

-- name: get_task
SELECT * FROM agent_tasks WHERE task_id = $1

-- name: get_tasks
SELECT * FROM agent_tasks WHERE task_id = ANY ($1::uuid[])

-- name: get_task_by_key
SELECT * FROM agent_tasks
WHERE created_by = $1 AND idempotency_key = $2 AND idempotency_key IS NOT NULL

-- name: list_session_tasks
-- Keyset page, newest first: rows strictly before the cursor ($2, $3).
SELECT * FROM agent_tasks
WHERE session_id = $1 AND (created_at, task_id) < ($2, $3)
ORDER BY created_at DESC, task_id DESC
LIMIT $4

-- name: task_transitions
SELECT * FROM agent_task_transitions WHERE task_id = $1 ORDER BY at, attempt

-- name: list_dead_letters
-- Newest first; $1 'open', 'requeued', 'discarded' or 'all'.
SELECT d.*, t.agent_name, t.kind, t.session_id, t.user_id, t.attempt AS attempts
FROM dead_letters d
JOIN agent_tasks t USING (task_id)
WHERE ($1 = 'all' OR $1 = CASE WHEN d.discarded_at IS NOT NULL THEN 'discarded'
                               WHEN d.requeued_at IS NOT NULL THEN 'requeued'
                               ELSE 'open' END)
  AND (d.failed_at, d.dead_letter_id) < ($2, $3)
ORDER BY d.failed_at DESC, d.dead_letter_id DESC
LIMIT $4

-- name: lock_dead_letter
SELECT d.*, t.agent_name, t.kind, t.session_id, t.user_id, t.attempt AS attempts
FROM dead_letters d
JOIN agent_tasks t USING (task_id)
WHERE d.dead_letter_id = $1
FOR UPDATE OF d

-- name: mark_requeued
UPDATE dead_letters
SET requeued_task_id = $2, requeued_at = $3, requeued_by = $4
WHERE dead_letter_id = $1

-- name: mark_discarded
UPDATE dead_letters
SET discarded_at = $2, discarded_by = $3, discard_reason = $4
WHERE dead_letter_id = $1

-- name: get_dead_letter
SELECT d.*, t.agent_name, t.kind, t.session_id, t.user_id, t.attempt AS attempts
FROM dead_letters d
JOIN agent_tasks t USING (task_id)
WHERE d.dead_letter_id = $1

-- name: list_visible_tasks
-- The A2A ListTasks page (app/a2a): newest first, keyset before ($5, $6). $1: the caller
-- whose tasks these are (submitted by it or for it), NULL for every task (the admin, or a
-- session's tasks, which every key may read); $2: the session (the A2A contextId) or NULL;
-- $3: a status or NULL; $4: last changed at or after, or NULL. The filters are optional
-- parameters rather than one query each: a page is read per ListTasks call, and the
-- session's index serves the contextId case.
SELECT * FROM agent_tasks
WHERE ($1::text IS NULL OR created_by = $1 OR agent_name = $1)
  AND ($2::uuid IS NULL OR session_id = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::timestamptz IS NULL OR coalesce(finished_at, started_at, created_at) >= $4)
  AND (created_at, task_id) < ($5, $6)
ORDER BY created_at DESC, task_id DESC
LIMIT $7

-- name: count_visible_tasks
-- How many tasks list_visible_tasks pages through (its filters, no keyset).
SELECT count(*) FROM agent_tasks
WHERE ($1::text IS NULL OR created_by = $1 OR agent_name = $1)
  AND ($2::uuid IS NULL OR session_id = $2)
  AND ($3::text IS NULL OR status = $3)
  AND ($4::timestamptz IS NULL OR coalesce(finished_at, started_at, created_at) >= $4)

-- name: wake_workers
-- Held tasks may run now (their session was resolved): the workers claim at once rather
-- than at their next poll.
SELECT announce_after_commit('switchboard_tasks', '')
