"""The access matrix: every level x an agent with and without the role x every action, the
writer's own access, the seed's seven agents with their own keys, and the audit trail of
allowed and denied access."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from litestar import Litestar

from tests.conftest import app_client
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
    """Reading needs the level's role; writing needs none; the writer always keeps access."""
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
    writer = await make_agent_client("Writer", [])
    bystander = await make_agent_client("Bystander", [])
    async with holder, writer, bystander:
        # read
        assert (await holder.get(f"/v1/memories/{target}")).status_code == 200
        if role:
            assert_problem(await bystander.get(f"/v1/memories/{target}"), 404)
        # list: never a row the caller may not read
        listed = (await holder.get("/v1/memories", params={"user_id": user_id})).json()
        listed_levels = {m["access_level"] for m in listed["items"]}
        assert level in listed_levels
        assert listed_levels <= {lv for lv, r in LEVELS.items() if r in (None, role)}
        bystander_levels = {
            m["access_level"]
            for m in (await bystander.get("/v1/memories", params={"user_id": user_id})).json()[
                "items"
            ]
        }
        assert bystander_levels == {"all_agents"}

        # write: any agent at any level, and the writer reads, lists, updates and deletes
        # what it wrote even where the level's role is not its own
        own = await writer.post("/v1/memories", json=body(user_id, level, key="mine"))
        assert own.status_code == 201, own.text
        own_id = own.json()["memory_id"]
        assert own.json()["agent_name"] == "Writer"
        assert (await writer.get(f"/v1/memories/{own_id}")).json()["access_level"] == level
        mine = (await writer.get("/v1/memories", params={"agent_name": "Writer"})).json()
        assert [m["memory_id"] for m in mine["items"]] == [own_id]
        assert (await holder.get(f"/v1/memories/{own_id}")).status_code == 200
        if role:
            assert_problem(await bystander.get(f"/v1/memories/{own_id}"), 404)
            seen = (await bystander.get("/v1/memories", params={"user_id": user_id})).json()
            assert own_id not in {m["memory_id"] for m in seen["items"]}
            assert_problem(await bystander.delete(f"/v1/memories/{own_id}"), 404)
        replaced = await writer.put(
            "/v1/memories/by-key",
            json=body(user_id, level, category="session_data", key="mine", content={"v": 2}),
            headers={"If-Match": '"1"'},
        )
        assert replaced.status_code == 200, replaced.text
        assert replaced.json()["version"] == 2
        assert replaced.json()["content"] == {"v": 2}

        # delete: only what the caller can see
        if role:
            assert_problem(await bystander.delete(f"/v1/memories/{target}"), 404)
        assert (await holder.delete(f"/v1/memories/{target}")).status_code == 204
        assert (await writer.delete(f"/v1/memories/{own_id}")).status_code == 204
    assert_problem(await client.get(f"/v1/memories/{target}"), 404)
    assert_problem(await client.get(f"/v1/memories/{own_id}"), 404)


# The seed's seven agents, their seeded roles and the memory type each writes by default.
SEEDED = {
    "Intent_Session_Agent": ("intent_session", {"analytics"}),
    "Orchestrator_Agent": ("orchestrator", {"coordination_manager"}),
    "Collect_Create_Data_Agent": ("data_collection", {"authorized"}),
    "Consult_Customer_Agent": ("consultation", {"authorized"}),
    "Make_Plan_Agent": ("planning", {"authorized"}),
    "Add_Changes_Agent": ("changes", {"authorized"}),
    "Educate_Customer_Agent": ("education", set()),
}


