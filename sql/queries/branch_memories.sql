-- Memories of a branch: branch_memories (schema.sql) is an overlay on the user's
-- memories. On a branch, a (category, key) the branch wrote reads as the branch's row;
-- every other memory reads as main's. Main never reads branch rows. Access is the same
-- rule as main's, in every statement that reads or changes a row: branch_memory_readable
-- for the branch's rows, memory_readable (or memory_list_rows) for main's, with
-- ARRAY(SELECT memory_readable_levels(<is_admin>, <roles>)) computed once per statement.
-- A branch row that is live shadows main's memory of its key even for a caller who cannot
-- read it: on the branch, the key's value is the branch's.
-- Writes, deletes and the merge hold the branch's row lock (session_branches), so the
-- rows of one branch change one writer at a time.

-- name: get_branch_memory
-- The memory named (category, key) as the branch sees it: the branch's row, else main's.
-- $1 session, $2 branch, $3 user, $4 category, $5 key, $6 now, $7 is_admin, $8 roles,
-- $9 caller.
SELECT b.memory_id, b.user_id, b.session_id, b.agent_name, b.memory_type, b.category, b.key,
       b.content, b.content_size, b.access_level, b.version, b.created_at, b.updated_at,
       b.expires_at, b.branch
FROM branch_memories b
WHERE b.session_id = $1 AND b.branch = $2 AND b.category = $4 AND b.key = $5
  AND branch_memory_readable(b, $6, $9, ARRAY(SELECT memory_readable_levels($7, $8)))
UNION ALL
SELECT m.*, 'main' FROM memories m
WHERE m.user_id = $3 AND m.category = $4 AND m.key = $5
  AND memory_readable(m, $6, $9, ARRAY(SELECT memory_readable_levels($7, $8)))
  AND NOT EXISTS (SELECT 1 FROM branch_memories b
                  WHERE b.session_id = $1 AND b.branch = $2 AND b.category = $4
                    AND b.key = $5 AND (b.expires_at IS NULL OR b.expires_at > $6))

-- name: list_branch_memories
-- The user's memories as the branch sees them, newest first: the branch's rows and main's
-- rows of keys the branch did not write. $1 session, $2 branch, $3 user, $4 category (NULL:
-- any), a keyset page before ($5, $6), $7 now, $8 is_admin, $9 roles, $10 caller, $11 limit.
SELECT v.* FROM (
    SELECT b.memory_id, b.user_id, b.session_id, b.agent_name, b.memory_type, b.category,
           b.key, b.content, b.content_size, b.access_level, b.version, b.created_at,
           b.updated_at, b.expires_at, b.branch
    FROM branch_memories b
    WHERE b.session_id = $1 AND b.branch = $2 AND ($4::text IS NULL OR b.category = $4)
      AND branch_memory_readable(b, $7, $10, ARRAY(SELECT memory_readable_levels($8, $9)))
    UNION ALL
    SELECT m.*, 'main'
    FROM memory_list_rows(NULL, $3, NULL, NULL, NULL, $4, NULL, $5, $6, $7, $8, $9, $10) m
    WHERE NOT EXISTS (SELECT 1 FROM branch_memories b
                      WHERE b.session_id = $1 AND b.branch = $2 AND b.category = m.category
                        AND b.key = m.key AND (b.expires_at IS NULL OR b.expires_at > $7))
) v
WHERE (v.created_at, v.memory_id) < ($5, $6)
ORDER BY v.created_at DESC, v.memory_id DESC
LIMIT $11

-- name: lock_branch_memory
-- The branch's row of (category, key), locked, if it is live and the caller may read it.
-- $1 session, $2 branch, $3 category, $4 key, $5 now, $6 is_admin, $7 roles, $8 caller.
SELECT b.* FROM branch_memories b
WHERE b.session_id = $1 AND b.branch = $2 AND b.category = $3 AND b.key = $4
  AND branch_memory_readable(b, $5, $8, ARRAY(SELECT memory_readable_levels($6, $7)))
