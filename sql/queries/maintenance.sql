-- Scheduled maintenance: claims, the six jobs (each a bounded batch), archive and outbox.
-- Every batch statement locks its rows with FOR UPDATE SKIP LOCKED, so a sweep never waits
-- for (or blocks) an API writer holding one of them; that row is simply taken next time.

-- name: claim_run
-- Claim a job's slot. A second claimer gets no row, unless the first claim is still
-- 'running' past its lease (its process died): then the slot is taken over.
INSERT INTO job_runs (job_name, slot_start, trigger, dry_run, status, claimed_by, started_at,
                      lease_expires_at)
VALUES ($1, $2, $3, $4, 'running', $5, $6, $7)
ON CONFLICT (job_name, slot_start) DO UPDATE
SET claimed_by = excluded.claimed_by,
    started_at = excluded.started_at,
    lease_expires_at = excluded.lease_expires_at,
    attempts = job_runs.attempts + 1,
    error = NULL
WHERE job_runs.status = 'running' AND job_runs.lease_expires_at < excluded.started_at
RETURNING run_id, attempts

-- name: record_progress
-- In the same transaction as a batch: what it did, and a longer lease.
UPDATE job_runs
SET rows_affected = rows_affected + $2,
    details = $3,
    lease_expires_at = $4
WHERE run_id = $1 AND claimed_by = $5

-- name: finish_run
UPDATE job_runs
SET status = $2, finished_at = $3, error = $4, details = $5
WHERE run_id = $1 AND claimed_by = $6
RETURNING *

-- name: get_run
SELECT * FROM job_runs WHERE run_id = $1

-- name: list_runs
SELECT * FROM job_runs
WHERE job_name = $1 AND (started_at, run_id) < ($2, $3)
ORDER BY started_at DESC, run_id DESC
LIMIT $4

-- name: last_runs
SELECT DISTINCT ON (job_name) * FROM job_runs
ORDER BY job_name, started_at DESC, run_id DESC

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

-- name: delete_expired_memories
-- Job 5a: memories past their expiry go (interaction patterns are archived instead, 5b).
-- Batches walk the expiry index in order. Each finds the expiry $2 rows further on, deletes
-- everything up to and including that instant (so a batch is short only when the sweep is
-- done; rows sharing that instant all go in this batch) and returns how many it took and
-- the instant it reached; the next batch starts after it ($3, NULL for the first), so no
-- batch steps over rows that earlier ones deleted. No rows are locked first: a row updated
-- meanwhile is re-checked by the DELETE against its new expiry. $1 now, $2 batch size.
-- Each user whose memories went is told in this same statement, so the notice commits or
-- rolls back with the deletion: one memory.purged event per user and batch, with the
-- counts per category (a notifier wants one notice per user, not job totals). A batch can
-- touch 20,000 users, so these events are written only while someone subscribes to them
-- (an event without a subscriber has no delivery and is never listed or sent anyway).
WITH reach AS (
    SELECT coalesce(
        (SELECT expires_at FROM memories
         WHERE expires_at < $1 AND expires_at > coalesce($3::timestamptz, '-infinity')
           AND category <> 'interaction_patterns'
         ORDER BY expires_at
         OFFSET $2 - 1 LIMIT 1),
        $1) AS upto
), gone AS (
    DELETE FROM memories
    WHERE expires_at <= (SELECT upto FROM reach)
      AND expires_at > coalesce($3::timestamptz, '-infinity')
      AND expires_at < $1 AND category <> 'interaction_patterns'
    RETURNING user_id, category
), per_category AS (
    SELECT user_id, category, count(*) AS n FROM gone GROUP BY user_id, category
), events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'memory.purged',
           jsonb_build_object('user_id', user_id, 'action', 'deleted', 'count', sum(n),
                              'categories', jsonb_object_agg(category, n)),
           $1::timestamptz
    FROM per_category
    WHERE EXISTS (SELECT 1 FROM subscriptions
                  WHERE disabled_at IS NULL AND 'memory.purged' = ANY (event_types))
    GROUP BY user_id
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $1::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
SELECT (SELECT count(*) FROM gone) AS taken, (SELECT upto FROM reach) AS reached

