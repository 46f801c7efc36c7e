-- Telling the other processes what this one committed (app/db/announce.py): the triggers
-- announce with announce_after_commit() (no NOTIFY in the writing transaction); the
-- writing process then sends these, coalesced, from a statement of their own.

-- name: notify
-- $1 channels, $2 payloads (pairwise): one NOTIFY each, in one commit.
SELECT pg_notify(n.channel, n.payload) FROM unnest($1::text[], $2::text[]) AS n(channel, payload)
