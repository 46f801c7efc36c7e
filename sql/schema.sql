-- Switchboard canonical schema: what `alembic upgrade head` produces on an empty database.
-- tests/migrations checks that the two stay identical; change both in the same commit.

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

-- ---------------------------------------------------------------------------------------
-- Memories (revision 0002)

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
