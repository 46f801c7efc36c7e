-- Erasure (the right to be forgotten): every copy of a user's data in every table
-- Switchboard owns is deleted or redacted, in the caller's one transaction.
--
-- A user's footprint is their id, the ids of their sessions and memories (live and
-- archived), and their memories' content. Rows that belong to the user are deleted
-- (users, sessions with their versions and decisions, archives, memories). Rows that only
-- mention a footprint id are found with jsonb_mentions_any() (sql/schema.sql):
--   idempotency_keys   a stored webhook response names the user, session or memory: deleted
--   outbox_events      payloads of session events name the session and user: deleted, and
--                      their deliveries with them (nothing about the user is sent later)
--   memory_access_log  kept as the audit trail; a query naming the footprint, or a contains
--                      filter matching one of the user's memories, is redacted
--   job_runs           a run's error or details naming the footprint is redacted
-- memory.purged events carry only job counts; subscriptions, agents and the rule tables
-- hold nothing about users.
--
-- Those four are scanned in full: no index leads from an id to the JSON that mentions it,
-- and keeping one up to date would tax every audit write (the hottest insert) for an
-- operation that is rare. idempotency_keys (24 h), outbox_events (30 days once delivered)
-- and job_runs (90 days) stay small; memory_access_log is the big one (365 days; about
-- 6 s per million rows), so these statements run under the erasure timeout, not the
-- command timeout (SWITCHBOARD_DATABASE_ERASURE_TIMEOUT).

-- name: lock_user_sessions
-- Taken before the user's row: writers that lock a session and then insert a row
-- referencing the user (a message writing memories, an archive sweep) finish first, instead
-- of deadlocking against the user lock below.
SELECT session_id FROM session_coordination WHERE user_id = $1 FOR UPDATE

-- name: lock_user
-- Until the erasure commits, nothing can add a session, memory or archive row for the
-- user (each takes a key-share lock on this row through its foreign key): the footprint
-- read next is complete.
SELECT id FROM users WHERE id = $1 FOR UPDATE

-- name: user_footprint
-- What identifies the user's data, live or archived, and the id of this erasure.
SELECT uuid_generate_v7() AS erasure_id,
       ARRAY(SELECT session_id FROM session_coordination WHERE user_id = $1
             UNION
             SELECT session_id FROM session_archive WHERE user_id = $1) AS session_ids,
       ARRAY(SELECT memory_id FROM memories WHERE user_id = $1
             UNION
             SELECT memory_id FROM memory_archive WHERE user_id = $1) AS memory_ids

-- name: redact_access_log
-- Audit rows stay (who accessed memories, when, allowed or not, how many rows), but their
-- query is replaced by the erasure's id when it names a footprint id, or when its contains
-- filter matches one of the user's memories (live or archived; so this runs before they
-- are deleted). memory_id is cleared when it points at one of the user's memories: the id
-- would outlive the memory as a handle on copies of it elsewhere (agents' and n8n's logs).
-- $1 user, $2 footprint ids, $3 erasure id.
UPDATE memory_access_log l
SET query = jsonb_build_object('redacted_by_erasure', $3::uuid),
    memory_id = CASE WHEN l.memory_id = ANY ($2::uuid[]) THEN NULL ELSE l.memory_id END
WHERE l.memory_id = ANY ($2::uuid[])
   OR jsonb_mentions_any(l.query, $2::uuid[])
   OR (l.query ? 'contains'
       AND EXISTS (SELECT 1
                   FROM (SELECT content FROM memories WHERE user_id = $1
                         UNION ALL
                         SELECT content FROM memory_archive WHERE user_id = $1) AS mine
                   WHERE mine.content @> jsonb_or_null(l.query ->> 'contains')))

-- name: delete_idempotency_keys
-- A stored response naming the footprint would be replayed after the erasure; without
-- it a repeat of the request runs as a new one. The caller's key is searched too. $1 ids.
WITH gone AS (
    DELETE FROM idempotency_keys k
    WHERE jsonb_mentions_any(jsonb_build_array(k.key, k.response_body), $1::uuid[])
    RETURNING 1
)
SELECT count(*) FROM gone

-- name: delete_events
-- Events about the user go with their deliveries (ON DELETE CASCADE), so a pending or
-- redelivered one cannot send the payload later. The count of deliveries reads the
-- snapshot from before the delete. $1 ids.
WITH gone AS (
    DELETE FROM outbox_events e
    WHERE jsonb_mentions_any(e.payload, $1::uuid[])
    RETURNING e.event_id
)
SELECT (SELECT count(*) FROM gone) AS events,
       (SELECT count(*) FROM event_deliveries d JOIN gone USING (event_id)) AS deliveries

