"""The agent registry (admin only)."""

from __future__ import annotations

import httpx

from tests.integration.helpers import assert_problem


async def test_create_returns_key_once_and_list_never_shows_it(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/agents", json={"name": "Consult_Customer_Agent", "roles": ["authorized", "analytics"]}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["api_key"].startswith("sb_")
    assert body["roles"] == ["analytics", "authorized"]

    listed = (await client.get("/v1/agents")).json()
    assert [a["name"] for a in listed] == ["Consult_Customer_Agent"]
    assert "api_key" not in listed[0]
    one = (await client.get("/v1/agents/Consult_Customer_Agent")).json()
    assert one["agent_id"] == body["agent_id"]
    assert "api_key" not in one
    assert "api_key_hash" not in one


async def test_duplicate_name_is_409(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/agents", json={"name": "Dup"})).status_code == 201
    assert_problem(await client.post("/v1/agents", json={"name": "Dup"}), 409)


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


async def test_unknown_agent_is_404(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/v1/agents/Nobody"), 404)
    assert_problem(await client.delete("/v1/agents/Nobody"), 404)
    assert_problem(await client.post("/v1/agents/Nobody/key"), 404)


async def test_disable_keeps_the_agent_listed(client: httpx.AsyncClient) -> None:
    await client.post("/v1/agents", json={"name": "Add_Changes_Agent"})
    assert (await client.delete("/v1/agents/Add_Changes_Agent")).status_code == 204
    agent = (await client.get("/v1/agents/Add_Changes_Agent")).json()
    assert agent["disabled_at"] is not None
