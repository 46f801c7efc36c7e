"""The session archive move reads each row once: DELETE ... RETURNING feeds the archive.

session_archive_move took the sessions' ids (locked by the caller), copied each row into
the archive by a lookup on the primary key, and then deleted them by a second join on the
id. The callers now hand over the locked rows' addresses (ctid: a locked row keeps it), the
DELETE finds them by address and its RETURNING is what is archived. Measured in
docs/benchmarks.md.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP FUNCTION session_archive_move(uuid[], text, timestamptz, timestamptz);

-- Moves the sessions at `locked` (their row addresses, the rows locked by the caller, so
-- the addresses hold) to the archive with their history, because `why` ('expired' or
-- 'completed'), archived at `at` and restorable until `until`, and tells subscribers in
-- the same statement (session.expired or session.archived); returns how many moved.
-- Expiry and archival pick and lock their sessions each their own way (their own index
-- and order), then both move them with this. Each row is read once: the DELETE hands the
-- rows it removed to the archive (to_jsonb of what was deleted), with no second lookup by
-- id; the history is read by the statement's snapshot, before the cascade removes it.
CREATE FUNCTION session_archive_move(locked tid[], why text, at timestamptz, until timestamptz)
    RETURNS bigint
    LANGUAGE sql VOLATILE
AS $$
    WITH moved AS (
        DELETE FROM session_coordination s
        WHERE s.ctid = ANY (locked)
        RETURNING s.*
    ), archived AS (
        INSERT INTO session_archive (session_id, user_id, reason, session, versions,
                                     archived_at, restorable_until)
        SELECT m.session_id, m.user_id, why, to_jsonb(m),
               coalesce((SELECT jsonb_agg(to_jsonb(v) ORDER BY v.version)
                         FROM session_state_versions v WHERE v.session_id = m.session_id),
                        '[]'),
               at, until
        FROM moved m
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
    )
    SELECT count(*) FROM archived
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION session_archive_move(tid[], text, timestamptz, timestamptz);

-- Moves the sessions `ids` (their rows locked by the caller) to the archive with their
-- history, because `why` ('expired' or 'completed'), archived at `at` and restorable until
-- `until`, and tells subscribers in the same statement (session.expired or
-- session.archived); returns how many moved. Expiry and archival pick their sessions each
-- their own way (their own index and order), then both move them with this.
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
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
