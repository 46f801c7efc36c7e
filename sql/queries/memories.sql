-- Memories: facts agents share about a user and a session.
--
-- Access is enforced here, in every statement that reads, changes or deletes a memory: a
-- row is there for a caller when it is live (not expired: expired memories are invisible
-- even before the retention job runs) and its owner (the agent that wrote it) is the
-- caller or its access level is one the caller may read. Each such statement says
--     memory_readable(m, <now>, <caller>, ARRAY(SELECT memory_readable_levels(<is_admin>, <roles>)))
-- (SQL functions in schema.sql: the planner inlines memory_readable into a plain
-- condition, and the ARRAY is computed once per statement).
-- Writing needs no level: any agent may write at any level, so results can flow up to a
-- coordinator that reads what the writer may not (an agent output, say).

-- name: write_reference
-- Everything a write is checked against, in one round trip (memory_write_reference in
-- schema.sql): memory type -> default category, category -> default level, all levels,
-- which of the named users exist and who owns each named session. $1 user ids, $2
-- session ids.
SELECT * FROM memory_write_reference($1::uuid[], $2::uuid[])

-- name: list_access_levels
SELECT level, required_role, description FROM memory_access_levels ORDER BY level

-- name: list_categories
SELECT name, retention, default_access_level, description, created_at, updated_at
FROM memory_categories
ORDER BY name

-- name: get_category
SELECT name, retention, default_access_level, description, created_at, updated_at
FROM memory_categories
WHERE name = $1

-- name: upsert_category
INSERT INTO memory_categories (name, retention, default_access_level, description, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $5)
ON CONFLICT (name) DO UPDATE
SET retention = excluded.retention,
    default_access_level = excluded.default_access_level,
    description = excluded.description,
    updated_at = excluded.updated_at
RETURNING name, retention, default_access_level, description, created_at, updated_at,
          (xmax = 0) AS inserted

-- name: reapply_category_retention
-- Expiry counts from each memory's last write, as it did when the memory was written.
UPDATE memories m
SET expires_at = m.updated_at + c.retention
FROM memory_categories c
WHERE c.name = $1 AND m.category = c.name
  AND m.expires_at IS DISTINCT FROM m.updated_at + c.retention

-- name: list_memory_types
SELECT name, default_category, description, created_at FROM memory_types ORDER BY name

-- name: insert_memory_type
INSERT INTO memory_types (name, default_category, description, created_at)
VALUES ($1, $2, $3, $4)
ON CONFLICT (name) DO NOTHING
RETURNING name, default_category, description, created_at

-- name: insert_memory
-- The memory and its "write" audit row in one statement: atomic without a transaction.
-- No row back: the key is taken, and nothing is logged. $3 the writer (the owner),
-- $11 acting principal.
WITH stored AS (
    INSERT INTO memories (
        user_id, session_id, agent_name, memory_type, category, key, content, content_size,
        access_level, created_at, updated_at, expires_at
    )
    SELECT $1, $2, $3, $4, c.name, $6, $7, $8, $9, $10, $10, $10::timestamptz + c.retention
    FROM memory_categories c
    WHERE c.name = $5
    ON CONFLICT (user_id, category, key) DO NOTHING
    RETURNING *
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $3, $11, 'write', memory_id, NULL, true, 1, $10::timestamptz FROM stored
)
SELECT * FROM stored

