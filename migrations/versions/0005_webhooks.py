"""Webhooks: idempotency keys for n8n's retries.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-22
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- Responses to webhook calls that carried an Idempotency-Key, replayed for repeats.
CREATE TABLE idempotency_keys (
    -- The key's owner: keys are scoped per caller, so two callers never collide.
    principal text NOT NULL,
    key text NOT NULL CHECK (char_length(key) BETWEEN 1 AND 255),
    endpoint text NOT NULL,
    request_hash bytea NOT NULL,
    status text NOT NULL CHECK (status IN ('in_progress', 'completed')),
    response_status integer,
    response_body jsonb,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (principal, key)
);

CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);
"""

DOWNGRADE = """
DROP TABLE idempotency_keys;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
