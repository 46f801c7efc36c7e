"""A session completed while escalated cancels the tasks it held.

An escalated session holds its queued tasks until a person resolves it. A person may
instead complete it: the held tasks then used to run against a completed session (their
answers could not apply). Now a trigger cancels them in the completing statement.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

UPGRADE = r"""-- A session completed while escalated (a person closed it instead of resolving it): the
-- tasks it held will never have a session to answer, so they are canceled in the same
-- statement (the transition trigger records each and tells task.transition). Tasks already
-- running when the session was escalated, and a dead letter's requeue, are left alone.
CREATE FUNCTION session_completed_cancels_held() RETURNS trigger
    LANGUAGE plpgsql
AS $$
BEGIN
    UPDATE agent_tasks
    SET status = 'canceled', finished_at = NEW.updated_at, status_actor = 'switchboard',
        status_reason = 'its session was completed while escalated'
    WHERE session_id = NEW.session_id AND status = 'submitted' AND lease_owner IS NULL
      AND requeue_of IS NULL;
    RETURN NULL;
END
$$;

CREATE TRIGGER session_coordination_completed_escalated
    AFTER UPDATE OF status ON session_coordination
    FOR EACH ROW
    WHEN (OLD.status = 'escalated' AND NEW.status = 'completed')
    EXECUTE FUNCTION session_completed_cancels_held();
"""

DOWNGRADE = r"""
DROP TRIGGER session_coordination_completed_escalated ON session_coordination;
DROP FUNCTION session_completed_cancels_held();
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
