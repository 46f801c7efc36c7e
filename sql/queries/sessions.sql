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
        attempts, error, response, execution_time_ms, created_by, created_at
    )
    SELECT u.session_id, u.version, d.message, d.context_flags, d.classifier, d.intents,
           d.primary_intent, d.chosen_agent, d.routed_by, d.breaker_state, d.outcome,
           d.fallback, d.degraded, d.attempts, d.error, d.response, d.execution_time_ms,
           d.created_by, u.updated_at
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

-- What time does to sessions (app/sessions/lifecycle.py, run by the jobs), and the
-- archive: expired and long-completed sessions leave the live tables with their history and
-- can be restored for the recovery window. Every batch statement locks its rows with FOR
-- UPDATE SKIP LOCKED, so a sweep never waits for (or blocks) an API writer holding one of
-- them; that row is simply taken next time.

-- name: idle_inactive_sessions
-- Job 1: active sessions quiet for too long become idle (a running process is never idled).
-- $1 idle threshold (inactive since before), $2 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination
    WHERE status = 'active' AND last_activity_at < $1
      AND NOT preserve AND session_state ->> 'active_process' IS NULL
    ORDER BY last_activity_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE session_coordination s
SET status = 'idle'
FROM picked
WHERE s.session_id = picked.session_id
RETURNING s.session_id

-- name: count_inactive_sessions
SELECT count(*) FROM session_coordination
WHERE status = 'active' AND last_activity_at < $1
  AND NOT preserve AND session_state ->> 'active_process' IS NULL

-- name: extend_active_processes
-- Job 2: sessions whose process moved in the last window live on: expiry = now + extension,
-- recorded as a version. Only sessions whose expiry is nearer than half the extension are
-- touched, so a busy session gets a new version every couple of hours, not every run.
-- $1 now, $2 updated since, $3 new expiry, $4 extend if expiring before, $5 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination
    WHERE session_state ->> 'active_process' IS NOT NULL
      AND updated_at > $2 AND expires_at < $4
      AND status NOT IN ('completed', 'expired')
    ORDER BY expires_at
    LIMIT $5
    FOR UPDATE SKIP LOCKED
), extended AS (
    UPDATE session_coordination s
    SET expires_at = $3, version = s.version + 1, expiry_warned_at = NULL
    FROM picked
    WHERE s.session_id = picked.session_id
    RETURNING s.*
)
INSERT INTO session_state_versions
SELECT v.* FROM extended e, session_version(e, 'scheduler', 'expiry_extended', $1) v
RETURNING session_id

-- name: count_extendable_sessions
SELECT count(*) FROM session_coordination
WHERE session_state ->> 'active_process' IS NOT NULL
  AND updated_at > $1 AND expires_at < $2 AND status NOT IN ('completed', 'expired')

-- name: warn_expiring_sessions
-- Job 6: sessions that will expire within the warning window, told once.
-- $1 now, $2 window end, $3 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination
    WHERE expires_at > $1 AND expires_at <= $2 AND expiry_warned_at IS NULL
      AND NOT preserve AND session_state ->> 'active_process' IS NULL
      AND status NOT IN ('completed', 'expired')
    ORDER BY expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), warned AS (
    UPDATE session_coordination s
    SET expiry_warned_at = $1
    FROM picked
    WHERE s.session_id = picked.session_id
    RETURNING s.session_id, s.user_id, s.session_type, s.expires_at
), events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.expiring',
           jsonb_build_object('session_id', session_id, 'user_id', user_id,
                              'session_type', session_type, 'expires_at', expires_at),
           $1::timestamptz
    FROM warned
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $1::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
SELECT session_id FROM warned

-- name: count_expiring_sessions
SELECT count(*) FROM session_coordination
WHERE expires_at > $1 AND expires_at <= $2 AND expiry_warned_at IS NULL
  AND NOT preserve AND session_state ->> 'active_process' IS NULL
  AND status NOT IN ('completed', 'expired')

