"""Foundation: UUIDv7 function, users, sessions with version history, agents.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

UPGRADE = r"""
-- Time-ordered UUIDs (RFC 9562 version 7) on PostgreSQL 15-17, which lack uuidv7():
-- the first 48 bits are Unix milliseconds, then the version nibble 7, then random bits
-- taken from a core gen_random_uuid() (whose variant bits are already RFC 9562's).
CREATE FUNCTION uuid_generate_v7() RETURNS uuid
    LANGUAGE sql VOLATILE PARALLEL SAFE
AS $$
    SELECT encode(
        set_bit(
            set_bit(
                overlay(
                    uuid_send(gen_random_uuid())
                    PLACING substring(
                        int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                        FROM 3)
                    FROM 1 FOR 6),
                52, 1),
            53, 1),
        'hex')::uuid
$$;

CREATE TABLE users (
    id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    external_ref text UNIQUE CHECK (char_length(external_ref) BETWEEN 1 AND 256),
    created_at timestamptz NOT NULL DEFAULT now(),
    deleted_at timestamptz
);

CREATE TABLE session_coordination (
    session_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    session_type text NOT NULL DEFAULT 'multi_agent_chat'
        CHECK (session_type IN ('multi_agent_chat', 'planning_session', 'consultation', 'education')),
    status text NOT NULL DEFAULT 'active'
        CHECK (status IN ('active', 'idle', 'completed', 'expired', 'escalated')),
    priority text NOT NULL DEFAULT 'normal'
        CHECK (priority IN ('low', 'normal', 'high', 'urgent')),
    current_agent text CHECK (char_length(current_agent) BETWEEN 1 AND 100),
    agent_sequence jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(agent_sequence) = 'array'),
    session_state jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(session_state) = 'object'),
    coordination_metadata jsonb NOT NULL DEFAULT '{}'
        CHECK (jsonb_typeof(coordination_metadata) = 'object'),
    progress_percentage integer NOT NULL DEFAULT 0
        CHECK (progress_percentage BETWEEN 0 AND 100),
    preserve boolean NOT NULL DEFAULT false,
    version bigint NOT NULL DEFAULT 1 CHECK (version >= 1),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    last_activity_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL DEFAULT now() + interval '24 hours',
    completed_at timestamptz
);

-- A user's sessions, newest first, with and without a status filter (keyset pagination).
CREATE INDEX session_coordination_user_created_idx
    ON session_coordination (user_id, created_at DESC, session_id DESC);
CREATE INDEX session_coordination_user_status_created_idx
    ON session_coordination (user_id, status, created_at DESC, session_id DESC);
-- Expiry sweeps only ever look at sessions that cleanup may touch.
CREATE INDEX session_coordination_expiry_idx
    ON session_coordination (expires_at) WHERE NOT preserve;
-- Inactivity sweeps only ever look at active sessions.
CREATE INDEX session_coordination_activity_idx
    ON session_coordination (last_activity_at) WHERE status = 'active';

-- One row per committed change of a session: the audit trail and the source of rollbacks.
CREATE TABLE session_state_versions (
    session_id uuid NOT NULL REFERENCES session_coordination (session_id) ON DELETE CASCADE,
    version bigint NOT NULL CHECK (version >= 1),
    session_state jsonb NOT NULL,
    agent_sequence jsonb NOT NULL,
    coordination_metadata jsonb NOT NULL,
    current_agent text,
    progress_percentage integer NOT NULL,
    status text NOT NULL,
    priority text NOT NULL,
    changed_by text NOT NULL,
    change_reason text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, version)
);

CREATE TABLE agents (
    agent_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    name text NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z][A-Za-z0-9_.-]{0,99}$'),
    -- SHA-256 of the agent's key; the key itself is shown once and never stored.
    api_key_hash bytea NOT NULL UNIQUE CHECK (octet_length(api_key_hash) = 32),
    roles text[] NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT now(),
    disabled_at timestamptz
);
"""

DOWNGRADE = """
DROP TABLE agents;
DROP TABLE session_state_versions;
DROP TABLE session_coordination;
DROP TABLE users;
DROP FUNCTION uuid_generate_v7();
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