FOR UPDATE OF b

-- name: branch_key_holder
-- Who holds (category, key) regardless of the caller, to tell "hidden" from "absent": the
-- branch's live row ('branch'), else main's live memory ('main'), else nothing. An expired
-- branch row is gone for readers; the write that finds one removes it (retire below).
-- $1 session, $2 branch, $3 user, $4 category, $5 key, $6 now.
SELECT CASE
    WHEN EXISTS (SELECT 1 FROM branch_memories b
                 WHERE b.session_id = $1 AND b.branch = $2 AND b.category = $4 AND b.key = $5
                   AND (b.expires_at IS NULL OR b.expires_at > $6)) THEN 'branch'
    WHEN EXISTS (SELECT 1 FROM memories m
                 WHERE m.user_id = $3 AND m.category = $4 AND m.key = $5
                   AND memory_live(m, $6)) THEN 'main'
END AS holder

-- name: retire_expired_branch_memory
-- An expired branch row holding the key leaves before the key is written again, as the
-- retention sweep would take it. $1 session, $2 branch, $3 category, $4 key, $5 now.
DELETE FROM branch_memories b
WHERE b.session_id = $1 AND b.branch = $2 AND b.category = $3 AND b.key = $4
  AND b.expires_at <= $5

-- name: insert_branch_memory
-- The branch's first write of (category, key). It shadows main's memory of the key ($12
-- id, $13 version, $14 content: NULL if none), whose owner it keeps and whose version it
-- continues ($9), as a write on main would. $10 now; expiry from the category's retention.
INSERT INTO branch_memories (
    user_id, session_id, branch, agent_name, memory_type, category, key, content,
    content_size, access_level, version, created_at, updated_at, expires_at,
    base_memory_id, base_version, base_content
)
SELECT $1, $2, $3, $4, $5, c.name, $7, $8, $11, $6, $9, $10, $10, $10::timestamptz + c.retention,
       $12, $13, $14
FROM memory_categories c
WHERE c.name = $15
RETURNING memory_id, user_id, session_id, agent_name, memory_type, category, key, content,
          content_size, access_level, version, created_at, updated_at, expires_at, branch

-- name: update_branch_memory
-- Rewrites the branch's row of a key the caller ($8) may read, if its version is still
-- $6; the owner stays. $7 now, $9 is_admin, $10 roles.
UPDATE branch_memories b
SET content = $2, content_size = $3, access_level = $4, memory_type = $5,
    version = b.version + 1, updated_at = $7, expires_at = $7::timestamptz + c.retention
FROM memory_categories c
WHERE b.memory_id = $1 AND c.name = b.category AND b.version = $6
  AND branch_memory_readable(b, $7, $8, ARRAY(SELECT memory_readable_levels($9, $10)))
RETURNING b.memory_id, b.user_id, b.session_id, b.agent_name, b.memory_type, b.category,
          b.key, b.content, b.content_size, b.access_level, b.version, b.created_at,
          b.updated_at, b.expires_at, b.branch

-- name: delete_branch_memory
-- Drops the branch's row of a key the caller may read: main's memory shows through again.
-- $1 session, $2 branch, $3 category, $4 key, $5 now, $6 is_admin, $7 roles, $8 caller.
DELETE FROM branch_memories b
WHERE b.session_id = $1 AND b.branch = $2 AND b.category = $3 AND b.key = $4
  AND branch_memory_readable(b, $5, $8, ARRAY(SELECT memory_readable_levels($6, $7)))
RETURNING b.memory_id

