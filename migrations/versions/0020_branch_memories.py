"""Memories scoped to a branch of a session (issue 20).

branch_memories is an overlay on the user's memories: the branch's value of a (category,
key), read on the branch in place of main's, written into memories when the branch
merges, gone with the branch. It holds main's memory of the key as the branch first saw
it (base_*), so a merge can tell a key both sides changed.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- Memories of a branch (revision 0020): an overlay on the user's memories. A row here is
-- the branch's value of (category, key) for the session's user; reads on the branch see it
-- in place of main's memory of that key, main never sees it, and merging the branch
-- writes it into memories. The columns up to expires_at are the memory's, in memories'
-- order; base_* is main's memory of the key when the branch first wrote it (NULL: there
-- was none), which a merge compares with main's memory then to find the keys both changed.
-- The rows go with their branch (deleted, expired, merged) and with their user.
CREATE TABLE branch_memories (
    memory_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_id uuid NOT NULL,
    agent_name text NOT NULL CHECK (char_length(agent_name) BETWEEN 1 AND 100),
    memory_type text NOT NULL REFERENCES memory_types (name),
    category text NOT NULL REFERENCES memory_categories (name),
    key text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 200),
    content jsonb NOT NULL,
    content_size integer NOT NULL CHECK (content_size >= 0),
    access_level text NOT NULL REFERENCES memory_access_levels (level),
    version bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz,
    branch text NOT NULL,
    base_memory_id uuid,
    base_version bigint CHECK (base_version >= 1),
    base_content jsonb,
    CONSTRAINT branch_memories_key_unique UNIQUE (session_id, branch, category, key),
    FOREIGN KEY (session_id, branch) REFERENCES session_branches (session_id, name)
        ON DELETE CASCADE
);

-- Retention walks expiry; erasure of a user's memories finds them by user.
CREATE INDEX branch_memories_expiry_idx ON branch_memories (expires_at)
    WHERE expires_at IS NOT NULL;
CREATE INDEX branch_memories_user_idx ON branch_memories (user_id);

-- memory_readable for a branch's row: the same rule (live, and the caller's own or at a
-- level it reads), one SELECT the planner inlines.
CREATE FUNCTION branch_memory_readable(
    b branch_memories, at timestamptz, caller text, readable text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT (b.expires_at IS NULL OR b.expires_at > at)
       AND memory_visible(b.agent_name, b.access_level, caller, readable)
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION branch_memory_readable(branch_memories, timestamptz, text, text[]);
DROP TABLE branch_memories;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
