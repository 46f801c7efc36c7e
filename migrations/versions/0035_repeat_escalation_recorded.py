"""A failure that asks for a person while the session already waits for one is recorded.

``session_escalate()`` wrote nothing when the session was already escalated, so a task that
was running when the session escalated and then failed, or a dead letter that came later,
left no trace in the session's history: the person resolving saw only the first failure.
Now it records the decision (outcome 'escalated', on the version the session is at: no new
version) and the event session.escalated with ``already_escalated: true`` (false on the
escalation itself). The resolution still names the escalation it ends: the first one after
the last resolution (latest_escalation in coordination.sql).

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-25
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

UPGRADE = r"""
CREATE OR REPLACE FUNCTION session_escalate(
    sid uuid, actor text, why text, context jsonb, decided jsonb, at timestamptz,
    trace text, task uuid)
    RETURNS uuid
    LANGUAGE sql VOLATILE
AS $$
    WITH escalated AS (
        UPDATE session_coordination c
        SET status = 'escalated', version = c.version + 1, updated_at = at
        WHERE c.session_id = sid AND c.status IN ('active', 'idle')
        RETURNING c.*
    ), already AS (
        -- The statement's snapshot: the row as it was before the UPDATE above, which
        -- takes only an active or idle one, so at most one of the two holds a row.
        SELECT c.session_id, c.version FROM session_coordination c
        WHERE c.session_id = sid AND c.status = 'escalated'
    ), recorded AS (
        INSERT INTO session_state_versions
        SELECT v.* FROM escalated e, session_version(e, actor, 'escalated: ' || why, at) v
    ), decision AS (
        INSERT INTO coordination_decisions (
            session_id, session_version, message, classifier, intents, outcome, degraded,
            response, execution_time_ms, created_by, created_at, trace_id, task_id, next_step)
        SELECT e.session_id, e.version, why, 'next_step', '[]', 'escalated', false,
               jsonb_build_object('text', why, 'output_data', context,
                                  'next_agent_suggestions', '[]'::jsonb),
               0, actor, at, trace, task, decided
        FROM (SELECT session_id, version FROM escalated
              UNION ALL SELECT session_id, version FROM already) e
        RETURNING decision_id, session_version
    ), told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT 'session.escalated',
               jsonb_build_object('session_id', sid, 'session_version', d.session_version,
                                  'decision_id', d.decision_id, 'reason', why,
                                  'escalated_by', actor, 'task_id', task, 'context', context,
                                  'already_escalated', EXISTS (SELECT 1 FROM already)),
               at
        FROM decision d
    )
    SELECT decision_id FROM decision
$$;
"""

DOWNGRADE = r"""
CREATE OR REPLACE FUNCTION session_escalate(
    sid uuid, actor text, why text, context jsonb, decided jsonb, at timestamptz,
    trace text, task uuid)
    RETURNS uuid
    LANGUAGE sql VOLATILE
AS $$
    WITH escalated AS (
        UPDATE session_coordination c
        SET status = 'escalated', version = c.version + 1, updated_at = at
        WHERE c.session_id = sid AND c.status IN ('active', 'idle')
        RETURNING c.*
    ), recorded AS (
        INSERT INTO session_state_versions
        SELECT v.* FROM escalated e, session_version(e, actor, 'escalated: ' || why, at) v
    ), decision AS (
        INSERT INTO coordination_decisions (
            session_id, session_version, message, classifier, intents, outcome, degraded,
            response, execution_time_ms, created_by, created_at, trace_id, task_id, next_step)
        SELECT e.session_id, e.version, why, 'next_step', '[]', 'escalated', false,
               jsonb_build_object('text', why, 'output_data', context,
                                  'next_agent_suggestions', '[]'::jsonb),
               0, actor, at, trace, task, decided
        FROM escalated e
        RETURNING decision_id, session_version
    ), told AS (
        INSERT INTO outbox_events (event_type, payload, created_at)
        SELECT 'session.escalated',
               jsonb_build_object('session_id', sid, 'session_version', d.session_version,
                                  'decision_id', d.decision_id, 'reason', why,
                                  'escalated_by', actor, 'task_id', task, 'context', context),
               at
        FROM decision d
    )
    SELECT decision_id FROM decision
$$;
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
