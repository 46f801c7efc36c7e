"""What a memory write is checked against is one SQL function, memory_write_reference().

write_reference (a batch of writes: the reference data read once) and
insert_checked_memory (one write: the checks in the statement that inserts it) spelled out
the same five subqueries; both now select from the function, which the planner inlines
(SETOF, STABLE, one SELECT), so the plans and the round trips stay as they were.

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE FUNCTION memory_write_reference(of_users uuid[], of_sessions uuid[])
    RETURNS TABLE (
        types jsonb, categories jsonb, levels text[], users uuid[], session_owners jsonb)
    LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT
        (SELECT coalesce(jsonb_object_agg(t.name, t.default_category), '{}')
         FROM memory_types t),
        (SELECT coalesce(jsonb_object_agg(c.name, c.default_access_level), '{}')
         FROM memory_categories c),
        (SELECT coalesce(array_agg(l.level ORDER BY l.level), '{}')
         FROM memory_access_levels l),
        (SELECT coalesce(array_agg(u.id), '{}') FROM users u WHERE u.id = ANY(of_users)),
        (SELECT coalesce(jsonb_object_agg(s.session_id, s.user_id), '{}')
         FROM session_coordination s WHERE s.session_id = ANY(of_sessions))
$$;
"""

DOWNGRADE = r"""
DROP FUNCTION memory_write_reference(uuid[], uuid[]);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
