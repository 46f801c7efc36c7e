"""Erasure: the predicate that finds a user's ids in free-form JSON, and the erasure record.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- Whether a JSON document names one of the ids anywhere (a key, a value, or inside a
-- string), spelled the ways PostgreSQL and Python read a uuid: any case, with or without
-- the hyphens, in braces or after urn:uuid:. The one test erasure uses for copies of a
-- user's ids in free-form JSON: stored webhook responses, event payloads, audit queries.
CREATE FUNCTION jsonb_mentions_any(doc jsonb, ids uuid[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$
    SELECT EXISTS (
        SELECT 1
        FROM regexp_matches(
                doc::text,
                '[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}',
                'gi') AS found (match)
        WHERE found.match[1]::uuid = ANY (ids))
$$;

-- The JSON a text holds, or NULL if it holds none (PostgreSQL 15 has no pg_input_is_valid).
-- Audit rows keep a list's contains filter as the text the caller sent.
CREATE FUNCTION jsonb_or_null(value text) RETURNS jsonb
    LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
AS $$
BEGIN
    RETURN value::jsonb;
EXCEPTION WHEN invalid_text_representation OR untranslatable_character THEN
    RETURN NULL;
END
$$;

-- One row per erasure (a user, or only their memories): proof that it happened, who asked
-- and what it removed, without the id. user_id_sha256 is SHA-256 of the id as text
-- (`printf %s <id> | sha256sum`): whoever holds an id can find its erasure, the row alone
-- gives no id back (a UUIDv7 has 74 random bits). Audit rows redacted by an erasure name
-- its erasure_id.
CREATE TABLE user_erasures (
    erasure_id uuid PRIMARY KEY DEFAULT uuid_generate_v7(),
    user_id_sha256 bytea NOT NULL CHECK (octet_length(user_id_sha256) = 32),
    scope text NOT NULL CHECK (scope IN ('user', 'memories')),
    erased_by text NOT NULL,
    erased_at timestamptz NOT NULL,
    -- {"deleted": {table: rows}, "redacted": {table: rows}}
    counts jsonb NOT NULL CHECK (jsonb_typeof(counts) = 'object')
);

CREATE INDEX user_erasures_user_idx ON user_erasures (user_id_sha256);
"""

DOWNGRADE = r"""
DROP TABLE user_erasures;
DROP FUNCTION jsonb_or_null(text);
DROP FUNCTION jsonb_mentions_any(jsonb, uuid[]);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
