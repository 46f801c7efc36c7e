"""Memories: access levels, categories with retention, memory types, memories, archive, audit log.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- Who may read a memory of each access level: agents holding required_role (NULL: any
-- authenticated agent). The admin key reads every level. Kept as data so a deployment can
-- add levels without code.
CREATE TABLE memory_access_levels (
    level text PRIMARY KEY CHECK (level ~ '^[a-z][a-z0-9_]{0,49}$'),
    required_role text CHECK (required_role ~ '^[a-z][a-z0-9_]{0,49}$'),
    description text NOT NULL DEFAULT ''
);

INSERT INTO memory_access_levels (level, required_role, description) VALUES
    ('all_agents', NULL, 'any authenticated agent'),
    ('authorized_agents', 'authorized', 'agents holding the authorized role'),
    ('analytics_agents', 'analytics', 'agents holding the analytics role'),
    ('coordination_manager', 'coordination_manager', 'the coordination manager only');

CREATE TABLE memory_categories (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,49}$'),
    -- NULL: kept until deleted.
    retention interval CHECK (retention > interval '0'),
    default_access_level text NOT NULL REFERENCES memory_access_levels (level),
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO memory_categories (name, retention, default_access_level, description) VALUES
    ('session_data', interval '24 hours', 'all_agents', 'current conversation context'),
    ('user_profile', NULL, 'authorized_agents', 'financial profile and preferences'),
    ('interaction_patterns', interval '1 year', 'analytics_agents', 'usage patterns and learning'),
    ('agent_outputs', interval '30 days', 'coordination_manager', 'agent results and recommendations');

-- Which category a memory of each type lands in when the writer does not say.
CREATE TABLE memory_types (
    name text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,49}$'),
    default_category text NOT NULL REFERENCES memory_categories (name),
    description text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);

INSERT INTO memory_types (name, default_category, description) VALUES
    ('intent_session', 'interaction_patterns', 'interaction patterns, session history'),
    ('orchestrator', 'session_data', 'communication preferences, compliance logs'),
    ('data_collection', 'user_profile', 'financial profile, completeness tracking'),
    ('consultation', 'user_profile', 'risk tolerance, advisory history'),
    ('planning', 'agent_outputs', 'user goals, plan versions, trend data'),
    ('changes', 'agent_outputs', 'transaction logs, change history'),
    ('education', 'interaction_patterns', 'progress tracking, knowledge mastery');

CREATE TABLE memories (
    memory_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    -- A memory outlives the session it was written in (user-level facts are written during
    -- sessions); the link is dropped when the session goes.
    session_id uuid REFERENCES session_coordination (session_id) ON DELETE SET NULL,
    agent_name text NOT NULL CHECK (char_length(agent_name) BETWEEN 1 AND 100),
    memory_type text NOT NULL REFERENCES memory_types (name),
    category text NOT NULL REFERENCES memory_categories (name),
    key text CHECK (char_length(key) BETWEEN 1 AND 200),
    content jsonb NOT NULL,
    content_size integer NOT NULL CHECK (content_size >= 0),
    access_level text NOT NULL REFERENCES memory_access_levels (level),
    version bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    -- NULL: never expires (a permanent category).
    expires_at timestamptz,
    CONSTRAINT memories_user_category_key_unique UNIQUE (user_id, category, key)
);

-- Newest-first keyset lists by session, by user and by writing agent.
CREATE INDEX memories_session_created_idx
    ON memories (session_id, created_at DESC, memory_id DESC) WHERE session_id IS NOT NULL;
CREATE INDEX memories_user_created_idx ON memories (user_id, created_at DESC, memory_id DESC);
CREATE INDEX memories_agent_created_idx
    ON memories (agent_name, created_at DESC, memory_id DESC);
-- Retention sweeps.
CREATE INDEX memories_expiry_idx ON memories (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX memories_category_created_idx ON memories (category, created_at);
-- JSONB containment queries (?contains=).
CREATE INDEX memories_content_idx ON memories USING gin (content jsonb_path_ops);

CREATE TABLE memory_archive (
    memory_id uuid PRIMARY KEY,
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_id uuid,
    agent_name text NOT NULL,
    memory_type text NOT NULL,
    category text NOT NULL,
    key text,
    content jsonb NOT NULL,
    content_size integer NOT NULL,
    access_level text NOT NULL,
    version bigint NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    expires_at timestamptz,
    archived_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX memory_archive_user_idx ON memory_archive (user_id);
CREATE INDEX memory_archive_archived_idx ON memory_archive (archived_at);

-- Append-only audit of memory access, allowed and denied.
CREATE TABLE memory_access_log (
    log_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    agent_name text NOT NULL,
    -- Who the key belongs to when it differs from agent_name (a caller acting for an agent).
    acting_principal text,
    action text NOT NULL CHECK (action IN ('read', 'list', 'write', 'update', 'delete', 'context', 'erase')),
    memory_id uuid,
    query jsonb,
    allowed boolean NOT NULL,
    rows integer NOT NULL DEFAULT 0,
    at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX memory_access_log_agent_at_idx ON memory_access_log (agent_name, at DESC, log_id DESC);
CREATE INDEX memory_access_log_at_idx ON memory_access_log (at DESC, log_id DESC);
"""

DOWNGRADE = """
DROP TABLE memory_access_log;
DROP TABLE memory_archive;
DROP TABLE memories;
DROP TABLE memory_types;
DROP TABLE memory_categories;
DROP TABLE memory_access_levels;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
