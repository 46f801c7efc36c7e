"""The intent rules, the fallbacks' wording and the next-step rules: reference data that
the coordinator reads on every message (cached briefly) and the admin changes
(``/v1/intents``, ``/v1/intent-modifiers``; the next-step rules in SQL, shown at
``/v1/next-step-rules``). A change takes effect at once on the replica that made it, and
within ``rules_cache_seconds`` on the others."""

from __future__ import annotations

import time
from dataclasses import dataclass

from app.clock import Clock
from app.coordination import repository as repo
from app.coordination.fallbacks import FallbackData
from app.coordination.intents import IntentRules
from app.coordination.next_step import NextStepRule
from app.coordination.schemas import (
    IntentModifier,
    IntentType,
    IntentTypeWrite,
    ModifierWrite,
    RuleData,
)
from app.db.pool import Connection, Database
from app.errors import NotFound


@dataclass(frozen=True, slots=True)
class Rules:
    """What one message is coordinated with: the intent engine's rules (with the agents
    serving each intent) and the wording its fallbacks answer with."""

    intents: IntentRules
    fallbacks: FallbackData
    # What happens after each agent result and failure (app/coordination/next_step.py).
    next_steps: tuple[NextStepRule, ...] = ()


def _phrases(phrases: list[str]) -> list[str]:
    """Keywords and cues as they are matched: lower case, single spaces, no blanks, sorted."""
    return sorted({" ".join(p.lower().split()) for p in phrases} - {""})


class RulesService:
    """Reads the intent rules and fallback wording for the coordinator; changes the rules."""

    def __init__(self, database: Database, clock: Clock, cache_seconds: float) -> None:
        self._db = database
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._rules: Rules | None = None
        self._rule_data = RuleData(weights={}, keywords={}, modifiers={}, cues={})
        self._fallback_data = FallbackData(templates={}, lessons=())
        self._next_steps: tuple[NextStepRule, ...] = ()
        self._loaded_at = 0.0

    def kept(self, serving: dict[str, str]) -> Rules | None:
        """The rules as ``current`` would give them, when that needs no read; else None."""
        rules = self._rules
        if rules is None or time.monotonic() - self._loaded_at >= self._cache_seconds:
            return None
        if rules.intents.intent_agents != serving:
            rules = Rules(self._rule_data.rules(serving), self._fallback_data, self._next_steps)
            self._rules = rules
        return rules

    async def current(self, conn: Connection, serving: dict[str, str]) -> Rules:
        """The rules, re-read on ``conn`` when older than the cache window (or changed here),
        with ``serving`` (intent -> agent) as the agents are now."""
        fresh = time.monotonic() - self._loaded_at < self._cache_seconds
        if self._rules is None or not fresh:
            self._rule_data = await repo.intent_rule_data(conn)
            self._fallback_data = await repo.fallback_data(conn)
            self._next_steps = tuple(await repo.next_step_rules(conn))
            self._loaded_at = time.monotonic()
        if self._rules is None or not fresh or self._rules.intents.intent_agents != serving:
            self._rules = Rules(
                self._rule_data.rules(serving), self._fallback_data, self._next_steps
            )
        return self._rules

    async def next_steps(self, conn: Connection) -> tuple[NextStepRule, ...]:
        """The next-step rules alone (a late task answer's decision), cached like the rest."""
        if self._rules is None or time.monotonic() - self._loaded_at >= self._cache_seconds:
            self._next_steps = tuple(await repo.next_step_rules(conn))
        return self._next_steps

    async def list_next_steps(self) -> list[NextStepRule]:
        """The next-step rules, by position."""
        async with self._db.connection() as conn:
            return await repo.next_step_rules(conn)

    async def list_intents(self) -> list[IntentType]:
        """Intent types, weights and keywords."""
        async with self._db.connection() as conn:
            return await repo.list_intent_types(conn)

    async def put_intent(self, name: str, data: IntentTypeWrite) -> IntentType:
        """Create or change an intent type and replace its keywords."""
        async with self._db.transaction() as conn:
            await repo.put_intent_type(
                conn,
                name,
                data.base_weight,
                data.description,
                _phrases(data.keywords),
                self._clock.now(),
            )
            types = await repo.list_intent_types(conn)
        self._rules = None
        return next(t for t in types if t.name == name)

    async def list_modifiers(self) -> list[IntentModifier]:
        """Context modifiers, points and cues."""
        async with self._db.connection() as conn:
            return await repo.list_intent_modifiers(conn)

    async def put_modifier(self, name: str, data: ModifierWrite) -> IntentModifier:
        """Change a modifier's points and replace its cues."""
        async with self._db.transaction() as conn:
            changed = await repo.put_intent_modifier(
                conn, name, data.points, data.description, _phrases(data.cues)
            )
            if not changed:
                raise NotFound(f"No context modifier {name!r}.")
            modifiers = await repo.list_intent_modifiers(conn)
        self._rules = None
        return next(m for m in modifiers if m.name == name)
