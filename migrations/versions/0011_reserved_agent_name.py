"""Agents: the name "admin" (in any case) is reserved for the admin key.

The admin key writes memories as "admin"; owner access compares names, so an agent
registered as "admin" would read what the admin key wrote.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE agents ADD CONSTRAINT agents_name_not_admin CHECK (lower(name) <> 'admin');
"""

DOWNGRADE = r"""
ALTER TABLE agents DROP CONSTRAINT agents_name_not_admin;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