-- name: redact_job_runs
-- A failed run's error text can quote a row it choked on. $1 ids, $2 erasure id.
UPDATE job_runs j
SET error = CASE WHEN jsonb_mentions_any(to_jsonb(j.error), $1::uuid[])
                 THEN 'redacted by erasure ' || $2::uuid ELSE j.error END,
    details = CASE WHEN jsonb_mentions_any(j.details, $1::uuid[])
                   THEN jsonb_build_object('redacted_by_erasure', $2::uuid) ELSE j.details END
WHERE jsonb_mentions_any(to_jsonb(j.error), $1::uuid[])
   OR jsonb_mentions_any(j.details, $1::uuid[])

-- name: delete_user_memories
WITH live AS (
    DELETE FROM memories WHERE user_id = $1 RETURNING 1
), archived AS (
    DELETE FROM memory_archive WHERE user_id = $1 RETURNING 1
)
SELECT (SELECT count(*) FROM live) AS memories, (SELECT count(*) FROM archived) AS memory_archive

-- name: delete_user
-- The user with their sessions, each session's history, decisions and branches (with
-- their versions), and their archived sessions; their agent tasks (those of their
-- sessions, and those for the user without a session) with the tasks' transitions and
-- dead letters. The children are deleted by name, not left to ON DELETE CASCADE, so each
-- table's count is what this statement removed.
WITH user_tasks AS (
    SELECT t.task_id FROM agent_tasks t
    WHERE t.user_id = $1::uuid::text
       OR t.session_id IN (SELECT session_id FROM session_coordination WHERE user_id = $1)
), letters AS (
    DELETE FROM dead_letters d USING user_tasks u WHERE d.task_id = u.task_id RETURNING 1
), transitions AS (
    DELETE FROM agent_task_transitions x USING user_tasks u WHERE x.task_id = u.task_id
    RETURNING 1
), tasks AS (
    DELETE FROM agent_tasks t USING user_tasks u WHERE t.task_id = u.task_id RETURNING 1
), decisions AS (
    DELETE FROM coordination_decisions d
    USING session_coordination s
    WHERE s.session_id = d.session_id AND s.user_id = $1
    RETURNING 1
), versions AS (
    DELETE FROM session_state_versions v
    USING session_coordination s
    WHERE s.session_id = v.session_id AND s.user_id = $1
    RETURNING 1
), branch_versions AS (
    DELETE FROM session_branch_versions v
    USING session_coordination s
    WHERE s.session_id = v.session_id AND s.user_id = $1
    RETURNING 1
), branches AS (
    DELETE FROM session_branches b
    USING session_coordination s
    WHERE s.session_id = b.session_id AND s.user_id = $1
    RETURNING 1
), sessions AS (
    DELETE FROM session_coordination WHERE user_id = $1 RETURNING 1
), archived AS (
    DELETE FROM session_archive WHERE user_id = $1 RETURNING 1
), gone AS (
    DELETE FROM users WHERE id = $1 RETURNING 1
)
SELECT (SELECT count(*) FROM gone) AS users,
       (SELECT count(*) FROM sessions) AS session_coordination,
       (SELECT count(*) FROM versions) AS session_state_versions,
       (SELECT count(*) FROM decisions) AS coordination_decisions,
       (SELECT count(*) FROM branches) AS session_branches,
       (SELECT count(*) FROM branch_versions) AS session_branch_versions,
       (SELECT count(*) FROM archived) AS session_archive,
       (SELECT count(*) FROM tasks) AS agent_tasks,
       (SELECT count(*) FROM transitions) AS agent_task_transitions,
       (SELECT count(*) FROM letters) AS dead_letters

-- name: record_erasure
-- The erasure record and its row in the memory audit trail. $1 erasure id, $2 user,
-- $3 scope, $4 who, $5 when, $6 counts, $7 acting principal, $8 audited query, $9 memories.
WITH recorded AS (
    INSERT INTO user_erasures (erasure_id, user_id_sha256, scope, erased_by, erased_at, counts)
    VALUES ($1, sha256(convert_to($2::uuid::text, 'UTF8')), $3, $4, $5, $6)
    RETURNING erasure_id
)
INSERT INTO memory_access_log (agent_name, acting_principal, action, memory_id, query, allowed,
                               rows, at)
SELECT $4, $7, 'erase', NULL, $8, true, $9, $5::timestamptz
FROM recorded