-- name: insert_checked_memory
-- One memory written with its checks, in one statement (one round trip, atomic without a
-- transaction): the reference data write_reference reads (memory_write_reference in
-- schema.sql), and the INSERT with its audit row (as insert_memory) only if the memory
-- passes every check the service makes with them (app/memories/service.py, _plan_one),
-- memory_write_category in schema.sql: a known memory type; its category, else the type's
-- default, else session_data, a known category; a known access level, else the category's
-- default; a known user; a session of that user, if one is named. The reference data come
-- back either way: with no memory written, the service explains the refusal from them (or,
-- if they pass, the key is taken). $1 user, $2 session or NULL, $3 the writer (the owner),
-- $4 type, $5 category or NULL, $6 key, $7 content, $8 content size, $9 access level or
-- NULL, $10 now, $11 acting principal.
WITH ref AS MATERIALIZED (
    SELECT * FROM memory_write_reference(ARRAY[$1::uuid], ARRAY[$2::uuid])
), stored AS (
    INSERT INTO memories (
        user_id, session_id, agent_name, memory_type, category, key, content, content_size,
        access_level, created_at, updated_at, expires_at
    )
    SELECT $1, $2, $3, $4, c.name, $6, $7, $8, coalesce($9, c.default_access_level),
           $10, $10, $10::timestamptz + c.retention
    FROM ref r,
         memory_write_category(r.types, r.levels, r.users, r.session_owners,
                               $1::uuid, $2::uuid, $4::text, $5::text, $9::text) c
    ON CONFLICT (user_id, category, key) DO NOTHING
    RETURNING *
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $3, $11, 'write', memory_id, NULL, true, 1, $10::timestamptz FROM stored
)
SELECT r.types AS ref_types, r.categories AS ref_categories, r.levels AS ref_levels,
       r.users AS ref_users, r.session_owners AS ref_session_owners, s.*
FROM ref r LEFT JOIN stored s ON true

