"""``RulesService``: the intent rules and fallback wording the coordinator reads, cached for
``rules_cache_seconds``. A change takes effect at once on the replica (the service) that
made it; another replica sees it when its cache window ends."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.clock import SystemClock
from app.coordination.rules import RulesService
from app.coordination.schemas import IntentTypeWrite, ModifierWrite
from app.db.pool import Database
from app.errors import NotFound
from app.settings import DatabaseSettings

AN_HOUR = 3600.0


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    db = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await db.open()
    try:
        yield db
    finally:
        await db.close()


async def weight(rules: RulesService, database: Database, intent: str) -> int:
    async with database.connection() as conn:
        current = await rules.current(conn, {})
    return current.intents.base_weights[intent]


async def test_a_change_is_seen_at_once_here_and_after_the_cache_window_elsewhere(
    database: Database,
) -> None:
    here = RulesService(database, SystemClock(), AN_HOUR)
    elsewhere = RulesService(database, SystemClock(), AN_HOUR)
    uncached = RulesService(database, SystemClock(), 0)
    assert await weight(here, database, "request_plan") == 50
    assert await weight(elsewhere, database, "request_plan") == 50

    changed = await here.put_intent("request_plan", IntentTypeWrite(base_weight=90))
    assert changed.base_weight == 90
    assert await weight(here, database, "request_plan") == 90
    assert await weight(elsewhere, database, "request_plan") == 50  # within its window
    assert await weight(uncached, database, "request_plan") == 90

    await here.put_modifier("user_expressed_urgency", ModifierWrite(points=5, cues=[" ASAP "]))
    async with database.connection() as conn:
        current = await here.current(conn, {})
    assert current.intents.modifiers["user_expressed_urgency"] == 5
    assert current.intents.cues["user_expressed_urgency"] == ["asap"]


async def test_the_serving_agents_are_the_ones_given_each_time(database: Database) -> None:
    rules = RulesService(database, SystemClock(), AN_HOUR)
    async with database.connection() as conn:
        first = await rules.current(conn, {"request_plan": "Make_Plan_Agent"})
        again = await rules.current(conn, {"request_plan": "Make_Plan_Agent"})
        moved = await rules.current(conn, {"request_plan": "Other_Agent"})
    assert again is first
    assert moved.intents.intent_agents == {"request_plan": "Other_Agent"}
    assert moved.fallbacks is first.fallbacks  # not read again: only the agents changed


async def test_an_unknown_modifier_is_not_created(database: Database) -> None:
    rules = RulesService(database, SystemClock(), AN_HOUR)
    with pytest.raises(NotFound):
        await rules.put_modifier("no_such_modifier", ModifierWrite(points=1))
    assert "no_such_modifier" not in {m.name for m in await rules.list_modifiers()}


async def test_a_template_of_the_wrong_shape_is_left_out_not_fatal(
    database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """An operator's typo in one template costs that strategy its wording (it answers with
    the plain apology), not every message its coordination."""
    async with database.connection() as conn:
        await conn.execute(
            "UPDATE fallback_strategies SET template = '{\"message\": 5}'"
            " WHERE name = 'generic_financial_advice_disclaimer'"
        )
        fallbacks = (await RulesService(database, SystemClock(), 0).current(conn, {})).fallbacks
    assert "generic_financial_advice_disclaimer" not in fallbacks.templates
    assert "not valid" in caplog.text
    budget = fallbacks.templates["basic_budget_template"]
    assert budget.split == {"needs": 50.0, "wants": 30.0, "savings": 20.0}
    assert budget.income_keys == ["monthly_income", "net_monthly_income", "income"]
