-- Users: the people whose sessions and memories Switchboard keeps.

-- name: insert_user
-- No row back means external_ref is taken.
INSERT INTO users (external_ref, created_at)
VALUES ($1, $2)
ON CONFLICT (external_ref) DO NOTHING
RETURNING id, external_ref, created_at, deleted_at

-- name: get_user
SELECT id, external_ref, created_at, deleted_at
FROM users
WHERE id = $1

-- name: get_user_by_external_ref
SELECT id, external_ref, created_at, deleted_at
FROM users
WHERE external_ref = $1

-- name: user_exists
SELECT EXISTS (SELECT 1 FROM users WHERE id = $1)
