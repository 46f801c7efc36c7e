"""The idempotency key's takeover rule and a memory write's checks are SQL functions.

``claim_idempotency_key`` (webhooks.sql) and ``insert_checked_memory_claiming_key``
(memories.sql) each spelled out the ON CONFLICT rule that decides whether a request takes
over a stored key; exactly-once needs the two identical, and only comments kept them so.
Both now call ``idempotency_key_claimable()``. Likewise ``insert_checked_memory`` and the
claiming statement's ``planned`` CTE spelled out the same category join and checks; both
now select from ``memory_write_category()``. The planner inlines both functions (a scalar
SQL expression; a SETOF STABLE single SELECT), so the statements' plans, custom and
generic, stay as they were.

Revision ID: 0038
Revises: 0037
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION idempotency_key_claimable(
    k idempotency_keys, endpoint text, request_hash bytea, at timestamptz,
    renewed_before timestamptz) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT k.expires_at <= at
        OR (k.status = 'in_progress'
            AND k.endpoint = endpoint
            AND k.request_hash = request_hash
            AND (k.lease_expires_at <= at
                 OR (k.lease_owner IS NOT NULL
                     AND k.lease_renewed_at <= renewed_before
                     AND NOT replica_is_present(k.lease_owner))))
$$;

CREATE FUNCTION memory_write_category(
    types jsonb, levels text[], users uuid[], session_owners jsonb,
    of_user uuid, of_session uuid, memory_type text, category text, access_level text)
    RETURNS SETOF memory_categories
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT c.*
    FROM memory_categories c
    WHERE c.name = coalesce(nullif(category, ''), types ->> memory_type, 'session_data')
      AND types ? memory_type
      AND (access_level IS NULL OR access_level = ANY(levels))
      AND cardinality(users) = 1
      AND (of_session IS NULL OR session_owners ->> of_session::text = of_user::text)
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION memory_write_category(jsonb, text[], uuid[], jsonb, uuid, uuid, text, text, text);
DROP FUNCTION idempotency_key_claimable(idempotency_keys, text, bytea, timestamptz, timestamptz);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