-- name: archive_expired_sessions
-- Job 3: expired sessions with no running process (and not preserved) leave the live
-- tables; the row and its history are kept in session_archive for the recovery window, and
-- session.expired is emitted, all in this one statement. Completed sessions are not this
-- job's: they are kept for the completed retention and then archived by job 4.
-- $1 now, $2 restorable until, $3 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination
    WHERE expires_at < $1 AND NOT preserve AND session_state ->> 'active_process' IS NULL
      AND status <> 'completed'
    ORDER BY expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), archived AS (
    INSERT INTO session_archive (session_id, user_id, reason, session, versions, archived_at,
                                 restorable_until)
    SELECT s.session_id, s.user_id, 'expired', to_jsonb(s),
           coalesce((SELECT jsonb_agg(to_jsonb(v) ORDER BY v.version)
                     FROM session_state_versions v WHERE v.session_id = s.session_id), '[]'),
           $1::timestamptz, $2::timestamptz
    FROM session_coordination s JOIN picked USING (session_id)
    ON CONFLICT (session_id) DO UPDATE
    SET reason = excluded.reason, session = excluded.session, versions = excluded.versions,
        archived_at = excluded.archived_at, restorable_until = excluded.restorable_until
    RETURNING session_id, user_id, restorable_until
), events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.expired',
           jsonb_build_object('session_id', session_id, 'user_id', user_id,
                              'restorable_until', restorable_until),
           $1::timestamptz
    FROM archived
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $1::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
DELETE FROM session_coordination s
USING archived
WHERE s.session_id = archived.session_id
RETURNING s.session_id

-- name: count_expired_sessions
SELECT count(*) FROM session_coordination
WHERE expires_at < $1 AND NOT preserve AND session_state ->> 'active_process' IS NULL
  AND status <> 'completed'

-- name: archive_completed_sessions
-- Job 4: completed sessions older than the retention leave the live tables (with their
-- history) in one transaction. $1 now, $2 completed before, $3 restorable until, $4 batch.
WITH picked AS (
    SELECT session_id FROM session_coordination
    WHERE status = 'completed' AND coalesce(completed_at, created_at) < $2 AND NOT preserve
    ORDER BY completed_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
), archived AS (
    INSERT INTO session_archive (session_id, user_id, reason, session, versions, archived_at,
                                 restorable_until)
    SELECT s.session_id, s.user_id, 'completed', to_jsonb(s),
           coalesce((SELECT jsonb_agg(to_jsonb(v) ORDER BY v.version)
                     FROM session_state_versions v WHERE v.session_id = s.session_id), '[]'),
           $1::timestamptz, $3::timestamptz
    FROM session_coordination s JOIN picked USING (session_id)
    ON CONFLICT (session_id) DO UPDATE
    SET reason = excluded.reason, session = excluded.session, versions = excluded.versions,
        archived_at = excluded.archived_at, restorable_until = excluded.restorable_until
    RETURNING session_id, user_id, restorable_until
), events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.archived',
           jsonb_build_object('session_id', session_id, 'user_id', user_id,
                              'restorable_until', restorable_until),
           $1::timestamptz
    FROM archived
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $1::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
DELETE FROM session_coordination s
USING archived
WHERE s.session_id = archived.session_id
RETURNING s.session_id

-- name: count_archivable_sessions
SELECT count(*) FROM session_coordination
WHERE status = 'completed' AND coalesce(completed_at, created_at) < $1 AND NOT preserve

-- name: purge_session_archive
-- Archived sessions past their recovery window are gone for good. $1 now, $2 batch size.
-- Picked by ctid, as in delete_expired_memories: a restore racing the purge either wins
-- (the row is gone when the DELETE re-checks it) or finds nothing to restore.
DELETE FROM session_archive
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM session_archive WHERE restorable_until < $1
        ORDER BY restorable_until LIMIT $2))
  AND restorable_until < $1
RETURNING session_id

-- name: count_purgeable_session_archive
SELECT count(*) FROM session_archive WHERE restorable_until < $1

-- name: emit_event
WITH events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ($1, $2, $3)
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $3::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
SELECT event_id FROM events

-- name: lock_archived_session
SELECT * FROM session_archive WHERE session_id = $1 FOR UPDATE

-- name: restore_session_row
INSERT INTO session_coordination
SELECT * FROM jsonb_populate_record(NULL::session_coordination, $1)

-- name: restore_session_versions
INSERT INTO session_state_versions
SELECT * FROM jsonb_populate_recordset(NULL::session_state_versions, $1)

-- name: delete_archived_session
DELETE FROM session_archive WHERE session_id = $1

-- name: restart_restored_session
-- A restored session lives again: a fresh expiry, no pending warning; an expired one is
-- active again (a completed one stays completed).
UPDATE session_coordination
SET expires_at = $2, expiry_warned_at = NULL, last_activity_at = $3,
    status = CASE WHEN status = 'completed' THEN status ELSE 'active' END
WHERE session_id = $1
RETURNING session_id

-- name: session_exists
SELECT EXISTS (SELECT 1 FROM session_coordination WHERE session_id = $1)
