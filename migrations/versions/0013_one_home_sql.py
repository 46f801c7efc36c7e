"""Shared rules in the database: pieces several statements spelled out, now one function each.

memory_live and memory_readable hold the liveness and access check of every memory
statement (before, each spelled out both conditions); memory_list_rows is what a memory
list shows, which four list statements spelled out each. agent_shown is an agent as every
agent statement returns it (six spelled out its columns and the `enabled` rule).
session_version is the version row of a session as it now is (three statements spelled
out its column mapping).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION memory_live(m memories, at timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT m.expires_at IS NULL OR m.expires_at > at
$$;

CREATE FUNCTION memory_readable(m memories, at timestamptz, caller text, readable text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT memory_live(m, at) AND memory_visible(m.agent_name, m.access_level, caller, readable)
$$;

CREATE FUNCTION memory_list_rows(
    of_session uuid, of_user uuid, of_agent text, containing jsonb, of_type text,
    of_category text, since timestamptz, before_at timestamptz, before_id uuid,
    at timestamptz, is_admin boolean, roles text[], caller text)
    RETURNS SETOF memories
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT m.* FROM memories m
    WHERE (of_session IS NULL OR m.session_id = of_session)
      AND (of_user IS NULL OR m.user_id = of_user)
      AND (of_agent IS NULL OR m.agent_name = of_agent)
      AND (containing IS NULL OR m.content @> containing)
      AND (of_type IS NULL OR m.memory_type = of_type)
      AND (of_category IS NULL OR m.category = of_category)
      AND (since IS NULL OR m.created_at >= since)
      AND (m.created_at, m.memory_id) < (before_at, before_id)
      AND memory_readable(m, at, caller, ARRAY(SELECT memory_readable_levels(is_admin, roles)))
$$;

CREATE FUNCTION agent_shown(a agents)
    RETURNS TABLE (
        agent_id uuid, name text, roles text[], created_at timestamptz,
        disabled_at timestamptz, description text, url text, timeout_ms integer,
        retry_attempts integer, fallback_strategy text, intents text[], skills jsonb,
        enabled boolean, fail_max integer, reset_timeout_ms integer, has_key boolean,
        updated_at timestamptz)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT a.agent_id, a.name, a.roles, a.created_at, a.disabled_at, a.description, a.url,
           a.timeout_ms, a.retry_attempts, a.fallback_strategy, a.intents, a.skills,
           a.enabled AND a.disabled_at IS NULL, a.fail_max, a.reset_timeout_ms,
           a.api_key_hash IS NOT NULL, a.updated_at
$$;

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

DOWNGRADE = r"""
DROP FUNCTION session_version(session_coordination, text, text, timestamptz);
DROP FUNCTION agent_shown(agents);
DROP FUNCTION memory_list_rows(uuid, uuid, text, jsonb, text, text, timestamptz, timestamptz,
                               uuid, timestamptz, boolean, text[], text);
DROP FUNCTION memory_readable(memories, timestamptz, text, text[]);
DROP FUNCTION memory_live(memories, timestamptz);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
