-- Trace context in PostgreSQL (app/db/pool.py, app/tracing.py).

-- name: set_traceparent
-- The traceparent of the request or job a transaction belongs to, for this transaction
-- only (is_local: gone at COMMIT or ROLLBACK, nothing left on the pooled connection). Read
-- by current_traceparent(), the default of outbox_events.traceparent.
SELECT set_config('switchboard.traceparent', $1, true)