-- name: count_expired_memories
SELECT count(*) FROM memories WHERE expires_at < $1 AND category <> 'interaction_patterns'

-- name: archive_interaction_patterns
-- Job 5b: interaction patterns past their retention move to memory_archive; each user
-- whose patterns moved is told (memory.purged, action 'archived'). $1 now, $2 batch size.
WITH picked AS (
    SELECT memory_id FROM memories
    WHERE expires_at < $1 AND category = 'interaction_patterns'
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM memories m USING picked WHERE m.memory_id = picked.memory_id
    RETURNING m.*
), archived AS (
    INSERT INTO memory_archive (memory_id, user_id, session_id, agent_name, memory_type,
                                category, key, content, content_size, access_level, version,
                                created_at, updated_at, expires_at, archived_at)
    SELECT memory_id, user_id, session_id, agent_name, memory_type, category, key, content,
           content_size, access_level, version, created_at, updated_at, expires_at,
           $1::timestamptz
    FROM moved
    ON CONFLICT (memory_id) DO NOTHING
    RETURNING memory_id, user_id, category
), per_category AS (
    SELECT user_id, category, count(*) AS n FROM archived GROUP BY user_id, category
), events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'memory.purged',
           jsonb_build_object('user_id', user_id, 'action', 'archived', 'count', sum(n),
                              'categories', jsonb_object_agg(category, n)),
           $1::timestamptz
    FROM per_category
    WHERE EXISTS (SELECT 1 FROM subscriptions
                  WHERE disabled_at IS NULL AND 'memory.purged' = ANY (event_types))
    GROUP BY user_id
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $1::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
SELECT memory_id FROM archived

-- name: count_archivable_patterns
SELECT count(*) FROM memories WHERE expires_at < $1 AND category = 'interaction_patterns'

-- name: purge_memory_archive
-- Job 5c: archived memories older than the archive retention are purged (picked by ctid,
-- as in delete_expired_memories); each user whose archive shrank is told (memory.purged,
-- action 'archive_purged'). $1 archived before, $2 now, $3 batch size.
WITH gone AS (
    DELETE FROM memory_archive
    WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM memory_archive WHERE archived_at < $1
            ORDER BY archived_at LIMIT $3))
      AND archived_at < $1
    RETURNING memory_id, user_id, category
), per_category AS (
    SELECT user_id, category, count(*) AS n FROM gone GROUP BY user_id, category
), events AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'memory.purged',
           jsonb_build_object('user_id', user_id, 'action', 'archive_purged', 'count', sum(n),
                              'categories', jsonb_object_agg(category, n)),
           $2::timestamptz
    FROM per_category
    WHERE EXISTS (SELECT 1 FROM subscriptions
                  WHERE disabled_at IS NULL AND 'memory.purged' = ANY (event_types))
    GROUP BY user_id
    RETURNING event_id, event_type
), deliveries AS (
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, $2::timestamptz
    FROM events e JOIN subscriptions sub
      ON sub.disabled_at IS NULL AND e.event_type = ANY (sub.event_types)
)
SELECT memory_id FROM gone

-- name: count_purgeable_memory_archive
SELECT count(*) FROM memory_archive WHERE archived_at < $1

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

