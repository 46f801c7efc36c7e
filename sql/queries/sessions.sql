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
-- $16 merge base, $17 merged branch, $18 merged branch version: NULL unless the write was
-- merged (an auto-merged write, a branch merge).
-- $19 an event type and $20 its payload, or NULL: the event (a task's end,
-- app/coordination/completion.py) is written with the version it describes, its payload
-- given the session_version and decision_id written here.
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
    SELECT v.* FROM updated u, session_version(u, $13, $14, $12, $16, $17, $18) v
), decided AS (
    INSERT INTO coordination_decisions (
        session_id, session_version, message, context_flags, classifier, intents,
        primary_intent, chosen_agent, routed_by, breaker_state, outcome, fallback, degraded,
        attempts, error, response, execution_time_ms, created_by, created_at, trace_id,
        task_id, next_step
    )
    SELECT u.session_id, u.version, d.message, d.context_flags, d.classifier, d.intents,
           d.primary_intent, d.chosen_agent, d.routed_by, d.breaker_state, d.outcome,
           d.fallback, d.degraded, d.attempts, d.error, d.response, d.execution_time_ms,
           d.created_by, u.updated_at, d.trace_id, d.task_id, d.next_step
    FROM updated u, jsonb_populate_record(NULL::coordination_decisions, $15::jsonb) d
    WHERE $15::jsonb IS NOT NULL
    RETURNING decision_id
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT $19::text,
           $20::jsonb || jsonb_build_object('session_version', u.version,
                                            'decision_id', (SELECT decision_id FROM decided)),
           u.updated_at
    FROM updated u
    WHERE $19::text IS NOT NULL
)
SELECT updated.*, (SELECT decision_id FROM decided) AS decision_id FROM updated

-- name: touch_session
-- Heartbeat: records activity, wakes an idle session, and keeps a session running a process
-- alive for at least the extension period. Not a content change: no new version. A
-- completed session is left alone (no row back).
UPDATE session_coordination s
SET last_activity_at = $2,
    status = CASE WHEN s.status = 'idle' THEN 'active' ELSE s.status END,
    expires_at = CASE
        WHEN session_running(s) THEN greatest(s.expires_at, $2::timestamptz + $3::interval)
        ELSE s.expires_at
    END,
    expiry_warned_at = CASE WHEN session_running(s) THEN NULL ELSE s.expiry_warned_at END
WHERE s.session_id = $1 AND session_open(s)
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
-- can be restored for the recovery window. Which rows a sweep takes is one predicate in
-- schema.sql (session_goes_idle, session_expired, ...), called by its batch and by its
-- dry-run count. Every batch locks its rows with FOR UPDATE SKIP LOCKED, so a sweep never
-- waits for (or blocks) an API writer holding one of them; that row is taken next time.

-- name: idle_inactive_sessions
-- Active sessions quiet for too long become idle. $1 inactive before, $2 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination s
    WHERE session_goes_idle(s, $1)
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
SELECT count(*) FROM session_coordination s WHERE session_goes_idle(s, $1)

-- name: extend_running_sessions
-- Sessions whose process moved in the last window live on: expiry = now + extension, as a
-- heartbeat (touch_session) keeps them. Not a content change, so no new version (see
-- docs/design.md, "Sessions"). Only sessions whose expiry is nearer than half the extension
-- are touched, so a busy session is written every couple of hours, not every run.
-- $1 moved since, $2 new expiry, $3 extend if expiring before, $4 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination s
    WHERE session_extendable(s, $1, $3)
    ORDER BY expires_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE session_coordination s
SET expires_at = $2, expiry_warned_at = NULL
FROM picked
WHERE s.session_id = picked.session_id
RETURNING s.session_id

-- name: count_extendable_sessions
SELECT count(*) FROM session_coordination s WHERE session_extendable(s, $1, $2)