-- name: hold_user
-- A key-share lock on the user, taken before any memory row: erasing the user's memories
-- takes the user's row first and then their memories, so a branch write or merge that
-- locked a memory row before waiting for the user (its INSERT's foreign key) would
-- deadlock with it. Taken first, the two simply go one after the other.
SELECT id FROM users WHERE id = $1 FOR KEY SHARE

-- name: touch_branch
-- A memory write is activity on the branch: the idle sweep counts from it.
UPDATE session_branches SET last_activity_at = $3 WHERE session_id = $1 AND name = $2

-- name: lock_branch_memories_for_merge
-- Every live row of the branch, locked, with main's live memory of its key now (NULL:
-- none) and whether the merging caller may read each side (a conflict shows only what it
-- may). $1 session, $2 branch, $3 now, $4 is_admin, $5 roles, $6 caller.
SELECT b.memory_id, b.user_id, b.agent_name, b.memory_type, b.category, b.key, b.content,
       b.content_size, b.access_level, b.base_memory_id, b.base_version, b.base_content,
       m.memory_id AS main_id, m.version AS main_version, m.content AS main_content,
       branch_memory_readable(b, $3, $6, ARRAY(SELECT memory_readable_levels($4, $5)))
           AS ours_readable,
       coalesce(memory_readable(m, $3, $6, ARRAY(SELECT memory_readable_levels($4, $5))), true)
           AS theirs_readable
FROM branch_memories b
LEFT JOIN memories m ON m.user_id = b.user_id AND m.category = b.category AND m.key = b.key
                    AND memory_live(m, $3)
WHERE b.session_id = $1 AND b.branch = $2 AND (b.expires_at IS NULL OR b.expires_at > $3)
ORDER BY b.category, b.key
FOR UPDATE OF b

-- name: merge_update_memory
-- A merge writes the branch's value into main's memory of the key, if that is still at
-- the version the merge read ($6); the owner stays, expiry restarts. $7 now.
UPDATE memories m
SET content = $2, content_size = $3, access_level = $4, memory_type = $5,
    version = m.version + 1, updated_at = $7, expires_at = $7::timestamptz + c.retention
FROM memory_categories c
WHERE m.memory_id = $1 AND c.name = m.category AND m.version = $6
RETURNING m.memory_id

-- name: merge_insert_memory
-- A merge creates main's memory of a key main does not hold, with the branch row's id and
-- owner (so the id a branch write answered names the memory after the merge). No row:
-- the key was taken meanwhile. $12 now.
INSERT INTO memories (
    memory_id, user_id, session_id, agent_name, memory_type, category, key, content,
    content_size, access_level, created_at, updated_at, expires_at
)
SELECT $1, $2, $3, $4, $5, c.name, $7, $8, $9, $10, $11, $11, $11::timestamptz + c.retention
FROM memory_categories c
WHERE c.name = $6
ON CONFLICT DO NOTHING
RETURNING memory_id

-- name: merge_delete_memory
-- A resolution that removes the key on main. $2 the version the merge read.
DELETE FROM memories m WHERE m.memory_id = $1 AND m.version = $2 RETURNING m.memory_id

-- name: drop_branch_memories
-- A merged branch's rows: their values are main's now (or were settled otherwise).
DELETE FROM branch_memories WHERE session_id = $1 AND branch = $2

-- name: delete_expired_branch_memories
-- Retention for branch rows: expired ones go (picked by ctid, without locking first, as
-- the archive purges). A branch row is a draft that was never main's, so an expired
-- interaction pattern on a branch is deleted, not archived. $1 now, $2 batch size.
DELETE FROM branch_memories b
WHERE ctid = ANY(ARRAY(
        SELECT ctid FROM branch_memories x WHERE x.expires_at < $1
        ORDER BY x.expires_at LIMIT $2))
  AND b.expires_at < $1
RETURNING b.memory_id

-- name: count_expired_branch_memories
SELECT count(*) FROM branch_memories b WHERE b.expires_at < $1

-- name: reapply_category_retention_on_branches
-- reapply_category_retention (memories.sql) for the branches' rows of the category.
UPDATE branch_memories b
SET expires_at = b.updated_at + c.retention
FROM memory_categories c
WHERE c.name = $1 AND b.category = c.name
  AND b.expires_at IS DISTINCT FROM b.updated_at + c.retention