-- name: claim_due_deliveries
-- Take due deliveries (each exactly once across replicas) and mark them in flight.
-- $1 now, $2 batch size, $3 in flight until.
WITH due AS (
    SELECT event_id, subscription_id FROM event_deliveries
    WHERE status = 'pending' AND next_attempt_at <= $1
    ORDER BY next_attempt_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE event_deliveries d
SET next_attempt_at = $3, attempts = d.attempts + 1
FROM due, outbox_events e, subscriptions s
WHERE d.event_id = due.event_id AND d.subscription_id = due.subscription_id
  AND e.event_id = d.event_id AND s.subscription_id = d.subscription_id
RETURNING d.event_id, d.subscription_id, d.attempts, e.event_type, e.payload, e.created_at,
          s.url, s.secret

-- name: mark_delivered
UPDATE event_deliveries
SET status = 'delivered', delivered_at = $3, last_error = NULL
WHERE event_id = $1 AND subscription_id = $2

-- name: mark_delivery_failed
-- $3 error, $4 next attempt at, $5 dead (no more attempts).
UPDATE event_deliveries
SET last_error = $3, next_attempt_at = $4,
    status = CASE WHEN $5::boolean THEN 'dead' ELSE 'pending' END
WHERE event_id = $1 AND subscription_id = $2

-- name: insert_subscription
INSERT INTO subscriptions (url, event_types, secret, created_at)
VALUES ($1, $2, $3, $4)
RETURNING subscription_id, url, event_types, created_at, disabled_at

-- name: list_subscriptions
SELECT subscription_id, url, event_types, created_at, disabled_at
FROM subscriptions ORDER BY created_at

-- name: delete_subscription
DELETE FROM subscriptions WHERE subscription_id = $1 RETURNING subscription_id

-- name: list_deliveries
-- Events with their delivery state, newest first; $1 status filter (NULL: all). A row is
-- one delivery (an event has one per subscriber), so the keyset that pages through them
-- is (created_at, event_id, subscription_id): unique, and ordered the same way throughout.
SELECT e.event_id, e.event_type, e.payload, e.created_at, d.subscription_id, d.status,
       d.attempts, d.last_error, d.delivered_at, d.next_attempt_at, e.trace_id
FROM outbox_events e
JOIN event_deliveries d ON d.event_id = e.event_id
WHERE ($1::text IS NULL OR d.status = $1)
  AND (e.created_at, e.event_id, d.subscription_id) < ($2, $3, $4)
ORDER BY e.created_at DESC, e.event_id DESC, d.subscription_id DESC
LIMIT $5

-- name: redeliver_event
UPDATE event_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = $2, last_error = NULL
WHERE event_id = $1
RETURNING subscription_id

-- name: purge_idempotency_keys
-- Stored webhook responses older than their 24 hours.
WITH picked AS (
    SELECT principal, key FROM idempotency_keys WHERE expires_at < $1
    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys k USING picked
WHERE k.principal = picked.principal AND k.key = picked.key
RETURNING k.key

-- name: count_purgeable_idempotency_keys
SELECT count(*) FROM idempotency_keys WHERE expires_at < $1

-- name: purge_access_log
-- Job 7 (housekeeping): the memory access audit trail older than its retention, picked by
-- ctid like the other purges. $1 cut-off, $2 batch size.
DELETE FROM memory_access_log
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM memory_access_log WHERE at < $1 ORDER BY at LIMIT $2))
  AND at < $1
RETURNING log_id

-- name: count_purgeable_access_log
SELECT count(*) FROM memory_access_log WHERE at < $1

-- name: purge_events
-- Job 7: events older than their retention whose deliveries are all over (delivered or
-- dead), with those deliveries (ON DELETE CASCADE). An event still being retried stays.
-- Deliveries are created with their event, so an old event never gains a pending one.
DELETE FROM outbox_events
WHERE ctid = ANY(ARRAY(
        SELECT e.ctid FROM outbox_events e
        WHERE e.created_at < $1
          AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                          WHERE d.event_id = e.event_id AND d.status = 'pending')
        ORDER BY e.created_at LIMIT $2))
  AND created_at < $1
RETURNING event_id

-- name: count_purgeable_events
SELECT count(*) FROM outbox_events e
WHERE e.created_at < $1
  AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                  WHERE d.event_id = e.event_id AND d.status = 'pending')

-- name: purge_job_runs
-- Job 7: finished runs older than their retention (their slots are long past, so no
-- replica will try to claim them again). A running claim is never removed.
DELETE FROM job_runs
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM job_runs WHERE status <> 'running' AND started_at < $1
        ORDER BY started_at LIMIT $2))
  AND status <> 'running' AND started_at < $1
RETURNING run_id

-- name: count_purgeable_job_runs
SELECT count(*) FROM job_runs WHERE status <> 'running' AND started_at < $1
