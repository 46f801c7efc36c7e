-- Webhooks: idempotency records and implicit session continuation.

-- name: claim_idempotency_key
-- Take the key for this request, in one statement: a key never seen, or one
-- idempotency_key_claimable() (schema.sql) lets this request take over: its stored answer
-- expired, or it is still in progress for this same request and its holder is gone (the
-- lease ran out, or the replica died and has not renewed the lease since $9, a moment ago).
-- No row back: the key is held by a live request, or answered (replay it), or used for a
-- different request.
INSERT INTO idempotency_keys AS k
    (principal, key, endpoint, request_hash, status, created_at, expires_at,
     lease_owner, lease_token, lease_expires_at, lease_renewed_at)
VALUES ($1, $2, $3, $4, 'in_progress', $5, $6, $7, gen_random_uuid(), $8, $5)
ON CONFLICT (principal, key) DO UPDATE
SET endpoint = excluded.endpoint,
    request_hash = excluded.request_hash,
    status = 'in_progress',
    response_status = NULL,
    response_body = NULL,
    created_at = excluded.created_at,
    expires_at = excluded.expires_at,
    lease_owner = excluded.lease_owner,
    lease_token = excluded.lease_token,
    lease_expires_at = excluded.lease_expires_at,
    lease_renewed_at = excluded.lease_renewed_at
WHERE idempotency_key_claimable(
    k, excluded.endpoint, excluded.request_hash, excluded.created_at, $9)
RETURNING lease_token

-- name: get_idempotency_key
SELECT * FROM idempotency_keys WHERE principal = $1 AND key = $2

-- name: forget_idempotency_key
-- Only the claim this request holds: a key taken over (or answered) meanwhile stays.
DELETE FROM idempotency_keys
WHERE principal = $1 AND key = $2 AND lease_token = $3 AND status = 'in_progress'

-- name: complete_idempotency_key
-- Only the claim this request holds; no row back: the key was taken over meanwhile.
UPDATE idempotency_keys
SET status = 'completed', response_status = $4, response_body = $5
WHERE principal = $1 AND key = $2 AND lease_token = $3 AND status = 'in_progress'
RETURNING key

-- name: renew_idempotency_leases
-- One statement every second for all the requests a replica is running. $5 now.
UPDATE idempotency_keys AS k
SET lease_expires_at = $4, lease_renewed_at = $5
FROM unnest($1::text[], $2::text[], $3::uuid[]) AS held (principal, key, token)
WHERE k.principal = held.principal
  AND k.key = held.key
  AND k.lease_token = held.token
  AND k.status = 'in_progress'

-- name: latest_open_session
-- Implicit continuation: the user's most recently active open session of this type.
SELECT session_id FROM session_coordination
WHERE user_id = $1 AND session_type = $2 AND status IN ('active', 'idle')
  AND last_activity_at >= $3 AND expires_at > $4
ORDER BY last_activity_at DESC
LIMIT 1

-- name: agent_roles
SELECT roles FROM agents WHERE name = $1 AND disabled_at IS NULL

-- name: purge_idempotency_keys
-- Stored webhook answers past their 24 hours (a job's sweep). $1 now, $2 batch size.
WITH picked AS (
    SELECT principal, key FROM idempotency_keys k WHERE idempotency_key_lapsed(k, $1)
    ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED
)
DELETE FROM idempotency_keys k USING picked
WHERE k.principal = picked.principal AND k.key = picked.key
RETURNING k.key

-- name: count_purgeable_idempotency_keys
SELECT count(*) FROM idempotency_keys k WHERE idempotency_key_lapsed(k, $1)
