"""Memory access: one SQL function names the levels a caller may read by role.

Every memory statement used to spell the level check out; it now calls this function
(inlined by the planner) beside the owner check that lets a writer read its own memories.

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0009"
down_revision = "0007"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION memory_readable_levels(is_admin boolean, roles text[]) RETURNS SETOF text
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT level FROM memory_access_levels
    WHERE is_admin OR required_role IS NULL OR required_role = ANY(roles)
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION memory_readable_levels(boolean, text[]);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
