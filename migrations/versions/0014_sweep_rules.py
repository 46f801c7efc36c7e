"""Sweeps share their rules inside the database.

Each job's sweep (a batch statement and its dry-run count) selects its rows with one
predicate function instead of spelling the condition twice (session_goes_idle,
session_extendable, session_expiring, session_expired, session_archivable,
session_archive_lapsed, memory_expired_to_delete, memory_expired_to_archive,
memory_archive_lapsed, memory_access_lapsed, idempotency_key_lapsed, job_run_lapsed,
outbox_events_settled); the closed status, a running process and "may lapse" are one
function each (session_open, session_running, session_may_lapse). The two archive
statements move sessions with one function (session_archive_move); the three memory purges
tell users with one (memory_purged_notice) and archive rows through one
(memory_archived, memory_archived_when_expired). Event deliveries are made by a trigger on
outbox_events (outbox_fan_out), not by a copy of the fan-out in every statement that
writes an event; whether a subscription wants an event type is one function
(subscription_wants, event_subscribed).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION session_open(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.status <> 'completed'
$$;

CREATE FUNCTION session_running(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.session_state ->> 'active_process' IS NOT NULL
$$;

CREATE FUNCTION session_may_lapse(s session_coordination) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT s.preserve AND NOT session_running(s)
$$;

CREATE FUNCTION session_goes_idle(s session_coordination, inactive_before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.status = 'active' AND s.last_activity_at < inactive_before AND session_may_lapse(s)
$$;

CREATE FUNCTION session_extendable(
    s session_coordination, moved_since timestamptz, expiring_before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT session_running(s) AND s.updated_at > moved_since
       AND s.expires_at < expiring_before AND session_open(s)
$$;

CREATE FUNCTION session_expiring(s session_coordination, at timestamptz, until timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.expires_at > at AND s.expires_at <= until AND s.expiry_warned_at IS NULL
       AND session_may_lapse(s) AND session_open(s)
$$;

CREATE FUNCTION session_expired(s session_coordination, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.expires_at < at AND session_may_lapse(s) AND session_open(s)
$$;

CREATE FUNCTION session_archivable(s session_coordination, completed_before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT NOT session_open(s) AND coalesce(s.completed_at, s.created_at) < completed_before
       AND NOT s.preserve
$$;

CREATE FUNCTION session_archive_lapsed(a session_archive, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.restorable_until < at
$$;

CREATE FUNCTION session_archive_move(ids uuid[], why text, at timestamptz, until timestamptz)
    RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    WITH archived AS (
        INSERT INTO session_archive (session_id, user_id, reason, session, versions,
                                     archived_at, restorable_until)
        SELECT s.session_id, s.user_id, why, to_jsonb(s),
               coalesce((SELECT jsonb_agg(to_jsonb(v) ORDER BY v.version)
                         FROM session_state_versions v WHERE v.session_id = s.session_id),
                        '[]'),
               at, until
        FROM session_coordination s
        WHERE s.session_id = ANY (ids)
        ON CONFLICT (session_id) DO UPDATE
        SET reason = excluded.reason, session = excluded.session, versions = excluded.versions,
            archived_at = excluded.archived_at, restorable_until = excluded.restorable_until
        RETURNING session_id, user_id, restorable_until
    ), told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT CASE why WHEN 'expired' THEN 'session.expired' ELSE 'session.archived' END,
               jsonb_build_object('session_id', session_id, 'user_id', user_id,
                                  'restorable_until', restorable_until),
               at
        FROM archived
    ), moved AS (
        DELETE FROM session_coordination s
        USING archived
        WHERE s.session_id = archived.session_id
        RETURNING s.session_id
    )
    SELECT count(*) FROM moved
$$;

CREATE FUNCTION memory_archived_when_expired(m memories) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.category = 'interaction_patterns'
$$;

CREATE FUNCTION memory_expired_to_delete(m memories, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.expires_at < at AND NOT memory_archived_when_expired(m)
$$;

CREATE FUNCTION memory_expired_to_archive(m memories, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.expires_at < at AND memory_archived_when_expired(m)
$$;

CREATE FUNCTION memory_archived(m memories, at timestamptz) RETURNS SETOF memory_archive
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.memory_id, m.user_id, m.session_id, m.agent_name, m.memory_type, m.category,
           m.key, m.content, m.content_size, m.access_level, m.version, m.created_at,
           m.updated_at, m.expires_at, at
$$;

CREATE FUNCTION memory_archive_lapsed(a memory_archive, before timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.archived_at < before
$$;

CREATE FUNCTION subscription_wants(sub subscriptions, of_type text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT sub.disabled_at IS NULL AND of_type = ANY (sub.event_types)
$$;

CREATE FUNCTION event_subscribed(of_type text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (SELECT 1 FROM subscriptions sub WHERE subscription_wants(sub, of_type))
$$;

CREATE FUNCTION memory_purged_notice(
    of_users uuid[], of_categories text[], counts bigint[], action text, at timestamptz)
    RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    WITH told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT 'memory.purged',
               jsonb_build_object('user_id', user_id, 'action', action, 'count', sum(n),
                                  'categories', jsonb_object_agg(category, n)),
               at
        FROM unnest(of_users, of_categories, counts) AS taken (user_id, category, n)
        WHERE event_subscribed('memory.purged')
        GROUP BY user_id
        RETURNING event_id
    )
    SELECT count(*) FROM told
$$;

CREATE FUNCTION memory_access_lapsed(l memory_access_log, before timestamptz)
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT l.at < before
$$;

CREATE FUNCTION idempotency_key_lapsed(k idempotency_keys, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT k.expires_at < at
$$;

CREATE FUNCTION job_run_lapsed(r job_runs, before timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT r.status <> 'running' AND r.started_at < before
$$;

CREATE FUNCTION outbox_events_settled(before timestamptz) RETURNS SETOF outbox_events
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT e.* FROM outbox_events e
    WHERE e.created_at < before
      AND NOT EXISTS (SELECT 1 FROM event_deliveries d
                      WHERE d.event_id = e.event_id AND d.status = 'pending')
$$;

CREATE FUNCTION outbox_fan_out() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    INSERT INTO event_deliveries (event_id, subscription_id, next_attempt_at)
    SELECT e.event_id, sub.subscription_id, e.created_at
    FROM written e
    JOIN subscriptions sub ON subscription_wants(sub, e.event_type);
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_events_fan_out
    AFTER INSERT ON outbox_events
    REFERENCING NEW TABLE AS written
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_fan_out();
"""