-- name: insert_checked_memory_claiming_key
-- The n8n memory webhook's write of a new memory without a key, under an Idempotency-Key,
-- in one statement (one round trip, atomic without a transaction): the key claimed; then,
-- only if it was claimed and the memory passes insert_checked_memory's checks (the same
-- reference data and checks: memory_write_reference and memory_write_category in
-- schema.sql), the memory inserted with its audit row and the key completed with the
-- webhook's answer, all in one commit.
-- Its own statement, not insert_checked_memory's plan: the claim gates the insert, and the
-- answer stored with the claim is built from the planned row (a sibling statement of a
-- WITH cannot see, or change, another's rows), so the insert takes every value from the
-- plan. Without a key a memory never conflicts on (user_id, category, key): the checks
-- passed, the insert is made. The answer is the API's JSON of the memory (app/webhooks/
-- service.py, _written): every column, the times as msgspec writes them ("Z", the
-- microseconds only when there are some); test_webhooks.py holds it to GET's answer.
-- The claim is claim_idempotency_key's (sql/queries/webhooks.sql), the same conflict
-- rule, idempotency_key_claimable() (schema.sql): a key never seen, expired, or held for
-- this same request by a holder that is gone.
-- A live holder's uncommitted claim (another such statement) makes this one wait on the
-- key's index entry until it ends, then see what it committed. No claim: no token back.
-- Claimed but nothing written (the checks refused): the key is left in progress under the
-- token, without an answer; the caller then writes (or refuses) as it would have.
-- $1 user, $2 session or NULL, $3 the writer, $4 type, $5 category or NULL, $6 content,
-- $7 content size, $8 access level or NULL, $9 now, $10 acting principal; the claim:
-- $11 principal, $12 key, $13 endpoint, $14 request hash, $15 now, $16 the key's expiry,
-- $17 lease owner, $18 lease expiry, $19 renewed before (as claim_idempotency_key's $9).
WITH ref AS MATERIALIZED (
    SELECT * FROM memory_write_reference(ARRAY[$1::uuid], ARRAY[$2::uuid])
), planned AS MATERIALIZED (
    -- The memories row to insert, column for column.
    SELECT uuid_generate_v7() AS memory_id, $1::uuid AS user_id, $2::uuid AS session_id,
           $3::text AS agent_name, $4::text AS memory_type, c.name AS category,
           NULL::text AS key, $6::jsonb AS content, $7::integer AS content_size,
           coalesce($8::text, c.default_access_level) AS access_level, 1::bigint AS version,
           $9::timestamptz AS created_at, $9::timestamptz AS updated_at,
           $9::timestamptz + c.retention AS expires_at
    FROM ref r,
         memory_write_category(r.types, r.levels, r.users, r.session_owners,
                               $1::uuid, $2::uuid, $4::text, $5::text, $8::text) c
), answer AS (
    SELECT jsonb_build_object(
        'action', 'write',
        'created', true,
        'memory', to_jsonb(p) || (
            SELECT jsonb_object_agg(
                t.name,
                to_char(t.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                    || CASE WHEN to_char(t.at AT TIME ZONE 'UTC', 'US') = '000000' THEN ''
                            ELSE to_char(t.at AT TIME ZONE 'UTC', '.US') END
                    || 'Z'
            )
            FROM (VALUES ('created_at', p.created_at), ('updated_at', p.updated_at),
                         ('expires_at', p.expires_at)) AS t (name, at)
        )
    ) AS body
    FROM planned p
), claimed AS (
    INSERT INTO idempotency_keys AS k
        (principal, key, endpoint, request_hash, status, response_status, response_body,
         created_at, expires_at, lease_owner, lease_token, lease_expires_at, lease_renewed_at)
    SELECT $11, $12, $13, $14,
           CASE WHEN a.body IS NULL THEN 'in_progress' ELSE 'completed' END,
           CASE WHEN a.body IS NULL THEN NULL ELSE 200 END, a.body,
           $15, $16, $17, gen_random_uuid(), $18, $15
    FROM (SELECT 1) AS one LEFT JOIN answer a ON true
    ON CONFLICT (principal, key) DO UPDATE
    SET endpoint = excluded.endpoint,
        request_hash = excluded.request_hash,
        status = excluded.status,
        response_status = excluded.response_status,
        response_body = excluded.response_body,
        created_at = excluded.created_at,
        expires_at = excluded.expires_at,
        lease_owner = excluded.lease_owner,
        lease_token = excluded.lease_token,
        lease_expires_at = excluded.lease_expires_at,
        lease_renewed_at = excluded.lease_renewed_at
    WHERE idempotency_key_claimable(
        k, excluded.endpoint, excluded.request_hash, excluded.created_at, $19)
    RETURNING status, lease_token, response_body
), stored AS (
    INSERT INTO memories (
        memory_id, user_id, session_id, agent_name, memory_type, category, key, content,
        content_size, access_level, version, created_at, updated_at, expires_at
    )
    SELECT p.memory_id, p.user_id, p.session_id, p.agent_name, p.memory_type, p.category,
           p.key, p.content, p.content_size, p.access_level, p.version, p.created_at,
           p.updated_at, p.expires_at
    FROM planned p JOIN claimed c ON c.status = 'completed'
    RETURNING memory_id
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $3, $10, 'write', memory_id, NULL, true, 1, $9::timestamptz FROM stored
)
SELECT c.lease_token AS token, c.response_body AS answer
FROM (SELECT 1) AS one LEFT JOIN claimed c ON true

-- name: lock_memory_by_key
-- The named memory, row-locked, if it is live and the caller may read it: for anyone else
-- it does not exist, as for every other read. $4 now, $5 is_admin, $6 roles, $7 caller.
SELECT m.* FROM memories m
WHERE m.user_id = $1 AND m.category = $2 AND m.key = $3
  AND memory_readable(m, $4, $7, ARRAY(SELECT memory_readable_levels($5, $6)))
FOR UPDATE OF m

-- name: retire_expired_memory_by_key
-- An expired memory is already gone for every reader; when its key is written again it
-- leaves now, the way the retention job would take it (interaction patterns to the
-- archive, the rest deleted), so the key is free for a new memory. $4 now.
WITH gone AS (
    DELETE FROM memories m
    WHERE m.user_id = $1 AND m.category = $2 AND m.key = $3 AND NOT memory_live(m, $4)
    RETURNING *
), archived AS (
    INSERT INTO memory_archive
    SELECT a.* FROM gone g, memory_archived(g, $4) a
    WHERE memory_archived_when_expired(g)
    ON CONFLICT (memory_id) DO NOTHING
)
SELECT count(*) FROM gone

-- name: update_memory
-- Rewrites a memory the caller ($7) may read, if its version is still $9, at any level.
-- agent_name stays the owner, the agent that created the memory, so it keeps reading what
-- it wrote after another reader changed it; the audit trail names who updated. Expiry
-- restarts from this write. $8 now, $10 is_admin, $11 roles.
UPDATE memories m
SET content = $2,
    content_size = $3,
    access_level = $4,
    memory_type = $5,
    session_id = $6,
    version = m.version + 1,
    updated_at = $8,
    expires_at = $8::timestamptz + c.retention
FROM memory_categories c
WHERE m.memory_id = $1
  AND c.name = m.category
  AND m.version = $9
  AND memory_readable(m, $8, $7, ARRAY(SELECT memory_readable_levels($10, $11)))
RETURNING m.*

-- name: get_memory
-- $2 now, $3 is_admin, $4 roles, $5 caller.
SELECT m.* FROM memories m
WHERE m.memory_id = $1
  AND memory_readable(m, $2, $5, ARRAY(SELECT memory_readable_levels($3, $4)))

-- name: delete_memory
-- $2 now, $3 is_admin, $4 roles, $5 caller.
DELETE FROM memories m
WHERE m.memory_id = $1
  AND memory_readable(m, $2, $5, ARRAY(SELECT memory_readable_levels($3, $4)))
RETURNING m.memory_id

-- The list statements below take the same parameters: $1 session_id, $2 user_id,
-- $3 agent_name, $4 contains (jsonb), $5 memory_type, $6 category, $7 since (filters, NULL
-- when not asked), a keyset page before ($8, $9), $10 now, $11 is_admin, $12 roles, $13
-- the reader (who always sees its own memories), $14 the limit (a page + 1: the last row
-- only says a next page exists), and for the audit row each writes in the same statement
-- $15 the key acting for the reader and $16 the filters as asked (it logs at most $14 - 1
-- rows). Which rows a list shows is memory_list_rows (schema.sql); the statements differ
-- only in the index a page is read through, chosen by the repository.
--
-- Why three statements: the plan must differ. asyncpg prepares each statement once, and
-- PostgreSQL caches a generic plan for it (one made without the parameters' values) when
-- that plan costs no more than planning each call. A statement that names the session (or
-- user) filter itself gets a generic plan through that filter's index (EXPLAIN EXECUTE
-- under plan_cache_mode = force_generic_plan: Index Scan using memories_session_created_idx,
-- Index Cond: ((session_id = $1) AND (ROW(created_at, memory_id) < ROW($8, $9)))), cached
-- from the sixth call on. A generic plan of one statement for every filter can use no
-- index (it is a Seq Scan), so PostgreSQL plans that statement again on every call: on
-- 100,000 memories a session page took 0.60 ms instead of 0.35 ms.

-- name: list_memories_by_session
-- A session's page: memories_session_created_idx, a cached generic plan.
WITH page AS (
    SELECT m.* FROM memory_list_rows($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) m
    WHERE m.session_id = $1
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $14
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $13, $15, 'list', NULL, $16, true, least(count(*), $14 - 1), $10::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_memories_by_user
-- A user's page (no session named): memories_user_created_idx, a cached generic plan.
WITH page AS (
    SELECT m.* FROM memory_list_rows($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) m
    WHERE m.user_id = $2
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $14
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $13, $15, 'list', NULL, $16, true, least(count(*), $14 - 1), $10::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_memories_by_agent_or_content
-- Neither session nor user named: an agent's memories, or a containment search across
-- users. PostgreSQL plans this one for each call's values, and reads through
-- memories_agent_created_idx for an agent and the GIN index memories_content_idx for
-- `contains` alone. It planned every call of the two statements this one replaced as well
-- (on 100,000 memories: 490 plans for the values, no generic one, each), so sharing one
-- costs only the planner's reading of memory_list_rows (about 0.1 ms a call there). Its
-- own generic plan would be a Seq Scan, which PostgreSQL does not choose while it costs
-- more than the plans for the values.
WITH page AS (
    SELECT m.* FROM memory_list_rows($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) m
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $14
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $13, $15, 'list', NULL, $16, true, least(count(*), $14 - 1), $10::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_context_memories
-- What an agent needs to continue a session: the session's memories and the user's
-- session-less ones, newest first. $3 now, $4 is_admin, $5 roles, $7 caller; ($8, $9)
-- the keyset cursor (the context endpoint reads the first page, the console pages on).
SELECT m.* FROM memories m
WHERE m.user_id = $1
  AND (m.session_id = $2 OR m.session_id IS NULL)
  AND memory_readable(m, $3, $7, ARRAY(SELECT memory_readable_levels($4, $5)))
  AND (m.created_at, m.memory_id) < ($8, $9)
ORDER BY m.created_at DESC, m.memory_id DESC
LIMIT $6

-- name: insert_access_log
INSERT INTO memory_access_log (agent_name, acting_principal, action, memory_id, query, allowed, rows, at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)

-- name: list_access_log
SELECT * FROM memory_access_log
WHERE at >= $1 AND (at, log_id) < ($2, $3)
ORDER BY at DESC, log_id DESC
LIMIT $4

-- name: list_access_log_by_agent
SELECT * FROM memory_access_log
WHERE agent_name = $1 AND at >= $2 AND (at, log_id) < ($3, $4)
ORDER BY at DESC, log_id DESC
LIMIT $5

-- name: live_memory_level
-- The level of a live memory regardless of who asks: tells "denied" from "absent" for the audit.
SELECT m.access_level FROM memories m
WHERE m.memory_id = $1 AND memory_live(m, $2)

-- name: get_memory_by_key
-- $4 now, $5 is_admin, $6 roles, $7 caller.
SELECT m.* FROM memories m
WHERE m.user_id = $1 AND m.category = $2 AND m.key = $3
  AND memory_readable(m, $4, $7, ARRAY(SELECT memory_readable_levels($5, $6)))

-- Retention (app/memories/retention.py, run by the jobs): expired memories go, expired
-- interaction patterns move to the archive, the archive and the access audit trail are
-- purged after their retention. Which rows each sweep takes is one predicate in
-- schema.sql, called by its batch and by its dry-run count; each user whose memories went
-- is told in the statement that took them (memory_purged_notice, with what the batch took
-- counted per user and category), and only while someone subscribes (event_subscribed): a
-- batch nobody listens to counts nothing.

-- name: expired_memories_reach
-- Expired memories go (interaction patterns are archived instead, below), in batches that
-- walk the expiry index in order. A batch first finds where it starts and how far it
-- reaches. It starts at the first expired memory after where the last batch reached ($3,
-- NULL for the first): a stretch of expired interaction patterns before it, which would
-- delete nothing, is stepped over here (only those rows are visited, as the DELETE would
-- visit them) instead of costing batches of its own; `start` is NULL when no expired memory
-- is left. It reaches the expiry $2 index entries on from `start`, and deletes the expired
-- memories from `start` up to and including that instant (rows sharing it all go in this
-- batch); the next batch starts after it, so no batch steps over rows that earlier ones
-- deleted. The reach counts every expired entry, interaction patterns too (a batch may take
-- fewer than $2 rows), so that it reads the index alone, without visiting a row for its
-- category: the DELETE visits each row once. `upto` is NULL when fewer than $2 entries are
-- left: that batch takes the rest. `told`: whether anyone subscribes to memory.purged,
-- which decides which DELETE the batch runs. $1 now, $2 batch size, $3 the last reach.
WITH first AS (
    SELECT expires_at FROM memories m
    WHERE memory_expired_to_delete(m, $1)
      AND expires_at > coalesce($3::timestamptz, '-infinity')
    ORDER BY expires_at
    LIMIT 1
)
SELECT first.expires_at AS start,
       (SELECT expires_at FROM memories m
        WHERE expires_at < $1 AND expires_at >= first.expires_at
        ORDER BY expires_at
        OFFSET $2 - 1 LIMIT 1) AS upto,
       event_subscribed('memory.purged') AS told
FROM (SELECT 1) one LEFT JOIN first ON true

-- name: delete_expired_memories
-- One batch (above) when nobody subscribes to memory.purged: a bare DELETE, its count from
-- the command's status. Two named statements because RETURNING the rows into a CTE to
-- count and tell them doubled the batch (20,000 rows: 56 ms bare, 104-114 ms returned).
-- No rows are locked first: a row updated meanwhile is re-checked against its new expiry.
-- $1 now, $2 from this expiry on (the batch's start), $3 up to this one (NULL: all).
DELETE FROM memories m
WHERE memory_expired_to_delete(m, $1)
  AND expires_at >= $2::timestamptz
  AND expires_at <= coalesce($3::timestamptz, $1)

-- name: delete_expired_memories_told
-- The same batch while someone subscribes: the users whose memories went are told in the
-- statement that took them, so the notice commits or rolls back with the deletion: one
-- memory.purged per user and batch, with the counts per category (a notifier wants one
-- notice per user, not job totals). A subscription made between the reach and this
-- statement is seen from the next batch on. $1 now, $2 from, $3 up to (as above).
WITH gone AS (
    DELETE FROM memories m
    WHERE memory_expired_to_delete(m, $1)
      AND expires_at >= $2::timestamptz
      AND expires_at <= coalesce($3::timestamptz, $1)
    RETURNING user_id, category
)
SELECT count(*) AS taken,
       (SELECT memory_purged_notice(array_agg(user_id), array_agg(category), array_agg(n),
                                    'deleted', $1)
        FROM (SELECT user_id, category, count(*) AS n FROM gone
              WHERE event_subscribed('memory.purged') GROUP BY user_id, category) taken
        HAVING count(*) > 0) AS told
FROM gone

-- name: count_expired_memories
SELECT count(*) FROM memories m WHERE memory_expired_to_delete(m, $1)

-- name: archive_interaction_patterns
-- Expired interaction patterns move to memory_archive; each user whose patterns moved is
-- told (memory.purged, action 'archived'). $1 now, $2 batch size.
WITH picked AS (
    SELECT memory_id FROM memories m
    WHERE memory_expired_to_archive(m, $1)
    ORDER BY expires_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM memories m USING picked WHERE m.memory_id = picked.memory_id
    RETURNING m.*
), archived AS (
    INSERT INTO memory_archive
    SELECT a.* FROM moved m, memory_archived(m, $1) a
    ON CONFLICT (memory_id) DO NOTHING
    RETURNING user_id, category
)
SELECT count(*) AS taken,
       (SELECT memory_purged_notice(array_agg(user_id), array_agg(category), array_agg(n),
                                    'archived', $1)
        FROM (SELECT user_id, category, count(*) AS n FROM archived
              WHERE event_subscribed('memory.purged') GROUP BY user_id, category) taken
        HAVING count(*) > 0) AS told
FROM archived

-- name: count_archivable_patterns
SELECT count(*) FROM memories m WHERE memory_expired_to_archive(m, $1)

-- name: purge_memory_archive
-- Archived memories older than the archive retention are purged (picked by ctid, without
-- locking first, as the session archive's purge); each user whose archive shrank is told
-- (memory.purged, action 'archive_purged'). $1 archived before, $2 now, $3 batch size.
WITH gone AS (
    DELETE FROM memory_archive a
    WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM memory_archive x WHERE memory_archive_lapsed(x, $1)
            ORDER BY archived_at LIMIT $3))
      AND memory_archive_lapsed(a, $1)
    RETURNING user_id, category
)
SELECT count(*) AS taken,
       (SELECT memory_purged_notice(array_agg(user_id), array_agg(category), array_agg(n),
                                    'archive_purged', $2)
        FROM (SELECT user_id, category, count(*) AS n FROM gone
              WHERE event_subscribed('memory.purged') GROUP BY user_id, category) taken
        HAVING count(*) > 0) AS told
FROM gone

-- name: count_purgeable_memory_archive
SELECT count(*) FROM memory_archive a WHERE memory_archive_lapsed(a, $1)

-- name: purge_access_log
-- The memory access audit trail older than its retention, picked by ctid like the other
-- purges. $1 cut-off, $2 batch size.
DELETE FROM memory_access_log l
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM memory_access_log x WHERE memory_access_lapsed(x, $1)
        ORDER BY at LIMIT $2))
  AND memory_access_lapsed(l, $1)
RETURNING log_id

-- name: count_purgeable_access_log
SELECT count(*) FROM memory_access_log l WHERE memory_access_lapsed(l, $1)
