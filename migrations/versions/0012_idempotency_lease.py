"""Idempotency keys: an in-progress key is held by a lease and by its replica's presence.

A request in flight when its process was killed used to leave its key in_progress for 12
minutes, and every retry got 409. Now the claim names its replica (lease_owner), carries a
token that fences its completion (lease_token) and a lease renewed while it runs
(lease_expires_at, lease_renewed_at). A retry takes the key over when the owner replica
no longer holds its presence lock (replica_is_present) and has not renewed for a moment,
and within the lease when it holds it but stopped renewing (a frozen or cut-off replica). Rows from before have no owner and keep
their 12 minutes, counted from now; so do claims a replica not yet upgraded still writes.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE idempotency_keys
    ADD COLUMN lease_owner text,
    ADD COLUMN lease_token uuid,
    ADD COLUMN lease_expires_at timestamptz NOT NULL DEFAULT now() + interval '12 minutes',
    ADD COLUMN lease_renewed_at timestamptz;

CREATE FUNCTION replica_lock_space() RETURNS integer
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT 1396855376  -- 'SBRP'; migrations lock with a single bigint key, a separate space
$$;

CREATE FUNCTION replica_is_present(replica text) RETURNS boolean
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory'
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND classid = replica_lock_space()::oid
          AND objid = hashtext(replica)::oid
          AND objsubid = 2
          AND granted
    )
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION replica_is_present(text);
DROP FUNCTION replica_lock_space();
ALTER TABLE idempotency_keys
    DROP COLUMN lease_renewed_at,
    DROP COLUMN lease_expires_at,
    DROP COLUMN lease_token,
    DROP COLUMN lease_owner;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
