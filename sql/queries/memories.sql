-- Memories: facts agents share about a user and a session.
--
-- Access is enforced here, in every statement that reads, changes or deletes a memory: a
-- row is visible to the agent that wrote it (its owner) and to callers who may read its
-- access level, which is
--     memory_visible(m.agent_name, m.access_level, <caller>,
--                    ARRAY(SELECT memory_readable_levels(<is_admin>, <roles>)))
-- (both SQL functions in schema.sql: the planner inlines memory_visible into a plain
-- condition, and the ARRAY is computed once per statement).
-- Writing needs no level: any agent may write at any level, so results can flow up to a
-- coordinator that reads what the writer may not (an agent output, say).
-- Expired memories (expires_at <= now) are invisible even before the retention job runs.

-- name: write_reference
-- Everything a write is checked against, in one round trip: memory type -> default
-- category, category -> default level, all levels, which of the named users exist and who
-- owns each named session. $1 user ids, $2 session ids.
SELECT
    (SELECT coalesce(jsonb_object_agg(name, default_category), '{}') FROM memory_types) AS types,
    (SELECT coalesce(jsonb_object_agg(name, default_access_level), '{}') FROM memory_categories)
        AS categories,
    (SELECT coalesce(array_agg(level ORDER BY level), '{}') FROM memory_access_levels) AS levels,
    (SELECT coalesce(array_agg(id), '{}') FROM users WHERE id = ANY($1::uuid[])) AS users,
    (SELECT coalesce(jsonb_object_agg(session_id, user_id), '{}')
     FROM session_coordination WHERE session_id = ANY($2::uuid[])) AS session_owners

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

-- name: lock_memory_by_key
-- The named memory, row-locked, if it is live and the caller may read it: for anyone else
-- it does not exist, as for every other read. $4 now, $5 is_admin, $6 roles, $7 caller.
SELECT m.* FROM memories m
WHERE m.user_id = $1 AND m.category = $2 AND m.key = $3
  AND (m.expires_at IS NULL OR m.expires_at > $4)
  AND memory_visible(m.agent_name, m.access_level, $7,
                     ARRAY(SELECT memory_readable_levels($5, $6)))
FOR UPDATE OF m

-- name: retire_expired_memory_by_key
-- An expired memory is already gone for every reader; when its key is written again it
-- leaves now, the way the retention job would take it (interaction patterns to the
-- archive, the rest deleted), so the key is free for a new memory. $4 now.
WITH gone AS (
    DELETE FROM memories
    WHERE user_id = $1 AND category = $2 AND key = $3 AND expires_at <= $4
    RETURNING *
), archived AS (
    INSERT INTO memory_archive (memory_id, user_id, session_id, agent_name, memory_type,
                                category, key, content, content_size, access_level, version,
                                created_at, updated_at, expires_at, archived_at)
    SELECT memory_id, user_id, session_id, agent_name, memory_type, category, key, content,
           content_size, access_level, version, created_at, updated_at, expires_at,
           $4::timestamptz
    FROM gone
    WHERE category = 'interaction_patterns'
    ON CONFLICT (memory_id) DO NOTHING
)
SELECT count(*) FROM gone

-- name: update_memory
-- Rewrites a memory the caller ($7) may read, if its version is still $9, at any level.
-- agent_name stays the owner, the agent that created the memory, so it keeps reading what
-- it wrote after another reader changed it; the audit trail names who updated. Expiry
-- restarts from this write. $10 is_admin, $11 roles.
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
  AND memory_visible(m.agent_name, m.access_level, $7,
                     ARRAY(SELECT memory_readable_levels($10, $11)))
RETURNING m.*

-- name: get_memory
-- $2 now, $3 is_admin, $4 roles, $5 caller.
SELECT m.* FROM memories m
WHERE m.memory_id = $1
  AND (m.expires_at IS NULL OR m.expires_at > $2)
  AND memory_visible(m.agent_name, m.access_level, $5,
                     ARRAY(SELECT memory_readable_levels($3, $4)))

-- name: delete_memory
-- $2 now, $3 is_admin, $4 roles, $5 caller.
DELETE FROM memories m
WHERE m.memory_id = $1
  AND (m.expires_at IS NULL OR m.expires_at > $2)
  AND memory_visible(m.agent_name, m.access_level, $5,
                     ARRAY(SELECT memory_readable_levels($3, $4)))
RETURNING m.memory_id

