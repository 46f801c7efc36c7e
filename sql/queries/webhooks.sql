-- Webhooks: idempotency records and implicit session continuation.

-- name: claim_idempotency_key
-- No row back: the key is already in use by this caller (live or expired).
INSERT INTO idempotency_keys (principal, key, endpoint, request_hash, status, created_at, expires_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $6)
ON CONFLICT (principal, key) DO NOTHING
RETURNING key

-- name: get_idempotency_key
SELECT * FROM idempotency_keys WHERE principal = $1 AND key = $2

-- name: forget_idempotency_key
DELETE FROM idempotency_keys WHERE principal = $1 AND key = $2

-- name: complete_idempotency_key
UPDATE idempotency_keys
SET status = 'completed', response_status = $3, response_body = $4
WHERE principal = $1 AND key = $2

-- name: latest_open_session
-- Implicit continuation: the user's most recently active open session of this type.
SELECT session_id FROM session_coordination
WHERE user_id = $1 AND session_type = $2 AND status IN ('active', 'idle')
  AND last_activity_at >= $3 AND expires_at > $4
ORDER BY last_activity_at DESC
LIMIT 1

-- name: agent_roles
SELECT roles FROM agents WHERE name = $1 AND disabled_at IS NULL
