"""The access matrix: every level x an agent with and without the role x every action,
and the audit trail of allowed and denied access."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.helpers import assert_problem, create_user

# level -> the role an agent needs to read it (None: any agent)
LEVELS = {
    "all_agents": None,
    "authorized_agents": "authorized",
    "analytics_agents": "analytics",
    "coordination_manager": "coordination_manager",
}


def body(user_id: str, level: str, **extra: Any) -> dict[str, Any]:
    return {
        "user_id": user_id,
        "memory_type": "orchestrator",
        "access_level": level,
        "content": {"level": level},
        **extra,
    }


@pytest.mark.parametrize("level", sorted(LEVELS))
async def test_access_matrix(client: httpx.AsyncClient, make_agent_client: Any, level: str) -> None:
    role = LEVELS[level]
    user_id = await create_user(client)
    # The admin writes one memory at every level, so lists can show what leaks.
    ids = {}
    for any_level in LEVELS:
        created = await client.post("/v1/memories", json=body(user_id, any_level))
        assert created.status_code == 201, created.text
        ids[any_level] = created.json()["memory_id"]
    target = ids[level]

    holder = await make_agent_client("Holder", [role] if role else [])
    outsider = await make_agent_client("Outsider", [])  # roles are only those levels need
    async with holder, outsider:
        # read
        assert (await holder.get(f"/v1/memories/{target}")).status_code == 200
        if role:
            assert_problem(await outsider.get(f"/v1/memories/{target}"), 404)
        # list: never a row the caller may not read
        listed = (await holder.get("/v1/memories", params={"user_id": user_id})).json()
        listed_levels = {m["access_level"] for m in listed["items"]}
        assert level in listed_levels
        assert listed_levels <= {lv for lv, r in LEVELS.items() if r in (None, role)}
        outsider_levels = {
            m["access_level"]
            for m in (await outsider.get("/v1/memories", params={"user_id": user_id})).json()[
                "items"
            ]
        }
        assert outsider_levels == {"all_agents"}
        # write
        assert (await holder.post("/v1/memories", json=body(user_id, level))).status_code == 201
        if role:
            denied = await outsider.post("/v1/memories", json=body(user_id, level))
            assert_problem(denied, 403)
            upsert = await outsider.put(
                "/v1/memories/by-key",
                json=body(user_id, level, category="session_data", key="k"),
            )
            assert_problem(upsert, 403)
        # delete
        if role:
            assert_problem(await outsider.delete(f"/v1/memories/{target}"), 404)
        assert (await holder.delete(f"/v1/memories/{target}")).status_code == 204
    assert_problem(await client.get(f"/v1/memories/{target}"), 404)


async def test_a_key_held_at_a_level_you_cannot_read_behaves_as_absent_or_taken(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    """Nothing the caller sees tells a hidden memory's level, version or id; where the
    key cannot be created (it is unique), the answer is the plain taken-key 409 that a
    POST with any used key gets."""
    user_id = await create_user(client)
    secret = {
        "user_id": user_id,
        "category": "user_profile",
        "key": "income",
        "memory_type": "data_collection",
        "content": 5000,
    }
    assert (await client.put("/v1/memories/by-key", json=secret)).status_code == 201
    unused = {**secret, "key": "never_written", "access_level": "all_agents"}
    overwrite = {**secret, "access_level": "all_agents", "content": 0}
    # What a POST with a key taken by a memory one *can* read looks like.
    taken_visible = assert_problem(await client.post("/v1/memories", json=secret), 409)

    agent = await make_agent_client("Sneaky", [])
    async with agent:
        plain = assert_problem(await agent.put("/v1/memories/by-key", json=overwrite), 409)
        created_only = assert_problem(
            await agent.put("/v1/memories/by-key", json=overwrite, headers={"If-None-Match": "*"}),
            409,
        )
        posted = assert_problem(await agent.post("/v1/memories", json=overwrite), 409)
        for problem in (plain, created_only, posted):
            assert problem["detail"] == taken_visible["detail"]
            assert problem["errors"] == taken_visible["errors"]
            assert "current_version" not in problem
            assert "retryable" not in problem
            assert "memory_id" not in problem

        # With If-Match the hidden memory is as absent as a key nobody ever wrote.
        conditional = assert_problem(
            await agent.put("/v1/memories/by-key", json=overwrite, headers={"If-Match": '"1"'}),
            409,
        )
        never = assert_problem(
            await agent.put("/v1/memories/by-key", json=unused, headers={"If-Match": '"1"'}),
            409,
        )
        assert conditional == never
        assert conditional["current_version"] is None

    stored = (
        await client.get("/v1/memories", params={"user_id": user_id, "category": "user_profile"})
    ).json()["items"]
    assert [(m["content"], m["version"]) for m in stored] == [(5000, 1)]
    log = (await client.get("/v1/audit/memory", params={"agent": "Sneaky"})).json()["items"]
    denied = [e for e in log if e["action"] == "write" and not e["allowed"]]
    assert len(denied) == 3  # the two PUTs and the POST that met the hidden memory
    assert denied[0]["query"] == {"user_id": user_id, "category": "user_profile", "key": "income"}


async def test_batch_with_one_forbidden_item_writes_nothing(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    agent = await make_agent_client("Partial", ["authorized"])
    async with agent:
        response = await agent.post(
            "/v1/memories",
            json=[body(user_id, "authorized_agents"), body(user_id, "analytics_agents")],
        )
    problem = assert_problem(response, 403)
    assert problem["errors"][0]["field"] == "1.access_level"
    assert (await client.get("/v1/memories", params={"user_id": user_id})).json()["items"] == []


async def test_audit_records_allowed_and_denied_access(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    secret = (await client.post("/v1/memories", json=body(user_id, "analytics_agents"))).json()
    agent = await make_agent_client("Auditee", [])
    async with agent:
        open_memory = (await agent.post("/v1/memories", json=body(user_id, "all_agents"))).json()
        await agent.get(f"/v1/memories/{open_memory['memory_id']}")
        await agent.get(f"/v1/memories/{secret['memory_id']}")  # denied, 404
        await agent.post("/v1/memories", json=body(user_id, "coordination_manager"))  # denied
        await agent.get("/v1/memories", params={"user_id": user_id})
        await agent.delete(f"/v1/memories/{secret['memory_id']}")  # denied, 404
        assert_problem(await agent.get("/v1/audit/memory"), 403)

    log = (await client.get("/v1/audit/memory", params={"agent": "Auditee"})).json()["items"]
    summary = [(e["action"], e["allowed"], e["memory_id"]) for e in reversed(log)]
    assert summary == [
        ("write", True, open_memory["memory_id"]),
        ("read", True, open_memory["memory_id"]),
        ("read", False, secret["memory_id"]),
        ("write", False, None),
        ("list", True, None),
        ("delete", False, secret["memory_id"]),
    ]
    listed = next(e for e in log if e["action"] == "list")
    assert listed["rows"] == 1
    assert listed["query"] == {"user_id": user_id}
    denied_write = next(e for e in log if e["action"] == "write" and not e["allowed"])
    assert denied_write["query"][0]["level"] == "coordination_manager"

    everyone = (await client.get("/v1/audit/memory", params={"limit": 200})).json()["items"]
    assert {e["agent_name"] for e in everyone} == {"admin", "Auditee"}
    future = (await client.get("/v1/audit/memory", params={"since": "2999-01-01T00:00:00Z"})).json()
    assert future["items"] == []


async def test_audit_pagination(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    for _ in range(5):
        await client.post("/v1/memories", json=body(user_id, "all_agents"))
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/audit/memory", params=params)).json()
        seen += [e["log_id"] for e in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == len(set(seen)) == 5


async def test_a_listed_page_is_audited_with_the_rows_it_returned(
    client: httpx.AsyncClient,
) -> None:
    user_id = await create_user(client)
    for _ in range(3):
        await client.post("/v1/memories", json=body(user_id, "all_agents"))
    first = (await client.get("/v1/memories", params={"user_id": user_id, "limit": 2})).json()
    assert len(first["items"]) == 2
    assert first["next_cursor"]
    params = {"user_id": user_id, "limit": 2, "cursor": first["next_cursor"]}
    assert len((await client.get("/v1/memories", params=params)).json()["items"]) == 1
    log = (await client.get("/v1/audit/memory", params={"limit": 200})).json()["items"]
    listed = [e["rows"] for e in reversed(log) if e["action"] == "list"]
    assert listed == [2, 1]  # the look-ahead row is not counted
