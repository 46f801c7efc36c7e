-- Sessions: the coordinated state of one user's conversation across agents.
-- Every content change bumps `version` and writes one session_state_versions row in the
-- same statement (session_version in schema.sql makes the row). Times come from the
-- application clock ($n), never from now().

-- name: insert_session
-- A new session at version 1 and the version row that records it ("created" by $12), in
-- one statement: atomic without a transaction.
WITH created AS (
    INSERT INTO session_coordination (
        user_id, session_type, priority, current_agent, agent_sequence, session_state,
        coordination_metadata, progress_percentage, preserve,
        created_at, updated_at, last_activity_at, expires_at
    )
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $10, $11)
    RETURNING *
), recorded AS (
    INSERT INTO session_state_versions
    SELECT v.* FROM created c, session_version(c, $12, 'created', $10) v
)
SELECT * FROM created

-- name: get_session
SELECT * FROM session_coordination WHERE session_id = $1

-- name: get_session_for_handoff
-- The session and, in the same round trip, whether the agent it is to be handed to ($2)
-- may take it: NULL (no such agent), 'revoked' (its key was revoked), 'switched_off'
-- (enabled = false: routing skips it) or 'available'. Seeded agents without a key of
-- their own are available: they are reached by url, not by key.
SELECT s.*,
       CASE
           WHEN a.name IS NULL THEN NULL
           WHEN a.disabled_at IS NOT NULL THEN 'revoked'
           WHEN NOT a.enabled THEN 'switched_off'
           ELSE 'available'
       END AS to_agent_state
FROM session_coordination s
LEFT JOIN agents a ON a.name = $2
WHERE s.session_id = $1

-- name: lock_session
-- Serialises writers of one session; the version check then decides who wins.
SELECT * FROM session_coordination WHERE session_id = $1 FOR UPDATE

-- name: update_session_content
-- The new content, its version row and (for the coordinator's changes) the decision that
-- caused it, in one statement: one round trip, atomic even outside a transaction. No row
-- back: the session is no longer at version $2. $13 changed_by, $14 change_reason,
-- $15 the decision as a coordination_decisions row in JSON, or NULL; its session_version
-- and created_at are the version written here.
WITH updated AS (
    UPDATE session_coordination
    SET session_state = $3,
        agent_sequence = $4,
        coordination_metadata = $5,
        current_agent = $6,
        progress_percentage = $7,
        status = $8,
        priority = $9,
        preserve = $10,
        completed_at = $11,
        version = version + 1,
        updated_at = $12,
        last_activity_at = $12
    WHERE session_id = $1 AND version = $2
    RETURNING *
), recorded AS (
    INSERT INTO session_state_versions
    SELECT v.* FROM updated u, session_version(u, $13, $14, $12) v
), decided AS (
    INSERT INTO coordination_decisions (
        session_id, session_version, message, context_flags, classifier, intents,
        primary_intent, chosen_agent, routed_by, breaker_state, outcome, fallback, degraded,
        attempts, error, response, execution_time_ms, created_by, created_at, trace_id
    )
    SELECT u.session_id, u.version, d.message, d.context_flags, d.classifier, d.intents,
           d.primary_intent, d.chosen_agent, d.routed_by, d.breaker_state, d.outcome,
           d.fallback, d.degraded, d.attempts, d.error, d.response, d.execution_time_ms,
           d.created_by, u.updated_at, d.trace_id
    FROM updated u, jsonb_populate_record(NULL::coordination_decisions, $15::jsonb) d
    WHERE $15::jsonb IS NOT NULL
    RETURNING decision_id
)
SELECT updated.*, (SELECT decision_id FROM decided) AS decision_id FROM updated

-- name: touch_session
-- Heartbeat: records activity, wakes an idle session, and keeps a session with a running
-- process alive for at least the extension period. Not a content change: no new version.
-- Completed and expired sessions are left alone (no row back).
UPDATE session_coordination
SET last_activity_at = $2,
    status = CASE WHEN status = 'idle' THEN 'active' ELSE status END,
    expires_at = CASE
        WHEN session_state ->> 'active_process' IS NOT NULL
            THEN greatest(expires_at, $2::timestamptz + $3::interval)
        ELSE expires_at
    END,
    expiry_warned_at = CASE
        WHEN session_state ->> 'active_process' IS NOT NULL THEN NULL
        ELSE expiry_warned_at
    END
WHERE session_id = $1 AND status NOT IN ('completed', 'expired')
RETURNING *

-- name: list_user_sessions
-- Keyset page, newest first: rows strictly before the cursor ($2, $3).
SELECT * FROM session_coordination
WHERE user_id = $1 AND (created_at, session_id) < ($2, $3)
ORDER BY created_at DESC, session_id DESC
LIMIT $4

-- name: list_user_sessions_by_status
SELECT * FROM session_coordination
WHERE user_id = $1 AND status = $2 AND (created_at, session_id) < ($3, $4)
ORDER BY created_at DESC, session_id DESC
LIMIT $5

-- name: list_session_versions
SELECT * FROM session_state_versions
WHERE session_id = $1 AND version < $2
ORDER BY version DESC
LIMIT $3

-- name: get_session_version
SELECT * FROM session_state_versions
WHERE session_id = $1 AND version = $2