-- name: list_memories_by_session
-- Keyset page before ($2, $3). $4 now, $5 is_admin, $6 roles; $7.. optional filters.
-- The list_memories_* queries fetch `limit + 1` rows (the last one only says a next page
-- exists) and write the read's audit row in the same statement: the reader ($14, also the
-- owner whose own memories it always sees), the key acting for it ($15), the filters ($16)
-- and the rows returned (so at most `limit`). list_memories_by_content numbers them from $11.
WITH page AS (
    SELECT m.* FROM memories m
    WHERE m.session_id = $1
      AND (m.created_at, m.memory_id) < ($2, $3)
      AND (m.expires_at IS NULL OR m.expires_at > $4)
      AND memory_visible(m.agent_name, m.access_level, $14,
                     ARRAY(SELECT memory_readable_levels($5, $6)))
      AND ($7::uuid IS NULL OR m.user_id = $7)
      AND ($8::text IS NULL OR m.agent_name = $8)
      AND ($9::text IS NULL OR m.memory_type = $9)
      AND ($10::text IS NULL OR m.category = $10)
      AND ($11::timestamptz IS NULL OR m.created_at >= $11)
      AND ($12::jsonb IS NULL OR m.content @> $12)
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $13
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $14, $15, 'list', NULL, $16, true, least(count(*), $13 - 1), $4::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_memories_by_user
WITH page AS (
    SELECT m.* FROM memories m
    WHERE m.user_id = $1
      AND (m.created_at, m.memory_id) < ($2, $3)
      AND (m.expires_at IS NULL OR m.expires_at > $4)
      AND memory_visible(m.agent_name, m.access_level, $14,
                     ARRAY(SELECT memory_readable_levels($5, $6)))
      AND ($7::uuid IS NULL OR m.session_id = $7)
      AND ($8::text IS NULL OR m.agent_name = $8)
      AND ($9::text IS NULL OR m.memory_type = $9)
      AND ($10::text IS NULL OR m.category = $10)
      AND ($11::timestamptz IS NULL OR m.created_at >= $11)
      AND ($12::jsonb IS NULL OR m.content @> $12)
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $13
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $14, $15, 'list', NULL, $16, true, least(count(*), $13 - 1), $4::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_memories_by_agent
WITH page AS (
    SELECT m.* FROM memories m
    WHERE m.agent_name = $1
      AND (m.created_at, m.memory_id) < ($2, $3)
      AND (m.expires_at IS NULL OR m.expires_at > $4)
      AND memory_visible(m.agent_name, m.access_level, $14,
                     ARRAY(SELECT memory_readable_levels($5, $6)))
      AND ($7::uuid IS NULL OR m.session_id = $7)
      AND ($8::uuid IS NULL OR m.user_id = $8)
      AND ($9::text IS NULL OR m.memory_type = $9)
      AND ($10::text IS NULL OR m.category = $10)
      AND ($11::timestamptz IS NULL OR m.created_at >= $11)
      AND ($12::jsonb IS NULL OR m.content @> $12)
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $13
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $14, $15, 'list', NULL, $16, true, least(count(*), $13 - 1), $4::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_memories_by_content
-- Containment search across users (uses the GIN index on content).
WITH page AS (
    SELECT m.* FROM memories m
    WHERE m.content @> $1
      AND (m.created_at, m.memory_id) < ($2, $3)
      AND (m.expires_at IS NULL OR m.expires_at > $4)
      AND memory_visible(m.agent_name, m.access_level, $11,
                     ARRAY(SELECT memory_readable_levels($5, $6)))
      AND ($7::text IS NULL OR m.memory_type = $7)
      AND ($8::text IS NULL OR m.category = $8)
      AND ($9::timestamptz IS NULL OR m.created_at >= $9)
    ORDER BY m.created_at DESC, m.memory_id DESC
    LIMIT $10
), logged AS (
    INSERT INTO memory_access_log (
        agent_name, acting_principal, action, memory_id, query, allowed, rows, at
    )
    SELECT $11, $12, 'list', NULL, $13, true, least(count(*), $10 - 1), $4::timestamptz
    FROM page
)
SELECT * FROM page m
ORDER BY m.created_at DESC, m.memory_id DESC

-- name: list_context_memories
-- What an agent needs to continue a session: the session's memories and the user's
-- session-less ones, newest first. $3 now, $4 is_admin, $5 roles, $7 caller.
SELECT m.* FROM memories m
WHERE m.user_id = $1
  AND (m.session_id = $2 OR m.session_id IS NULL)
  AND (m.expires_at IS NULL OR m.expires_at > $3)
  AND memory_visible(m.agent_name, m.access_level, $7,
                     ARRAY(SELECT memory_readable_levels($4, $5)))
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
SELECT access_level FROM memories
WHERE memory_id = $1 AND (expires_at IS NULL OR expires_at > $2)

-- name: get_memory_by_key
-- $4 now, $5 is_admin, $6 roles, $7 caller.
SELECT m.* FROM memories m
WHERE m.user_id = $1 AND m.category = $2 AND m.key = $3
  AND (m.expires_at IS NULL OR m.expires_at > $4)
  AND memory_visible(m.agent_name, m.access_level, $7,
                     ARRAY(SELECT memory_readable_levels($5, $6)))