async def test_each_seeded_agent_stores_and_reads_back_its_own_kind_of_memory(
    client: httpx.AsyncClient, running_app: Litestar
) -> None:
    """AC 2 of the seed: every agent writes its results with its own key and no explicit
    category; who else reads each memory follows the level's role, and nobody else."""
    user_id = await create_user(client)
    agents: dict[str, httpx.AsyncClient] = {}
    for name in SEEDED:
        issued = await client.post(f"/v1/agents/{name}/key")
        assert issued.status_code == 201, issued.text
        agents[name] = app_client(running_app, {"X-API-Key": issued.json()["api_key"]})
    levels = {
        lv["level"]: lv["required_role"]
        for lv in (await client.get("/v1/memory-access-levels")).json()
    }
    written: dict[str, dict[str, Any]] = {}
    try:
        for name, (memory_type, _) in SEEDED.items():
            stored = await agents[name].post(
                "/v1/memories",
                json={"user_id": user_id, "memory_type": memory_type, "content": {"by": name}},
            )
            assert stored.status_code == 201, (name, stored.text)
            memory = stored.json()
            assert memory["agent_name"] == name
            written[name] = memory
            read = await agents[name].get(f"/v1/memories/{memory['memory_id']}")
            assert read.status_code == 200, (name, read.text)
            assert read.json()["content"] == {"by": name}

        # planning and changes land in agent_outputs (coordination_manager), education in
        # interaction_patterns (analytics): levels their writers hold no role for.
        assert written["Make_Plan_Agent"]["access_level"] == "coordination_manager"
        assert written["Add_Changes_Agent"]["access_level"] == "coordination_manager"
        assert written["Educate_Customer_Agent"]["access_level"] == "analytics_agents"

        for reader, (_, roles) in SEEDED.items():
            expected = {
                writer
                for writer, memory in written.items()
                if writer == reader or levels[memory["access_level"]] in (None, *roles)
            }
            listed = (await agents[reader].get("/v1/memories", params={"user_id": user_id})).json()[
                "items"
            ]
            assert {m["agent_name"] for m in listed} == expected, reader
            for writer, memory in written.items():
                response = await agents[reader].get(f"/v1/memories/{memory['memory_id']}")
                assert response.status_code == (200 if writer in expected else 404), (
                    reader,
                    writer,
                )
        # The coordination manager reads every agent's results; analytics the patterns.
        assert {"Make_Plan_Agent", "Add_Changes_Agent"} <= {
            w for w, m in written.items() if m["access_level"] == "coordination_manager"
        }
    finally:
        for agent in agents.values():
            await agent.aclose()


async def test_the_owner_keeps_access_after_a_reader_with_the_role_changes_it(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    planner = await make_agent_client("Planner", [])
    manager = await make_agent_client("Manager", ["coordination_manager"])
    plan = {
        "user_id": user_id,
        "memory_type": "planning",
        "category": "agent_outputs",
        "key": "plan",
        "content": {"draft": 1},
    }
    async with planner, manager:
        created = await planner.put("/v1/memories/by-key", json=plan)
        assert created.status_code == 201, created.text
        changed = await manager.put("/v1/memories/by-key", json={**plan, "content": {"draft": 2}})
        assert changed.status_code == 200, changed.text
        assert changed.json()["agent_name"] == "Planner"  # the owner stays
        again = await planner.put("/v1/memories/by-key", json={**plan, "content": {"draft": 3}})
        assert again.status_code == 200, again.text
        assert again.json()["version"] == 3
    log = (await client.get("/v1/audit/memory", params={"agent": "Manager"})).json()["items"]
    assert [(e["action"], e["allowed"]) for e in log] == [("update", True)]


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
        # Alike but for the trace id each answer names (its own request's, telling nothing).
        assert conditional.pop("trace_id") != never.pop("trace_id")
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


async def test_a_batch_with_one_invalid_item_writes_nothing(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    agent = await make_agent_client("Partial", ["authorized"])
    async with agent:
        response = await agent.post(
            "/v1/memories",
            json=[body(user_id, "analytics_agents"), body(user_id, "no_such_level")],
        )
    problem = assert_problem(response, 422)
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
        hidden = (
            await agent.post("/v1/memories", json=body(user_id, "coordination_manager"))
        ).json()  # written, and readable by its writer only (and the coordination manager)
        await agent.get("/v1/memories", params={"user_id": user_id})
        await agent.delete(f"/v1/memories/{secret['memory_id']}")  # denied, 404
        assert_problem(await agent.get("/v1/audit/memory"), 403)

    log = (await client.get("/v1/audit/memory", params={"agent": "Auditee"})).json()["items"]
    summary = [(e["action"], e["allowed"], e["memory_id"]) for e in reversed(log)]
    assert summary == [
        ("write", True, open_memory["memory_id"]),
        ("read", True, open_memory["memory_id"]),
        ("read", False, secret["memory_id"]),
        ("write", True, hidden["memory_id"]),
        ("list", True, None),
        ("delete", False, secret["memory_id"]),
    ]
    listed = next(e for e in log if e["action"] == "list")
    assert listed["rows"] == 2  # its all_agents memory and its own coordination_manager one
    assert listed["query"] == {"user_id": user_id}

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
