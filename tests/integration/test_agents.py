"""The agent registry (admin only)."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx

from tests.integration.helpers import assert_problem


async def test_create_returns_key_once_and_list_never_shows_it(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/agents", json={"name": "Consult_Customer_Agent", "roles": ["authorized", "analytics"]}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["api_key"].startswith("sb_")
    assert body["agent"]["roles"] == ["analytics", "authorized"]
    assert body["agent"]["has_key"] is True
    # a seeded agent keeps its routing settings when it gets its first key
    assert body["agent"]["fallback_strategy"] == "generic_financial_advice_disclaimer"
    assert body["agent"]["timeout_ms"] == 45000

    listed = (await client.get("/v1/agents")).json()
    consult = next(a for a in listed if a["name"] == "Consult_Customer_Agent")
    assert "api_key" not in consult
    one = (await client.get("/v1/agents/Consult_Customer_Agent")).json()
    assert one["agent_id"] == body["agent"]["agent_id"]
    assert "api_key" not in one
    assert "api_key_hash" not in one


async def test_duplicate_name_is_409(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/agents", json={"name": "Dup"})).status_code == 201
    assert_problem(await client.post("/v1/agents", json={"name": "Dup"}), 409)
    # a seeded agent can be keyed once
    assert (await client.post("/v1/agents", json={"name": "Make_Plan_Agent"})).status_code == 201
    assert_problem(await client.post("/v1/agents", json={"name": "Make_Plan_Agent"}), 409)


async def test_keying_a_seeded_agent_keeps_its_roles_unless_new_ones_are_sent(
    client: httpx.AsyncClient,
) -> None:
    seeded = (await client.get("/v1/agents/Make_Plan_Agent")).json()
    assert seeded["roles"] == ["authorized"]
    keyed = await client.post("/v1/agents", json={"name": "Make_Plan_Agent", "timeout_ms": 5000})
    assert keyed.status_code == 201, keyed.text
    assert keyed.json()["agent"]["roles"] == ["authorized"]
    assert (await client.get("/v1/agents/Make_Plan_Agent")).json()["roles"] == ["authorized"]
    null_roles = await client.post("/v1/agents", json={"name": "Add_Changes_Agent", "roles": None})
    assert null_roles.json()["agent"]["roles"] == ["authorized"]

    replaced = await client.post(
        "/v1/agents", json={"name": "Consult_Customer_Agent", "roles": ["analytics"]}
    )
    assert replaced.json()["agent"]["roles"] == ["analytics"]
    emptied = await client.post("/v1/agents", json={"name": "Orchestrator_Agent", "roles": []})
    assert emptied.json()["agent"]["roles"] == []
    fresh = await client.post("/v1/agents", json={"name": "Brand_New_Agent"})
    assert fresh.json()["agent"]["roles"] == []
    # PATCH without roles leaves them alone too.
    patched = await client.patch("/v1/agents/Make_Plan_Agent", json={"timeout_ms": 6000})
    assert patched.json()["roles"] == ["authorized"]


async def test_the_seven_seeded_agents_match_the_seed(client: httpx.AsyncClient) -> None:
    agents = {a["name"]: a for a in (await client.get("/v1/agents")).json()}
    expected = {
        "Intent_Session_Agent": ("keyword_based_intent_detection", 10000, 3),
        "Orchestrator_Agent": ("direct_agent_routing", 15000, 2),
        "Collect_Create_Data_Agent": ("manual_data_entry_prompt", 30000, 3),
        "Consult_Customer_Agent": ("generic_financial_advice_disclaimer", 45000, 2),
        "Make_Plan_Agent": ("basic_budget_template", 60000, 2),
        "Add_Changes_Agent": ("change_confirmation_without_analysis", 20000, 3),
        "Educate_Customer_Agent": ("static_educational_content", 25000, 2),
    }
    for name, (fallback, timeout_ms, retries) in expected.items():
        agent = agents[name]
        assert (agent["fallback_strategy"], agent["timeout_ms"], agent["retry_attempts"]) == (
            fallback,
            timeout_ms,
            retries,
        )
        assert agent["url"] is None
        assert agent["has_key"] is False
        assert agent["skills"]


async def test_settings_can_be_changed_and_are_validated(client: httpx.AsyncClient) -> None:
    response = await client.patch(
        "/v1/agents/Make_Plan_Agent",
        json={"url": "http://127.0.0.1:9/plan", "timeout_ms": 500, "fail_max": 2},
    )
    assert response.status_code == 200, response.text
    agent = response.json()
    assert agent["url"] == "http://127.0.0.1:9/plan"
    assert agent["timeout_ms"] == 500
    assert agent["retry_attempts"] == 2  # untouched
    for bad in (
        {"url": "ftp://x"},
        {"timeout_ms": 10},
        {"fallback_strategy": "pray"},
        {"fail_max": None},
        {"unknown": 1},
    ):
        assert_problem(await client.patch("/v1/agents/Make_Plan_Agent", json=bad), 422)
    assert_problem(await client.patch("/v1/agents/Nobody", json={"timeout_ms": 500}), 404)


async def test_invalid_names_and_roles_are_422(client: httpx.AsyncClient) -> None:
    for payload in (
        {"name": ""},
        {"name": "has space"},
        {"name": "x" * 101},
        {"name": "Ok", "roles": ["Not-A-Role"]},
        {"name": "Ok", "roles": "authorized"},
        {"name": "Ok", "extra": 1},
    ):
        body = assert_problem(await client.post("/v1/agents", json=payload), 422)
        assert body["errors"], payload


async def test_roles_are_those_an_access_level_requires(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """A role means something only if some memory access level requires it: any other is a
    typo (it would grant nothing), refused on create and on change with the known ones."""
    known = ["analytics", "authorized", "coordination_manager"]
    created = assert_problem(
        await client.post("/v1/agents", json={"name": "Typo_Agent", "roles": ["authorised"]}), 422
    )
    assert created["errors"] == [
        {"field": "roles", "message": "unknown role 'authorised'; known: " + ", ".join(known)}
    ]
    assert "authorised" in created["detail"]
    assert created["known_roles"] == known
    assert_problem(await client.get("/v1/agents/Typo_Agent"), 404)  # nothing was registered

    changed = assert_problem(
        await client.patch(
            "/v1/agents/Make_Plan_Agent", json={"roles": ["authorized", "admin", "root"]}
        ),
        422,
    )
    assert changed["errors"][0]["field"] == "roles"
    assert "'admin', 'root'" in changed["errors"][0]["message"]
    assert (await client.get("/v1/agents/Make_Plan_Agent")).json()["roles"] == ["authorized"]

    # Roles are data: a deployment that adds an access level adds the role it requires.
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO memory_access_levels (level, required_role) VALUES ('audit', 'auditor')"
        )
    finally:
        await conn.close()
    added = await client.post("/v1/agents", json={"name": "Audit_Agent", "roles": ["auditor"]})
    assert added.status_code == 201, added.text
    assert added.json()["agent"]["roles"] == ["auditor"]


async def test_unknown_agent_is_404(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/v1/agents/Nobody"), 404)
    assert_problem(await client.delete("/v1/agents/Nobody"), 404)
    assert_problem(await client.get("/v1/agents/Nobody/card"), 404)
    assert_problem(await client.post("/v1/agents/Nobody/key"), 404)


async def test_disable_keeps_the_agent_listed(client: httpx.AsyncClient) -> None:
    await client.post("/v1/agents", json={"name": "Add_Changes_Agent"})
    assert (await client.delete("/v1/agents/Add_Changes_Agent")).status_code == 204
    agent = (await client.get("/v1/agents/Add_Changes_Agent")).json()
    assert agent["disabled_at"] is not None


def _listed(agents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(agent for agent in agents if agent["name"] == name)


async def test_a_disabled_agent_is_not_listed_as_enabled(client: httpx.AsyncClient) -> None:
    """It was: DELETE set disabled_at, the listing still said enabled: true, while routing
    and the key had stopped."""
    await client.post("/v1/agents", json={"name": "Add_Changes_Agent"})
    assert (await client.delete("/v1/agents/Add_Changes_Agent")).status_code == 204
    listed = _listed((await client.get("/v1/agents")).json(), "Add_Changes_Agent")
    assert listed["enabled"] is False
    assert (await client.get("/v1/agents/Add_Changes_Agent")).json()["enabled"] is False
    assert "Add_Changes_Agent" not in str((await client.get("/v1/skills")).json())

    # Changing another setting meanwhile does not write the shown false into the setting:
    # a new key brings the agent back enabled.
    patched = await client.patch("/v1/agents/Add_Changes_Agent", json={"timeout_ms": 2000})
    assert patched.json()["enabled"] is False
    rotated = await client.post("/v1/agents/Add_Changes_Agent/key")
    assert rotated.json()["agent"]["enabled"] is True
    assert rotated.json()["agent"]["disabled_at"] is None


async def test_an_agent_switched_off_stays_off_through_a_new_key(
    client: httpx.AsyncClient,
) -> None:
    await client.post("/v1/agents", json={"name": "Add_Changes_Agent"})
    off = await client.patch("/v1/agents/Add_Changes_Agent", json={"enabled": False})
    assert off.json()["enabled"] is False
    await client.delete("/v1/agents/Add_Changes_Agent")
    rotated = await client.post("/v1/agents/Add_Changes_Agent/key")
    assert rotated.json()["agent"]["enabled"] is False
    on = await client.patch("/v1/agents/Add_Changes_Agent", json={"enabled": True})
    assert on.json()["enabled"] is True


async def test_the_admin_name_is_reserved(client: httpx.AsyncClient) -> None:
    """The admin key owns its memories as "admin": an agent of that name would read them."""
    for name in ("admin", "Admin", "ADMIN"):
        problem = assert_problem(await client.post("/v1/agents", json={"name": name}), 422)
        assert problem["errors"][0]["field"] == "name"
