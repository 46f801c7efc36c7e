"""Memory access: two SQL functions hold the visibility rule.

memory_readable_levels names the levels a caller may read by role; memory_visible adds
owner access (the agent that created a memory always sees it). Every memory statement used
to spell the level check out; it now calls these.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION memory_readable_levels(is_admin boolean, roles text[]) RETURNS SETOF text
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT level FROM memory_access_levels
    WHERE is_admin OR required_role IS NULL OR required_role = ANY(roles)
$$;

-- Who sees a memory: its owner (the agent that created it) always, anyone else when its
-- level is among those they may read. One expression, so the planner inlines it.
CREATE FUNCTION memory_visible(owner text, level text, caller text, readable text[])
    RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
    SELECT owner = caller OR level = ANY(readable)
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION memory_visible(text, text, text, text[]);
DROP FUNCTION memory_readable_levels(boolean, text[]);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
