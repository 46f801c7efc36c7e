"""Auto-merged writes and branches of a session (issue 20).

A version row records that its write was merged: from which base (an auto-merged write
based on an older version), and which branch (and branch version) a branch merge took in.
session_version() gains those as optional arguments; its callers stay as they are.

Branches: session_branches holds each branch's head (the session's content columns, the
session version it sits on, purpose, owner, activity), session_branch_versions its history.
Both go with their session (ON DELETE CASCADE: erasure, archival, purge). The idle-branch
sweep takes what session_branch_idle() says: open, quiet, and not of a preserved session.

Revision ID: 0018
Revises: 0016
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0018"
down_revision = "0016"
branch_labels = None
depends_on = None

UPGRADE = r"""
DROP FUNCTION session_version(session_coordination, text, text, timestamptz);

-- Merged writes and branch merges leave their mark on the version they write: the base an
-- auto-merged write was based on, and the branch (and its version) a merge took in.
ALTER TABLE session_state_versions
    ADD COLUMN merge_base bigint CHECK (merge_base >= 1),
    ADD COLUMN merged_branch text,
    ADD COLUMN merged_branch_version bigint CHECK (merged_branch_version >= 1);

-- The version row that records a session as it now is (`s`, a session_coordination row),
-- who changed it, why and when; a merged write names the base it was merged from, a
-- branch merge the branch and branch version it took in. Every statement that writes a
-- new version inserts it:
--     INSERT INTO session_state_versions
--     SELECT v.* FROM <the changed rows> s, session_version(s, <by>, <reason>, <at>) v
-- One SELECT returning a set: the planner inlines it.
CREATE FUNCTION session_version(
    s session_coordination, changed_by text, change_reason text, at timestamptz,
    merge_base bigint DEFAULT NULL, merged_branch text DEFAULT NULL,
    merged_branch_version bigint DEFAULT NULL)
    RETURNS SETOF session_state_versions
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.session_id, s.version, s.session_state, s.agent_sequence, s.coordination_metadata,
           s.current_agent, s.progress_percentage, s.status, s.priority, changed_by,
           change_reason, at, merge_base, merged_branch, merged_branch_version
$$;

-- Branches of a session: a named line of versions forked from the session ("main") at a
-- version, with the content of its head (the same content columns as the session). It
-- merges back into the session with the same three-way merge as an auto-merged write.
CREATE TABLE session_branches (
    session_id uuid NOT NULL REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    name text NOT NULL CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$' AND name <> 'main'),
    purpose text NOT NULL CHECK (purpose IN ('analysis', 'alternative_solution', 'verification',
                                             'collaboration', 'conflict_resolution')),
    owner_agent text NOT NULL CHECK (char_length(owner_agent) BETWEEN 1 AND 100),
    state text NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'merged')),
    -- The session version the branch sits on: where it was forked, or last rebased onto.
    base_version bigint NOT NULL CHECK (base_version >= 1),
    forked_at_version bigint NOT NULL CHECK (forked_at_version >= 1),
    version bigint NOT NULL CHECK (version >= 1),
    session_state jsonb NOT NULL CHECK (jsonb_typeof(session_state) = 'object'),
    agent_sequence jsonb NOT NULL CHECK (jsonb_typeof(agent_sequence) = 'array'),
    coordination_metadata jsonb NOT NULL CHECK (jsonb_typeof(coordination_metadata) = 'object'),
    current_agent text CHECK (char_length(current_agent) BETWEEN 1 AND 100),
    progress_percentage integer NOT NULL CHECK (progress_percentage BETWEEN 0 AND 100),
    priority text NOT NULL CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    -- The session version the merge wrote, once merged (a merged branch takes no writes).
    merged_version bigint,
    created_by text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    last_activity_at timestamptz NOT NULL,
    PRIMARY KEY (session_id, name)
);

-- The idle-branch sweep picks by activity.
CREATE INDEX session_branches_activity_idx ON session_branches (last_activity_at);

-- Every version of a branch, as session_state_versions is for the session.
CREATE TABLE session_branch_versions (
    session_id uuid NOT NULL,
    branch text NOT NULL,
    version bigint NOT NULL CHECK (version >= 1),
    session_state jsonb NOT NULL,
    agent_sequence jsonb NOT NULL,
    coordination_metadata jsonb NOT NULL,
    current_agent text,
    progress_percentage integer NOT NULL,
    priority text NOT NULL,
    changed_by text NOT NULL,
    change_reason text NOT NULL,
    created_at timestamptz NOT NULL,
    -- An auto-merged write: the branch version it was based on.
    merge_base bigint CHECK (merge_base >= 1),
    -- A fork or a rebase: the session version this branch version sits on.
    parent_version bigint CHECK (parent_version >= 1),
    PRIMARY KEY (session_id, branch, version),
    FOREIGN KEY (session_id, branch) REFERENCES session_branches (session_id, name)
        ON DELETE CASCADE
);

-- The version row that records a branch as it now is, as session_version does for a session.
CREATE FUNCTION session_branch_version(
    b session_branches, changed_by text, change_reason text, at timestamptz,
    merge_base bigint, parent_version bigint)
    RETURNS SETOF session_branch_versions
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT b.session_id, b.name, b.version, b.session_state, b.agent_sequence,
           b.coordination_metadata, b.current_agent, b.progress_percentage, b.priority,
           changed_by, change_reason, at, merge_base, parent_version
$$;

-- An open branch quiet since before `idle_before` expires, unless its session is preserved
-- (a preserved session keeps its branches). A merged branch is kept until deleted or until
-- its session goes.
CREATE FUNCTION session_branch_idle(b session_branches, idle_before timestamptz)
    RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT b.state = 'open' AND b.last_activity_at < idle_before
       AND NOT EXISTS (SELECT 1 FROM session_coordination s
                       WHERE s.session_id = b.session_id AND s.preserve)
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION session_branch_idle(session_branches, timestamptz);
DROP FUNCTION session_branch_version(session_branches, text, text, timestamptz, bigint, bigint);
DROP TABLE session_branch_versions;
DROP TABLE session_branches;
DROP FUNCTION session_version(session_coordination, text, text, timestamptz, bigint, text, bigint);
ALTER TABLE session_state_versions
    DROP COLUMN merged_branch_version, DROP COLUMN merged_branch, DROP COLUMN merge_base;
CREATE FUNCTION session_version(
    s session_coordination, changed_by text, change_reason text, at timestamptz)
    RETURNS SETOF session_state_versions
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT s.session_id, s.version, s.session_state, s.agent_sequence, s.coordination_metadata,
           s.current_agent, s.progress_percentage, s.status, s.priority, changed_by,
           change_reason, at
$$;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
