"""Reliability drills that are tests: duplicate JSON keys, concurrent upserts of one memory
key, the memory access matrix through the n8n webhook (all in make test), and 50 writers x
100 updates on one session (about 3 minutes: marked drill, run by make drills)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from tests.integration.helpers import assert_problem, create_session, create_user


async def test_duplicate_json_keys_are_a_clear_answer(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    raw = b'{"progress_percentage": 10, "progress_percentage": 20}'
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        content=raw,
        headers={"content-type": "application/json", "If-Match": '"1"'},
    )
    # Refused (400 naming the key): readers differ on which value a repeat means.
    problem = assert_problem(response, 400)
    assert problem["errors"][0]["field"] == "progress_percentage"
    current = (await client.get(f"/v1/sessions/{session['session_id']}")).json()
    assert current["version"] == 1


@pytest.mark.drill
async def test_fifty_writers_a_hundred_updates_each_lose_nothing(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    writers, updates = 50, 100
    successes = 0

    async def writer(index: int) -> None:
        nonlocal successes
        version = 1
        for update in range(updates):
            while True:
                response = await client.patch(
                    url,
                    json={"session_state": {"agent_outputs": {f"w{index}": update}}},
                    headers={"If-Match": f'"{version}"'},
                )
                if response.status_code == 200:
                    version = response.json()["version"]
                    successes += 1
                    break
                assert response.status_code == 409, response.text
                version = response.json()["current_version"]

    await asyncio.gather(*(writer(i) for i in range(writers)))
    final = (await client.get(url)).json()
    assert successes == writers * updates
    assert final["version"] == 1 + successes
    assert final["session_state"]["agent_outputs"] == {f"w{i}": updates - 1 for i in range(writers)}
    versions: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"{url}/versions", params=params)).json()
        versions += [v["version"] for v in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert versions == list(range(final["version"], 0, -1))


async def test_concurrent_upserts_of_one_key_exactly_one_wins_per_version(
    client: httpx.AsyncClient,
) -> None:
    user = await create_user(client)
    body = {
        "user_id": user,
        "category": "user_profile",
        "key": "risk",
        "memory_type": "consultation",
        "content": 0,
    }
    created = await client.put("/v1/memories/by-key", json=body)
    assert created.status_code == 201
    attempts = 20
    responses = await asyncio.gather(
        *(
            client.put(
                "/v1/memories/by-key", json={**body, "content": i}, headers={"If-Match": '"1"'}
            )
            for i in range(attempts)
        )
    )
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * (attempts - 1)
    winner = next(r for r in responses if r.status_code == 200).json()
    stored = (await client.get(f"/v1/memories/{winner['memory_id']}")).json()
    assert (stored["version"], stored["content"]) == (2, winner["content"])


LEVELS = {
    "all_agents": None,
    "authorized_agents": "authorized",
    "analytics_agents": "analytics",
    "coordination_manager": "coordination_manager",
}


@pytest.mark.parametrize("level", sorted(LEVELS))
async def test_access_matrix_through_the_n8n_webhook(
    client: httpx.AsyncClient, make_agent_client: Any, level: str
) -> None:
    """A coordination_manager key acting for agents gets exactly those agents' rights,
    owner access included."""
    role = LEVELS[level]
    user = await create_user(client)
    holder = "Holder_Agent"
    outsider = "Outsider_Agent"
    for name, roles in ((holder, [role] if role else []), (outsider, [])):
        assert (
            await client.post("/v1/agents", json={"name": name, "roles": roles})
        ).status_code == 201
    stored = await client.post(
        "/v1/memories",
        json={"user_id": user, "memory_type": "orchestrator", "access_level": level, "content": 1},
    )
    memory_id = stored.json()["memory_id"]
    manager = await make_agent_client("Webhook_Manager", ["coordination_manager"])

    def call(agent: str, **fields: Any) -> Any:
        return manager.post("/webhooks/n8n/memory", json={"agent_name": agent, **fields})

    async with manager:
        read = await call(holder, action="read", memory_id=memory_id)
        assert read.status_code == 200, read.text
        query = await call(holder, action="query", user_id=user)
        assert level in {m["access_level"] for m in query.json()["items"]}
        write = await call(
            holder,
            user_id=user,
            memory_type="orchestrator",
            memory_content=2,
            access_level=level,
        )
        assert write.status_code == 200, write.text
        if role is not None:
            assert_problem(await call(outsider, action="read", memory_id=memory_id), 404)
            listed = await call(outsider, action="query", user_id=user)
            assert {m["access_level"] for m in listed.json()["items"]} == set()
            # Writing needs no role; the outsider reads back what it wrote, nothing more.
            own = await call(
                outsider,
                user_id=user,
                memory_type="orchestrator",
                memory_content=3,
                access_level=level,
            )
            assert own.status_code == 200, own.text
            mine = await call(outsider, action="query", user_id=user)
            assert [m["content"] for m in mine.json()["items"]] == [3]
