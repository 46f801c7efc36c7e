-- The event outbox: subscriptions, delivery with retries, listing and redelivery, and the
-- events' retention (housekeeping). Events themselves are written by the statements that
-- make the change they describe, in the same transaction (sessions.sql, memories.sql).

-- name: claim_due_deliveries
-- Take due deliveries (each exactly once across replicas) and mark them in flight.
-- $1 now, $2 batch size, $3 in flight until.
WITH due AS (
    SELECT event_id, subscription_id FROM event_deliveries
    WHERE status = 'pending' AND next_attempt_at <= $1
    ORDER BY next_attempt_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE event_deliveries d
SET next_attempt_at = $3, attempts = d.attempts + 1
FROM due, outbox_events e, subscriptions s
WHERE d.event_id = due.event_id AND d.subscription_id = due.subscription_id
  AND e.event_id = d.event_id AND s.subscription_id = d.subscription_id
RETURNING d.event_id, d.subscription_id, d.attempts, e.event_type, e.payload, e.created_at,
          s.url, s.secret,
          -- An A2A push config's target: its token and authentication (app/a2a/push.py).
          s.push_config_id IS NOT NULL AS push,
          (SELECT p.token FROM a2a_push_configs p WHERE p.push_config_id = s.push_config_id)
              AS push_token,
          (SELECT p.authentication FROM a2a_push_configs p
           WHERE p.push_config_id = s.push_config_id) AS push_authentication

-- name: mark_delivered
UPDATE event_deliveries
SET status = 'delivered', delivered_at = $3, last_error = NULL
WHERE event_id = $1 AND subscription_id = $2

-- name: mark_delivery_failed
-- $3 error, $4 next attempt at, $5 dead (no more attempts).
UPDATE event_deliveries
SET last_error = $3, next_attempt_at = $4,
    status = CASE WHEN $5::boolean THEN 'dead' ELSE 'pending' END
WHERE event_id = $1 AND subscription_id = $2

-- name: insert_subscription
INSERT INTO subscriptions (url, event_types, secret, created_at)
VALUES ($1, $2, $3, $4)
RETURNING subscription_id, url, event_types, created_at, disabled_at

-- name: list_subscriptions
-- A2A push configs' delivery targets (push_config_id set) are not subscribers.
SELECT subscription_id, url, event_types, created_at, disabled_at
FROM subscriptions WHERE push_config_id IS NULL ORDER BY created_at

-- name: delete_subscription
DELETE FROM subscriptions WHERE subscription_id = $1 AND push_config_id IS NULL
RETURNING subscription_id

-- name: list_deliveries
-- Events with their delivery state, newest first; $1 status filter, $2 the event types to
-- list (NULL: all). A row is one delivery (an event has one per subscriber), so the keyset that
-- pages through them is (created_at, event_id, subscription_id): unique, and ordered the
-- same way throughout.
SELECT e.event_id, e.event_type, e.payload, e.created_at, d.subscription_id, d.status,
       d.attempts, d.last_error, d.delivered_at, d.next_attempt_at, e.trace_id
FROM outbox_events e
JOIN event_deliveries d ON d.event_id = e.event_id
WHERE ($1::text IS NULL OR d.status = $1)
  AND ($2::text[] IS NULL OR e.event_type = ANY ($2::text[]))
  AND (e.created_at, e.event_id, d.subscription_id) < ($3, $4, $5)
ORDER BY e.created_at DESC, e.event_id DESC, d.subscription_id DESC
LIMIT $6

-- name: event_deliveries
-- One event's delivery to each subscriber, with the subscriber's URL (a push config's
-- target included).
SELECT e.event_id, e.event_type, e.payload, e.created_at, d.subscription_id, d.status,
       d.attempts, d.last_error, d.delivered_at, d.next_attempt_at, e.trace_id, s.url
FROM outbox_events e
JOIN event_deliveries d ON d.event_id = e.event_id
JOIN subscriptions s ON s.subscription_id = d.subscription_id
WHERE e.event_id = $1
ORDER BY d.subscription_id

-- name: redeliver_event
UPDATE event_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = $2, last_error = NULL
WHERE event_id = $1
RETURNING subscription_id

-- name: purge_events
-- Events older than their retention whose deliveries are all over (outbox_events_settled),
-- with those deliveries (ON DELETE CASCADE). Picked by id: the set the function returns
-- has no ctid. $1 created before, $2 batch size.
DELETE FROM outbox_events
WHERE event_id = ANY(ARRAY(
        SELECT event_id FROM outbox_events_settled($1) ORDER BY created_at LIMIT $2))
RETURNING event_id

-- name: count_purgeable_events
SELECT count(*) FROM outbox_events_settled($1)

-- name: insert_event
-- An event whose change has no statement of its own to ride with (a task that ended for a
-- session that no longer takes changes). $1 type, $2 payload, $3 now.
INSERT INTO outbox_events (event_type, payload, created_at) VALUES ($1, $2, $3)
RETURNING event_id

-- Event streams (app/events/hub.py, app/events/streams.py). An event's position is its
-- SSE id; events are numbered once committed (outbox_sequence() in schema.sql), so
-- "position > N" resumes without loss or repetition.

-- name: sequence_events
-- Number up to $1 committed events that have no position yet, after the key ($2 created_at,
-- $3 event_id; NULLs: from the oldest) where the run's previous batch ended: how many, and
-- the key of the last one. Its own transaction: the numbering's turn (an advisory lock)
-- lasts until it commits.
SELECT numbered, last_created, last_event FROM outbox_sequence_from($1, $2, $3)

-- name: last_position
-- The newest numbered event's position (0: none); where a new hub and a stream "from now"
-- start. Written as ORDER BY ... LIMIT 1, not max(): after a large batch of events was
-- analysed while still unnumbered, the statistics say no row has a position, max()'s two
-- plans then cost the same, and the planner took the one that reads the whole index (1.6 s
-- at 7.3 million events, once per opening stream, until the next autoanalyze).
SELECT coalesce(
    (SELECT position FROM outbox_events WHERE position IS NOT NULL
     ORDER BY position DESC LIMIT 1),
    0)

-- name: events_after
-- Every numbered event after position $1, oldest first, at most $2: what the hub fans out,
-- and the admin stream's catch-up without a type filter.
SELECT position, event_id, event_type, payload, created_at, trace_id
FROM outbox_events
WHERE position > $1
ORDER BY position
LIMIT $2

-- name: events_of_types_after
-- The admin stream's catch-up with ?types=: the events of types $3 after position $1. A
-- query of its own rather than "$3 IS NULL OR ...": the plan walks the position index
-- either way, and the filter stays out of the unfiltered one.
SELECT position, event_id, event_type, payload, created_at, trace_id
FROM outbox_events
WHERE position > $1 AND event_type = ANY ($3::text[])
ORDER BY position
LIMIT $2

-- name: session_events_after
-- A session's stream catch-up: the events whose payload names session $3 (its versions,
-- handoffs, expiry warnings, its tasks' transitions, ...) after position $1, by
-- outbox_events_session_position_idx.
SELECT position, event_id, event_type, payload, created_at, trace_id
FROM outbox_events
WHERE payload ->> 'session_id' = $3::text AND position > $1
ORDER BY payload ->> 'session_id', position
LIMIT $2

-- name: position_bound
-- The highest position ever given out (committed or not): no client can hold a larger one.
SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_events_position_seq
