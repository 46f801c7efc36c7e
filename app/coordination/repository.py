"""Coordination rows in and out of PostgreSQL."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from app.coordination.fallbacks import FallbackData, FallbackTemplate, Lesson
from app.coordination.next_step import NextStepRule, PriorCounts
from app.coordination.schemas import (
    Decision,
    IntentModifier,
    IntentType,
    PublishedBreaker,
    RuleData,
)
from app.db.pool import Connection
from app.db.queries import QUERIES

Q = QUERIES.coordination
logger = logging.getLogger("switchboard.coordination")


async def intent_rule_data(conn: Connection) -> RuleData:
    """Weights, keywords, modifier points and cues."""
    row = await conn.fetchrow(Q.intent_rules)
    if row is None:  # a SELECT without FROM always returns one row
        raise RuntimeError("intent_rules returned no row")
    return msgspec.convert(dict(row), RuleData)


async def list_intent_types(conn: Connection) -> list[IntentType]:
    """Intent types with their keywords, heaviest first."""
    return [msgspec.convert(dict(row), IntentType) for row in await conn.fetch(Q.list_intent_types)]


async def put_intent_type(
    conn: Connection,
    name: str,
    base_weight: int,
    description: str,
    keywords: list[str],
    now: datetime,
) -> None:
    """Create or change an intent type and replace its keywords."""
    await conn.execute(Q.upsert_intent_type, name, base_weight, description, now)
    await conn.execute(Q.delete_intent_keywords, name)
    await conn.execute(Q.insert_intent_keywords, name, keywords)


async def list_intent_modifiers(conn: Connection) -> list[IntentModifier]:
    """Context modifiers with their cues."""
    return [
        msgspec.convert(dict(row), IntentModifier)
        for row in await conn.fetch(Q.list_intent_modifiers)
    ]


async def put_intent_modifier(
    conn: Connection, name: str, points: int, description: str, cues: list[str]
) -> bool:
    """Change a modifier and replace its cues; False if there is no such modifier."""
    if await conn.fetchval(Q.update_intent_modifier, name, points, description) is None:
        return False
    await conn.execute(Q.delete_modifier_cues, name)
    await conn.execute(Q.insert_modifier_cues, name, cues)
    return True


async def fallback_data(conn: Connection) -> FallbackData:
    """Every fallback strategy's template and every stored lesson."""
    templates: dict[str, FallbackTemplate] = {}
    for row in await conn.fetch(Q.fallback_templates):
        try:
            templates[row["name"]] = msgspec.convert(row["template"], FallbackTemplate)
        except msgspec.ValidationError:
            # Its strategy answers with the plain apology, as for a missing template.
            logger.warning(
                "fallback template %s is not valid; not used", row["name"], exc_info=True
            )
    lessons = tuple(
        Lesson(
            topic=row["topic"],
            title=row["title"],
            keywords=tuple(row["keywords"]),
            body=row["body"],
        )
        for row in await conn.fetch(Q.educational_content)
    )
    return FallbackData(templates=templates, lessons=lessons)


async def list_breakers(conn: Connection) -> list[PublishedBreaker]:
    """Every published breaker state."""
    return [
        msgspec.convert(dict(row), PublishedBreaker) for row in await conn.fetch(Q.list_breakers)
    ]


async def save_breaker(
    conn: Connection,
    agent_name: str,
    state: str,
    failure_count: int,
    opened_at: datetime | None,
    replica: str,
    now: datetime,
) -> int:
    """Store and NOTIFY a breaker's state; returns the new version."""
    row = await conn.fetchrow(
        Q.save_breaker, agent_name, state, failure_count, opened_at, replica, now
    )
    return 0 if row is None else int(row["version"])


async def list_decisions(
    conn: Connection, session_id: UUID, before: tuple[datetime, UUID], limit: int
) -> list[Decision]:
    """A page of a session's decisions, newest first."""
    rows = await conn.fetch(Q.list_decisions, session_id, before[0], before[1], limit)
    return [msgspec.convert(dict(row), Decision) for row in rows]


async def next_step_rules(conn: Connection) -> list[NextStepRule]:
    """The next-step rules, by position."""
    return [msgspec.convert(dict(row), NextStepRule) for row in await conn.fetch(Q.next_step_rules)]


async def next_step_counters(
    conn: Connection, session_id: UUID, intent: str | None, agent: str | None, now: datetime
) -> PriorCounts:
    """The session's counters before this event, for the step (intent, agent)."""
    row = await conn.fetchrow(Q.next_step_counters, session_id, intent, agent, now)
    if row is None:  # a SELECT without FROM always returns one row
        raise RuntimeError("next_step_counters returned no row")
    return msgspec.convert(dict(row), PriorCounts)


async def escalate_session(
    conn: Connection,
    session_id: UUID,
    actor: str,
    why: str,
    context: dict[str, Any],
    next_step: dict[str, Any],
    now: datetime,
    trace_id: str | None,
    task_id: UUID | None,
    counted_from: datetime | None,
) -> UUID | None:
    """session_escalate(): the escalation's decision id, or None when the session was not
    active or idle, or was resolved after ``counted_from`` (nothing written)."""
    decided: UUID | None = await conn.fetchval(
        Q.escalate_session,
        session_id,
        actor,
        why,
        context,
        next_step,
        now,
        trace_id,
        task_id,
        counted_from,
    )
    return decided


class Escalation(msgspec.Struct, frozen=True):
    """The decision that escalated a session last."""

    decision_id: UUID
    message: str
    context: dict[str, Any] | None
    created_at: datetime


async def latest_escalation(conn: Connection, session_id: UUID) -> Escalation | None:
    """The session's latest escalation decision, if any."""
    row = await conn.fetchrow(Q.latest_escalation, session_id)
    return None if row is None else msgspec.convert(dict(row), Escalation)


async def resolve_session(
    conn: Connection,
    session_id: UUID,
    actor: str,
    note: str,
    now: datetime,
    escalation: dict[str, Any],
    trace_id: str | None,
    keep_alive: timedelta,
) -> tuple[int, UUID] | None:
    """Resolve an escalated session (resolve_session); its new version and the resolution's
    decision id, or None when it is not escalated."""
    row = await conn.fetchrow(
        Q.resolve_session, session_id, actor, note, now, escalation, trace_id, keep_alive
    )
    return None if row is None else (int(row["version"]), row["decision_id"])


async def wake_workers(conn: Connection) -> None:
    """NOTIFY the task workers (held tasks may run)."""
    await conn.execute(QUERIES.tasks.wake_workers)
