"""Memories scoped to a branch: invisible on main, shadowing main's on the branch, written
into main by the merge (clean, conflicting, resolved), gone with the branch and with
erasure, under the same access levels as main's; bad input is a 4xx problem."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from tests.integration.helpers import assert_problem, create_session, create_user, if_match

CATEGORY = "agent_outputs"


def memory(key: str, content: Any, **more: Any) -> dict[str, Any]:
    return {"category": CATEGORY, "key": key, "memory_type": "planning", "content": content, **more}


class Setup:
    """A user with a session, a branch ``alt`` of it, and main memories of keys a and b."""

    def __init__(self, client: httpx.AsyncClient, user_id: str, sid: str) -> None:
        self.client = client
        self.user_id = user_id
        self.sid = sid
        self.branch = f"/v1/sessions/{sid}/branches/alt"

    async def on_main(self, key: str, content: Any, **more: Any) -> dict[str, Any]:
        response = await self.client.put(
            "/v1/memories/by-key", json={"user_id": self.user_id, **memory(key, content, **more)}
        )
        assert response.status_code in (200, 201), response.text
        body: dict[str, Any] = response.json()
        return body

    async def main_value(self, key: str) -> Any:
        listed = await self.client.get(
            "/v1/memories", params={"user_id": self.user_id, "category": CATEGORY}
        )
        assert listed.status_code == 200, listed.text
        values = {m["key"]: m["content"] for m in listed.json()["items"]}
        return values.get(key, "<absent>")

    async def on_branch(self, key: str, content: Any, **headers: str) -> httpx.Response:
        return await self.client.put(
            f"{self.branch}/memories/by-key", json=memory(key, content), headers=headers
        )

    async def branch_read(self, key: str) -> httpx.Response:
        return await self.client.get(
            f"{self.branch}/memories/by-key", params={"category": CATEGORY, "key": key}
        )

    async def merge(self, body: Any = None) -> httpx.Response:
        return await self.client.post(f"{self.branch}/merge", json=body)


@pytest.fixture
async def setup(client: httpx.AsyncClient) -> Setup:
    user_id = await create_user(client)
    session = await create_session(client, user_id=user_id)
    made = Setup(client, user_id, session["session_id"])
    await made.on_main("a", "main a")
    await made.on_main("b", "main b")
    forked = await client.post(
        f"/v1/sessions/{made.sid}/branches", json={"name": "alt", "purpose": "analysis"}
    )
    assert forked.status_code == 201, forked.text
    return made


async def test_a_branch_memory_is_invisible_on_main_and_shadows_main_on_the_branch(
    setup: Setup,
) -> None:
    created = await setup.on_branch("c", "branch c")
    assert created.status_code == 201, created.text
    assert created.json()["branch"] == "alt"
    assert created.headers["ETag"] == '"1"'
    replaced = await setup.on_branch("a", "branch a")
    # Main's memory of a is at version 1: the branch's value of it continues from there.
    assert replaced.status_code == 200, replaced.text
    assert (replaced.json()["version"], replaced.json()["branch"]) == (2, "alt")

    # Main sees none of it.
    assert await setup.main_value("a") == "main a"
    assert await setup.main_value("c") == "<absent>"
    assert_problem(await setup.client.get(f"/v1/memories/{created.json()['memory_id']}"), 404)
    context = (await setup.client.get(f"/v1/sessions/{setup.sid}/context")).json()
    assert "branch a" not in [m["content"] for m in context["memories"]]

    # The branch sees its own rows in place of main's, and main's where it wrote nothing.
    a = (await setup.branch_read("a")).json()
    b = (await setup.branch_read("b")).json()
    assert (a["content"], a["branch"]) == ("branch a", "alt")
    assert (b["content"], b["branch"]) == ("main b", "main")
    listed = (await setup.client.get(f"{setup.branch}/memories")).json()["items"]
    assert sorted((m["key"], m["content"], m["branch"]) for m in listed) == [
        ("a", "branch a", "alt"),
        ("b", "main b", "main"),
        ("c", "branch c", "alt"),
    ]
    paged = (await setup.client.get(f"{setup.branch}/memories", params={"limit": 2})).json()
    assert len(paged["items"]) == 2
    assert paged["next_cursor"]
    rest = await setup.client.get(
        f"{setup.branch}/memories", params={"limit": 2, "cursor": paged["next_cursor"]}
    )
    assert len(rest.json()["items"]) == 1
    # Dropping the branch's value lets main's show through again; main's is untouched.
    dropped = await setup.client.delete(
        f"{setup.branch}/memories/by-key", params={"category": CATEGORY, "key": "a"}
    )
    assert dropped.status_code == 204
    assert (await setup.branch_read("a")).json()["content"] == "main a"
    assert await setup.main_value("a") == "main a"


async def test_merge_writes_the_branch_memories_into_main(setup: Setup, database_url: str) -> None:
    new = (await setup.on_branch("c", {"found": 2})).json()
    assert (await setup.on_branch("a", "branch a")).status_code == 200
    # Main changes another key meanwhile: no conflict.
    await setup.on_main("b", "main b2")

    merged = await setup.merge()
    assert merged.status_code == 200, merged.text
    assert await setup.main_value("a") == "branch a"
    assert await setup.main_value("b") == "main b2"
    assert await setup.main_value("c") == {"found": 2}
    # The key main did not hold keeps the id the branch write answered.
    assert (await setup.client.get(f"/v1/memories/{new['memory_id']}")).json()["content"] == {
        "found": 2
    }
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM branch_memories") == 0
        versions = await conn.fetch(
            "SELECT key, version FROM memories WHERE user_id = $1 ORDER BY key",
            uuid.UUID(setup.user_id),
        )
    finally:
        await conn.close()
    assert [(r["key"], r["version"]) for r in versions] == [("a", 2), ("b", 2), ("c", 1)]
    # A merged branch takes no more memory writes.
    assert_problem(await setup.on_branch("d", 1), 409)


async def test_a_key_changed_on_both_sides_conflicts_and_a_resolution_settles_it(
    setup: Setup,
) -> None:
    assert (await setup.on_branch("a", "branch a")).status_code == 200
    assert (await setup.on_branch("b", "branch b")).status_code == 200
    assert (await setup.on_branch("c", "branch c")).status_code == 201
    await setup.on_main("a", "main a2")
    await setup.on_main("b", "main b2")
    # The same value on both sides is no conflict.
    await setup.on_main("c", "branch c")

    conflicted = await setup.merge()
    problem = assert_problem(conflicted, 409)
    assert problem["type"].endswith(":merge-conflict")
    assert problem["conflicts"] == [
        {"path": "/memories/agent_outputs/a", "base": "main a", "current": "main a2",
         "proposed": "branch a"},
        {"path": "/memories/agent_outputs/b", "base": "main b", "current": "main b2",
         "proposed": "branch b"},
    ]  # fmt: skip
    # Nothing was written: main and the branch are as they were.
    assert await setup.main_value("a") == "main a2"
    session = (await setup.client.get(f"/v1/sessions/{setup.sid}")).json()
    assert session["version"] == 1
    assert (await setup.client.get(setup.branch)).json()["state"] == "open"

    # A resolution must settle exactly the conflicts.
    missing = await setup.merge({"choices": {"/memories/agent_outputs/a": {"take": "ours"}}})
    assert assert_problem(missing, 422)["errors"] == [
        {"field": "/memories/agent_outputs/b", "message": "no choice for this conflicting path"}
    ]
    extra = await setup.merge(
        {
            "choices": {
                "/memories/agent_outputs/a": {"take": "ours"},
                "/memories/agent_outputs/b": {"take": "theirs"},
                "/memories/agent_outputs/c": {"take": "ours"},
            }
        }
    )
    assert_problem(extra, 422)
    null_value = await setup.merge(
        {
            "choices": {
                "/memories/agent_outputs/a": {"take": "value", "value": None},
                "/memories/agent_outputs/b": {"take": "theirs"},
            }
        }
    )
    assert_problem(null_value, 422)
    assert await setup.main_value("a") == "main a2"

    settled = await setup.merge(
        {
            "choices": {
                "/memories/agent_outputs/a": {"take": "value", "value": "both a"},
                "/memories/agent_outputs/b": {"take": "theirs"},
            }
        }
    )
    assert settled.status_code == 200, settled.text
    assert await setup.main_value("a") == "both a"
    assert await setup.main_value("b") == "main b2"
    assert await setup.main_value("c") == "branch c"


async def test_memory_conflicts_list_beside_session_conflicts_and_settle_with_a_document(
    setup: Setup,
) -> None:
    url = f"/v1/sessions/{setup.sid}"
    patched = await setup.client.patch(setup.branch, json={"priority": "low"}, headers=if_match(1))
    assert patched.status_code == 200, patched.text
    assert (
        await setup.client.patch(url, json={"priority": "high"}, headers=if_match(1))
    ).is_success
    assert (await setup.on_branch("a", "branch a")).status_code == 200
    await setup.on_main("a", "main a2")

    problem = assert_problem(await setup.merge(), 409)
    assert [c["path"] for c in problem["conflicts"]] == ["/priority", "/memories/agent_outputs/a"]
    settled = await setup.merge(
        {
            "document": {"priority": "urgent"},
            "choices": {"/memories/agent_outputs/a": {"take": "remove"}},
        }
    )
    assert settled.status_code == 200, settled.text
    assert settled.json()["priority"] == "urgent"
    assert await setup.main_value("a") == "<absent>"
    # Beside a document, choices settle memory keys only.
    assert_problem(
        await setup.client.post(
            f"{url}/branches/alt/merge",
            json={"document": {}, "choices": {"/priority": {"take": "ours"}}},
        ),
        422,
    )


async def test_deleting_the_branch_drops_its_memories(setup: Setup, database_url: str) -> None:
    assert (await setup.on_branch("c", "branch c")).status_code == 201
    assert (await setup.client.delete(setup.branch)).status_code == 204
    conn = await asyncpg.connect(database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM branch_memories") == 0
    finally:
        await conn.close()
    forked = await setup.client.post(
        f"/v1/sessions/{setup.sid}/branches", json={"name": "alt", "purpose": "analysis"}
    )
    assert forked.status_code == 201
    assert_problem(await setup.branch_read("c"), 404)
    assert await setup.main_value("c") == "<absent>"


async def test_erasing_a_users_memories_takes_their_branch_memories(setup: Setup) -> None:
    assert (await setup.on_branch("c", "branch c")).status_code == 201
    erased = await setup.client.delete(f"/v1/users/{setup.user_id}/memories")
    assert erased.status_code == 200, erased.text
    assert erased.json()["deleted"]["branch_memories"] == 1
    assert_problem(await setup.branch_read("c"), 404)
    assert_problem(await setup.branch_read("a"), 404)


async def test_access_levels_apply_to_branch_memories(setup: Setup, make_agent_client: Any) -> None:
    secret = await setup.client.put(
        f"{setup.branch}/memories/by-key",
        json=memory("s", "secret", access_level="coordination_manager"),
    )
    assert secret.status_code == 201, secret.text
    manager = await make_agent_client("BranchManager", ["coordination_manager"])
    bystander = await make_agent_client("BranchBystander", [])
    params = {"category": CATEGORY, "key": "s"}
    async with manager, bystander:
        assert (await manager.get(f"{setup.branch}/memories/by-key", params=params)).is_success
        assert_problem(await bystander.get(f"{setup.branch}/memories/by-key", params=params), 404)
        listed = (await bystander.get(f"{setup.branch}/memories")).json()["items"]
        assert "s" not in [m["key"] for m in listed]
        # The key is in use, and that is all the bystander learns.
        taken = await bystander.put(f"{setup.branch}/memories/by-key", json=memory("s", "mine"))
        problem = assert_problem(taken, 409)
        assert "current_version" not in problem
        assert_problem(
            await bystander.delete(f"{setup.branch}/memories/by-key", params=params), 404
        )
        # A hidden main memory cannot be shadowed by someone who cannot read it either.
        await setup.on_main("h", "hidden", access_level="coordination_manager")
        assert_problem(
            await bystander.put(f"{setup.branch}/memories/by-key", json=memory("h", "x")), 409
        )
        # The writer keeps its own, at any level.
        own = await bystander.put(
            f"{setup.branch}/memories/by-key",
            json=memory("o", "own", access_level="coordination_manager"),
        )
        assert own.status_code == 201, own.text
        mine = {"category": CATEGORY, "key": "o"}
        read = await bystander.get(f"{setup.branch}/memories/by-key", params=mine)
        assert read.json()["content"] == "own"
        # A merge by someone who may not read a conflicting memory sees the path, not the
        # values.
        await setup.on_main("s", "main s")
        merged = await bystander.post(f"{setup.branch}/merge")
        [conflict] = assert_problem(merged, 409)["conflicts"]
        assert conflict["path"] == "/memories/agent_outputs/s"
        assert conflict["proposed"] is None
        assert conflict["proposed_present"] is False
        assert conflict["current"] is None
        assert "secret" not in merged.text
    audit = await setup.client.get("/v1/audit/memory", params={"agent": "BranchBystander"})
    denied = [e for e in audit.json()["items"] if not e["allowed"]]
    assert denied
    assert all(e["query"]["branch"] == "alt" for e in denied)


async def test_bad_input_is_a_4xx_problem(setup: Setup) -> None:
    url = f"{setup.branch}/memories/by-key"
    good = memory("k", 1)
    for body in (
        {**good, "category": "Not An Identifier"},
        {**good, "key": ""},
        {**good, "memory_type": "no_such_type"},
        {**good, "category": "no_such_category"},
        {**good, "access_level": "no_such_level"},
        {**good, "content": None},
        {**good, "user_id": setup.user_id},
    ):
        response = await setup.client.put(url, json=body)
        assert response.status_code in (400, 422), (body, response.text)
        assert_problem(response, response.status_code)
    assert_problem(await setup.client.put(url, json=good, headers={"If-None-Match": '"1"'}), 400)
    assert_problem(await setup.client.put(url, json=good, headers={"If-Match": "1"}), 400)
    assert_problem(await setup.client.put(url, json=good, headers=if_match(1)), 409)
    assert (await setup.client.put(url, json=good)).status_code == 201
    assert_problem(await setup.client.put(url, json=good, headers=if_match(7)), 409)
    assert (await setup.client.put(url, json=good, headers=if_match(1))).status_code == 200
    assert_problem(await setup.client.get(url, params={"category": CATEGORY}), 400)
    assert_problem(await setup.client.get(url, params={"category": "X!", "key": "k"}), 400)
    assert_problem(await setup.client.get(url, params={"category": CATEGORY, "key": "zz"}), 404)
    nope = f"/v1/sessions/{setup.sid}/branches/nope/memories"
    assert_problem(await setup.client.put(f"{nope}/by-key", json=good), 404)
    assert_problem(await setup.client.get(nope), 404)
    assert_problem(await setup.client.get(f"{setup.branch}/memories?cursor=garbage"), 400)
    unknown = "/v1/sessions/01900000-0000-7000-8000-000000000000/branches/alt/memories"
    assert_problem(await setup.client.get(unknown), 404)
    # A completed session takes no branch memory writes.
    completed = await setup.client.post(f"/v1/sessions/{setup.sid}/complete", headers=if_match(1))
    assert completed.status_code == 200, completed.text
    assert_problem(await setup.client.put(url, json=memory("k2", 1)), 409)


async def test_a_branch_write_waits_for_a_memory_erasure_instead_of_deadlocking(
    setup: Setup, database_url: str
) -> None:
    """Erasing a user's memories locks the user, then their memories. A branch write that
    shadows a main memory takes the user first too, so it waits (holding nothing the
    erasure needs) instead of locking the memory and then waiting for the user."""
    import asyncio

    user = uuid.UUID(setup.user_id)
    eraser = await asyncpg.connect(database_url)
    watcher = await asyncpg.connect(database_url)
    try:
        erasing = eraser.transaction()
        await erasing.start()
        await eraser.execute("SELECT 1 FROM users WHERE id = $1 FOR UPDATE", user)
        write = asyncio.create_task(setup.on_branch("a", "branch a"))
        for _ in range(500):  # until the write waits for a lock
            waiting = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            if waiting or write.done():
                break
            await asyncio.sleep(0.01)
        assert not write.done(), (await write).text
        await eraser.execute("DELETE FROM memories WHERE user_id = $1", user)
        await eraser.execute("DELETE FROM branch_memories WHERE user_id = $1", user)
        await erasing.commit()
        written = await asyncio.wait_for(write, 10)
    finally:
        await eraser.close()
        await watcher.close()
    # Main's memory was erased before the write went on: it shadows nothing now.
    assert written.status_code == 201, written.text
    assert written.json()["version"] == 1


async def test_a_category_retention_reapplied_covers_branch_memories(setup: Setup) -> None:
    assert (await setup.on_branch("c", "branch c")).status_code == 201
    changed = await setup.client.put(
        f"/v1/memory-categories/{CATEGORY}",
        params={"reapply": "true"},
        json={"retention_seconds": 3600, "default_access_level": "all_agents"},
    )
    assert changed.status_code == 200, changed.text
    # Main's a and b, and the branch's c.
    assert changed.json()["memories_reexpired"] == 3
    read = (await setup.branch_read("c")).json()
    kept = datetime.fromisoformat(read["expires_at"]) - datetime.fromisoformat(read["updated_at"])
    assert kept == timedelta(hours=1)
