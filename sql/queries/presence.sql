-- Replica presence: the lock a replica holds while its process lives (see sql/schema.sql,
-- replica_is_present). Runs only on the presence connection, never on a pooled one.

-- name: take_replica_presence
-- Session-level on purpose: it lasts exactly as long as the connection does.
SELECT pg_try_advisory_lock(replica_lock_space(), hashtext($1))

-- name: replica_is_present
SELECT replica_is_present($1)