DOWNGRADE = r"""
DROP TRIGGER outbox_events_fan_out ON outbox_events;
DROP FUNCTION outbox_fan_out();
DROP FUNCTION outbox_events_settled(timestamptz);
DROP FUNCTION job_run_lapsed(job_runs, timestamptz);
DROP FUNCTION idempotency_key_lapsed(idempotency_keys, timestamptz);
DROP FUNCTION memory_access_lapsed(memory_access_log, timestamptz);
DROP FUNCTION memory_purged_notice(uuid[], text[], bigint[], text, timestamptz);
DROP FUNCTION event_subscribed(text);
DROP FUNCTION subscription_wants(subscriptions, text);
DROP FUNCTION memory_archive_lapsed(memory_archive, timestamptz);
DROP FUNCTION memory_archived(memories, timestamptz);
DROP FUNCTION memory_expired_to_archive(memories, timestamptz);
DROP FUNCTION memory_expired_to_delete(memories, timestamptz);
DROP FUNCTION memory_archived_when_expired(memories);
DROP FUNCTION session_archive_move(uuid[], text, timestamptz, timestamptz);
DROP FUNCTION session_archive_lapsed(session_archive, timestamptz);
DROP FUNCTION session_archivable(session_coordination, timestamptz);
DROP FUNCTION session_expired(session_coordination, timestamptz);
DROP FUNCTION session_expiring(session_coordination, timestamptz, timestamptz);
DROP FUNCTION session_extendable(session_coordination, timestamptz, timestamptz);
DROP FUNCTION session_goes_idle(session_coordination, timestamptz);
DROP FUNCTION session_may_lapse(session_coordination);
DROP FUNCTION session_running(session_coordination);
DROP FUNCTION session_open(session_coordination);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
