"""Coordination: agent availability ranks intents; direct routing says when it cannot route.

A context modifier may now take points away (agent_unavailable: -25, applied to an intent
whose agent's breaker is refusing calls), and the direct_agent_routing fallback gets the
words for a message it has no specialist for, instead of claiming to pass it on.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

from migrations.sqlscript import run_sql

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

UPGRADE = r"""
ALTER TABLE intent_modifiers DROP CONSTRAINT intent_modifiers_points_check;
ALTER TABLE intent_modifiers ADD CONSTRAINT intent_modifiers_points_check
    CHECK (points BETWEEN -100 AND 100);
INSERT INTO intent_modifiers (name, points, description) VALUES
    ('agent_unavailable', -25, 'the agent serving the intent is refusing calls (breaker open)');
UPDATE fallback_strategies
SET template = template || jsonb_build_object('unrouted',
    'Our coordinator is not available right now, and I could not tell which specialist your '
    || 'message is for. Tell me what you need: a budget or plan, a change to your plan, '
    || 'advice, or an explanation of a money topic.')
WHERE name = 'direct_agent_routing';
"""

DOWNGRADE = r"""
UPDATE fallback_strategies SET template = template - 'unrouted'
WHERE name = 'direct_agent_routing';
DELETE FROM intent_modifiers WHERE name = 'agent_unavailable';
UPDATE intent_modifiers SET points = 0 WHERE points < 0;
ALTER TABLE intent_modifiers DROP CONSTRAINT intent_modifiers_points_check;
ALTER TABLE intent_modifiers ADD CONSTRAINT intent_modifiers_points_check
    CHECK (points BETWEEN 0 AND 100);
"""


def upgrade() -> None:
    run_sql(UPGRADE)


def downgrade() -> None:
    run_sql(DOWNGRADE)