-- name: warn_expiring_sessions
-- Sessions that will expire within the warning window, told once (session.expiring).
-- $1 now, $2 window end, $3 batch size.
WITH picked AS (
    SELECT session_id FROM session_coordination s
    WHERE session_expiring(s, $1, $2)
    ORDER BY expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED
), warned AS (
    UPDATE session_coordination s
    SET expiry_warned_at = $1
    FROM picked
    WHERE s.session_id = picked.session_id
    RETURNING s.session_id, s.user_id, s.session_type, s.expires_at
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.expiring',
           jsonb_build_object('session_id', session_id, 'user_id', user_id,
                              'session_type', session_type, 'expires_at', expires_at),
           $1::timestamptz
    FROM warned
)
SELECT session_id FROM warned

-- name: count_expiring_sessions
SELECT count(*) FROM session_coordination s WHERE session_expiring(s, $1, $2)

-- name: archive_expired_sessions
-- Expired sessions leave the live tables for the archive, restorable for the recovery
-- window (session_archive_move: the row, its history and session.expired in one
-- statement). Picked oldest expiry first through the expiry index, locked, and handed over
-- by row address (no second lookup by id); archival picks its own way (below). $1 now,
-- $2 restorable until, $3 batch size.
SELECT session_archive_move(ARRAY(
    SELECT ctid FROM session_coordination s
    WHERE session_expired(s, $1)
    ORDER BY expires_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED), 'expired', $1, $2)

-- name: count_expired_sessions
SELECT count(*) FROM session_coordination s WHERE session_expired(s, $1)

-- name: archive_completed_sessions
-- Sessions completed longer ago than the retention leave for the archive with their
-- history (session.archived). $1 now, $2 completed before, $3 restorable until, $4 batch.
SELECT session_archive_move(ARRAY(
    SELECT ctid FROM session_coordination s
    WHERE session_archivable(s, $2)
    ORDER BY completed_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED), 'completed', $1, $3)

-- name: count_archivable_sessions
SELECT count(*) FROM session_coordination s WHERE session_archivable(s, $1)

-- name: purge_session_archive
-- Archived sessions past their recovery window are gone for good. $1 now, $2 batch size.
-- Picked by ctid without locking first (locking writes every row once more): a restore
-- racing the purge either wins (the row is gone, or has a new ctid, when the DELETE
-- re-checks it) or finds nothing to restore.
DELETE FROM session_archive a
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM session_archive x WHERE session_archive_lapsed(x, $1)
        ORDER BY restorable_until LIMIT $2))
  AND session_archive_lapsed(a, $1)
RETURNING session_id

-- name: count_purgeable_session_archive
SELECT count(*) FROM session_archive a WHERE session_archive_lapsed(a, $1)

-- name: lock_restorable_session
-- An archived session that may still be restored at $2, row-locked for the restore.
SELECT * FROM session_archive a
WHERE a.session_id = $1 AND NOT session_archive_lapsed(a, $2)
FOR UPDATE

-- name: restore_session_row
INSERT INTO session_coordination
SELECT * FROM jsonb_populate_record(NULL::session_coordination, $1)

-- name: restore_session_versions
INSERT INTO session_state_versions
SELECT * FROM jsonb_populate_recordset(NULL::session_state_versions, $1)

-- name: delete_archived_session
DELETE FROM session_archive WHERE session_id = $1

-- name: restart_restored_session
-- A restored session lives again: a fresh expiry, no pending warning; one archived on
-- expiry is active again (a completed one stays completed). Subscribers are told (session.restored,
-- with why it had been archived: $4). $2 expires at, $3 now.
WITH restarted AS (
    UPDATE session_coordination s
    SET expires_at = $2, expiry_warned_at = NULL, last_activity_at = $3,
        status = CASE WHEN session_open(s) THEN 'active' ELSE s.status END
    WHERE s.session_id = $1
    RETURNING s.session_id, s.user_id
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.restored',
           jsonb_build_object('session_id', session_id, 'user_id', user_id, 'reason', $4::text),
           $3::timestamptz
    FROM restarted
)
SELECT session_id FROM restarted

-- name: session_exists
SELECT EXISTS (SELECT 1 FROM session_coordination WHERE session_id = $1)
