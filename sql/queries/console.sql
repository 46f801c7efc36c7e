-- The operator console's reads (app/console/repository.py): counts for the overview and the
-- cross-user session search. Every change the console makes goes through the services.

-- name: sessions_by_status
SELECT status, count(*) AS n FROM session_coordination GROUP BY status ORDER BY status

-- name: archived_session_count
SELECT count(*) FROM session_archive

-- name: tasks_by_status
SELECT status, count(*) AS n FROM agent_tasks GROUP BY status ORDER BY status

-- name: open_dead_letter_count
SELECT count(*) FROM dead_letters WHERE requeued_at IS NULL AND discarded_at IS NULL

-- name: undelivered_by_status
-- Deliveries not yet made (pending, retrying) and given up (dead).
SELECT status, count(*) AS n FROM event_deliveries
WHERE status <> 'delivered' GROUP BY status ORDER BY status

-- name: search_sessions
-- Keyset page, newest first. Each filter is skipped when NULL: $1 a user's id or external
-- reference, $2 status, $3 current agent, $4..$5 created in [from, until).
SELECT s.session_id, s.user_id, u.external_ref, s.session_type, s.status, s.priority,
       s.current_agent, s.version, s.preserve, s.created_at, s.updated_at, s.expires_at
FROM session_coordination s JOIN users u ON u.id = s.user_id
WHERE ($1::text IS NULL OR u.external_ref = $1 OR u.id::text = $1)
  AND ($2::text IS NULL OR s.status = $2)
  AND ($3::text IS NULL OR s.current_agent = $3)
  AND ($4::timestamptz IS NULL OR s.created_at >= $4)
  AND ($5::timestamptz IS NULL OR s.created_at < $5)
  AND (s.created_at, s.session_id) < ($6, $7)
ORDER BY s.created_at DESC, s.session_id DESC
LIMIT $8

-- name: list_archived_sessions
-- Keyset page, newest first, of sessions archived and still restorable or not.
SELECT a.session_id, a.user_id, u.external_ref, a.reason, a.archived_at, a.restorable_until
FROM session_archive a JOIN users u ON u.id = a.user_id
WHERE (a.archived_at, a.session_id) < ($1, $2)
ORDER BY a.archived_at DESC, a.session_id DESC
LIMIT $3

-- name: agent_task_stats_since
-- Per agent, the tasks created since the uuid7 bound $1 (task ids are uuid7: time-ordered,
-- so the primary key finds them): how many, how many failed, and the p50 and p95 run time
-- of those that finished.
SELECT agent_name,
       count(*) AS tasks,
       count(*) FILTER (WHERE status = 'failed') AS failed,
       (percentile_cont(0.5) WITHIN GROUP (
           ORDER BY extract(epoch FROM finished_at - started_at)) * 1000)::bigint AS p50_ms,
       (percentile_cont(0.95) WITHIN GROUP (
           ORDER BY extract(epoch FROM finished_at - started_at)) * 1000)::bigint AS p95_ms
FROM agent_tasks
WHERE task_id >= $1
GROUP BY agent_name

-- name: list_tasks
-- Keyset page, newest first; each filter is skipped when NULL: $1 status, $2 agent.
SELECT task_id, session_id, agent_name, kind, status, attempt, max_attempts, created_by,
       created_at, finished_at, last_error, trace_id
FROM agent_tasks
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::text IS NULL OR agent_name = $2)
  AND (created_at, task_id) < ($3, $4)
ORDER BY created_at DESC, task_id DESC
LIMIT $5

-- name: activity_series
-- The overview's charts: per bucket of $3 from $1 (inclusive) to $2 (exclusive), every
-- bucket present (generate_series; date_bin with origin $1 puts each row in its bucket):
-- coordination decisions and the fallbacks among them, breaker trips (breaker.changed
-- events to open) and tasks finished completed or failed.
WITH buckets AS (
    SELECT generate_series($1::timestamptz, $2::timestamptz - $3::interval, $3::interval)
        AS bucket
), decided AS (
    SELECT date_bin($3::interval, created_at, $1::timestamptz) AS bucket,
           count(*) AS decisions,
           count(*) FILTER (WHERE outcome = 'fallback') AS fallbacks
    FROM coordination_decisions
    WHERE created_at >= $1 AND created_at < $2
    GROUP BY 1
), tripped AS (
    SELECT date_bin($3::interval, created_at, $1::timestamptz) AS bucket, count(*) AS trips
    FROM outbox_events
    WHERE event_type = 'breaker.changed' AND payload ->> 'state' = 'open'
      AND created_at >= $1 AND created_at < $2
    GROUP BY 1
), finished AS (
    SELECT date_bin($3::interval, finished_at, $1::timestamptz) AS bucket,
           count(*) FILTER (WHERE status = 'completed') AS completed,
           count(*) FILTER (WHERE status = 'failed') AS failed
    FROM agent_tasks
    WHERE status IN ('completed', 'failed') AND finished_at >= $1 AND finished_at < $2
    GROUP BY 1
)
SELECT b.bucket,
       coalesce(d.decisions, 0) AS decisions,
       coalesce(d.fallbacks, 0) AS fallbacks,
       coalesce(t.trips, 0) AS trips,
       coalesce(f.completed, 0) AS completed,
       coalesce(f.failed, 0) AS failed
FROM buckets b
LEFT JOIN decided d ON d.bucket = b.bucket
LEFT JOIN tripped t ON t.bucket = b.bucket
LEFT JOIN finished f ON f.bucket = b.bucket
ORDER BY b.bucket
