"""A client's escalation (a PATCH of the status) is recorded and announced.

session_escalate() records why a session was escalated (a decision) and tells
session.escalated. A client could also escalate with a PATCH of the status: that wrote a
version only, so nobody subscribed heard that a person was wanted, and the log had no
decision for the resolution to name. A row trigger on the version does the same recording
for any version that marks the session escalated without session_escalate().

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

UPGRADE = r"""
-- A version that marks the session escalated without session_escalate() (a client's PATCH
-- of the status: an agent or a workflow calling a person) is recorded and announced the
-- same way: a decision (outcome 'escalated', classifier 'client', who set it as its
-- message) and session.escalated, in the writing statement. A version written while
-- the session was already escalated, one session_escalate() wrote (its decision names
-- the version), and an old version a restore copies back add nothing.
CREATE FUNCTION session_version_escalated() RETURNS trigger
    LANGUAGE plpgsql
AS $$
DECLARE
    decided uuid;
    why text := format('%s set the status to escalated (%s)', NEW.changed_by,
                       NEW.change_reason);
BEGIN
    -- Only news: the version the session is at now (a restore copies old versions back,
    -- whose escalations were told, and resolved, long ago).
    IF NOT EXISTS (SELECT 1 FROM session_coordination c
                   WHERE c.session_id = NEW.session_id AND c.version = NEW.version)
       OR EXISTS (SELECT 1 FROM session_state_versions p
               WHERE p.session_id = NEW.session_id AND p.version = NEW.version - 1
                 AND p.status = 'escalated')
       OR EXISTS (SELECT 1 FROM coordination_decisions d
                  WHERE d.session_id = NEW.session_id AND d.session_version = NEW.version
                    AND d.outcome = 'escalated') THEN
        RETURN NULL;
    END IF;
    INSERT INTO coordination_decisions (
        session_id, session_version, message, classifier, intents, outcome, degraded,
        response, execution_time_ms, created_by, created_at, trace_id)
    VALUES (NEW.session_id, NEW.version, why, 'client', '[]', 'escalated', false,
            jsonb_build_object('text', why, 'output_data', '{}'::jsonb,
                               'next_agent_suggestions', '[]'::jsonb),
            0, NEW.changed_by, NEW.created_at, substr(current_traceparent(), 4, 32))
    RETURNING decision_id INTO decided;
    INSERT INTO outbox_events (event_type, payload, created_at)
    VALUES ('session.escalated',
            jsonb_build_object('session_id', NEW.session_id, 'session_version', NEW.version,
                               'decision_id', decided, 'reason', why,
                               'escalated_by', NEW.changed_by, 'task_id', NULL,
                               'context', '{}'::jsonb),
            NEW.created_at);
    RETURN NULL;
END
$$;

CREATE TRIGGER session_state_versions_escalated
    AFTER INSERT ON session_state_versions
    FOR EACH ROW
    WHEN (NEW.status = 'escalated')
    EXECUTE FUNCTION session_version_escalated();
"""

DOWNGRADE = r"""
DROP TRIGGER session_state_versions_escalated ON session_state_versions;
DROP FUNCTION session_version_escalated();
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
