"""Branches of a session: fork, parallel work, merge (clean, conflicting, resolved),
rebase, delete, the version graph, expiry of idle branches and erasure; bad input is a
4xx problem."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.helpers import assert_problem, create_session, if_match


async def fork(
    client: httpx.AsyncClient, sid: str, name: str, purpose: str = "analysis", **more: Any
) -> dict[str, Any]:
    response = await client.post(
        f"/v1/sessions/{sid}/branches", json={"name": name, "purpose": purpose, **more}
    )
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.fixture
async def session(client: httpx.AsyncClient) -> dict[str, Any]:
    return await create_session(
        client,
        session_state={
            "agent_outputs": {"planner": "draft"},
            "pending_actions": [{"id": "p1", "type": "search"}],
        },
    )


async def test_fork_work_on_both_and_merge_cleanly(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    created = await client.post(
        f"{url}/branches",
        json={"name": "security-review", "purpose": "analysis", "owner_agent": "code-analyzer"},
    )
    assert created.status_code == 201, created.text
    assert created.headers["Location"] == f"{url}/branches/security-review"
    assert created.headers["ETag"] == '"1"'
    branch = created.json()
    assert branch["base_version"] == branch["forked_at_version"] == branch["version"] == 1
    assert branch["owner_agent"] == "code-analyzer"
    assert branch["parent"] == "main"
    assert branch["session_state"]["agent_outputs"] == {"planner": "draft"}

    # Work on the branch and on main, in parallel, on different paths.
    on_branch = await client.patch(
        f"{url}/branches/security-review",
        json={"session_state": {"agent_outputs": {"analyzer": "found 2 issues"}}},
        headers=if_match(1),
    )
    assert on_branch.status_code == 200, on_branch.text
    assert on_branch.json()["version"] == 2
    on_main = await client.patch(url, json={"priority": "high"}, headers=if_match(1))
    assert on_main.status_code == 200
    # Main does not see the branch's work, nor the branch main's.
    assert "analyzer" not in on_main.json()["session_state"]["agent_outputs"]
    assert (await client.get(f"{url}/branches/security-review")).json()["priority"] == "normal"

    listing = (await client.get(f"{url}/branches")).json()
    assert listing["session_version"] == 2
    [listed] = listing["items"]
    assert (listed["name"], listed["base_version"], listed["version"]) == ("security-review", 1, 2)
    assert listed["purpose"] == "analysis"
    assert listed["state"] == "open"

    merged = await client.post(f"{url}/branches/security-review/merge")
    assert merged.status_code == 200, merged.text
    assert merged.headers["ETag"] == '"3"'
    body = merged.json()
    assert body["session_state"]["agent_outputs"] == {
        "planner": "draft",
        "analyzer": "found 2 issues",
    }
    assert body["priority"] == "high"
    newest = (await client.get(f"{url}/versions/3")).json()
    assert (newest["merged_branch"], newest["merged_branch_version"], newest["merge_base"]) == (
        "security-review",
        2,
        1,
    )
    after = (await client.get(f"{url}/branches/security-review")).json()
    assert (after["state"], after["merged_version"]) == ("merged", 3)

    # A merged branch takes no more writes.
    refused = await client.patch(
        f"{url}/branches/security-review", json={"priority": "low"}, headers=if_match(2)
    )
    assert assert_problem(refused, 409)["branch_state"] == "merged"

    graph = (await client.get(f"{url}/graph")).json()
    parents = {node["id"]: node["parents"] for node in graph["nodes"]}
    assert parents["main@3"] == ["main@2", "security-review@2"]
    assert parents["security-review@1"] == ["main@1"]
    assert parents["security-review@2"] == ["security-review@1"]


async def test_a_conflicting_merge_lists_the_paths_and_a_resolution_completes_it(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    await fork(client, sid, "alt", "alternative_solution")
    await client.patch(
        f"{url}/branches/alt",
        json={"session_state": {"agent_outputs": {"planner": "plan B"}}, "priority": "urgent"},
        headers=if_match(1),
    )
    await client.patch(
        url,
        json={"session_state": {"agent_outputs": {"planner": "plan A"}}, "priority": "low"},
        headers=if_match(1),
    )
    refused = await client.post(f"{url}/branches/alt/merge")
    problem = assert_problem(refused, 409)
    assert problem["type"] == "urn:switchboard:problem:merge-conflict"
    assert (problem["current_version"], problem["branch_version"], problem["base_version"]) == (
        2,
        2,
        1,
    )
    assert sorted(problem["conflicts"], key=lambda c: c["path"]) == [
        {"path": "/priority", "base": "normal", "current": "low", "proposed": "urgent"},
        {
            "path": "/session_state/agent_outputs/planner",
            "base": "draft",
            "current": "plan A",
            "proposed": "plan B",
        },
    ]
    assert (await client.get(url)).json()["version"] == 2  # nothing written

    # A resolution that leaves a conflict out is refused, naming it.
    partial = await client.post(
        f"{url}/branches/alt/merge", json={"choices": {"/priority": {"take": "ours"}}}
    )
    assert assert_problem(partial, 422)["errors"] == [
        {
            "field": "/session_state/agent_outputs/planner",
            "message": "no choice for this conflicting path",
        }
    ]

    resolved = await client.post(
        f"{url}/branches/alt/merge",
        json={
            "choices": {
                "/priority": {"take": "theirs"},
                "/session_state/agent_outputs/planner": {"take": "value", "value": "plan A+B"},
            }
        },
    )
    assert resolved.status_code == 200, resolved.text
    body = resolved.json()
    assert body["priority"] == "low"
    assert body["session_state"]["agent_outputs"]["planner"] == "plan A+B"
    assert body["version"] == 3


async def test_a_whole_document_resolves_a_merge(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    await fork(client, sid, "verify", "verification")
    await client.patch(f"{url}/branches/verify", json={"priority": "urgent"}, headers=if_match(1))
    await client.patch(url, json={"priority": "low"}, headers=if_match(1))
    bad = await client.post(
        f"{url}/branches/verify/merge", json={"document": {"progress_percentage": 500}}
    )
    assert assert_problem(bad, 422)["errors"][0]["field"].endswith("progress_percentage")
    done = await client.post(
        f"{url}/branches/verify/merge",
        json={"document": {"priority": "high", "progress_percentage": 80}},
    )
    assert done.status_code == 200, done.text
    assert (done.json()["priority"], done.json()["progress_percentage"]) == ("high", 80)


async def test_rebase_replays_the_branch_on_the_head(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    await fork(client, sid, "collab", "collaboration")
    await client.patch(
        f"{url}/branches/collab",
        json={"session_state": {"agent_outputs": {"helper": 1}}},
        headers=if_match(1),
    )
    await client.patch(url, json={"progress_percentage": 30}, headers=if_match(1))
    rebased = await client.post(f"{url}/branches/collab/rebase")
    assert rebased.status_code == 200, rebased.text
    body = rebased.json()
    assert rebased.headers["ETag"] == '"3"'
    assert (body["base_version"], body["version"], body["forked_at_version"]) == (2, 3, 1)
    assert body["progress_percentage"] == 30
    assert body["session_state"]["agent_outputs"] == {"planner": "draft", "helper": 1}
    version = (await client.get(f"{url}/branches/collab/versions/3")).json()
    assert version["parent_version"] == 2

    # A conflicting rebase is refused with the list.
    await client.patch(f"{url}/branches/collab", json={"priority": "high"}, headers=if_match(3))
    await client.patch(url, json={"priority": "low"}, headers=if_match(2))
    refused = await client.post(f"{url}/branches/collab/rebase")
    assert [c["path"] for c in assert_problem(refused, 409)["conflicts"]] == ["/priority"]
    settled = await client.post(
        f"{url}/branches/collab/rebase", json={"choices": {"/priority": {"take": "ours"}}}
    )
    assert settled.status_code == 200, settled.text
    assert (settled.json()["priority"], settled.json()["base_version"]) == ("high", 3)


async def test_branch_writes_auto_merge_like_the_session(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}/branches/team"
    await fork(client, sid, "team", "collaboration")
    await client.patch(url, json={"progress_percentage": 10}, headers=if_match(1))
    stale = await client.patch(url, json={"priority": "high"}, headers=if_match(1))
    assert assert_problem(stale, 409)["current_version"] == 2
    merged = await client.patch(
        url, json={"priority": "high"}, headers={**if_match(1), "Prefer": "merge=auto"}
    )
    assert merged.status_code == 200, merged.text
    assert merged.headers["Preference-Applied"] == "merge=auto"
    assert (merged.json()["progress_percentage"], merged.json()["priority"]) == (10, "high")
    history = (await client.get(f"{url}/versions")).json()["items"]
    assert [(v["version"], v["merge_base"]) for v in history] == [(3, 1), (2, None), (1, None)]


async def test_fork_at_an_older_version_and_delete(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    await client.patch(url, json={"progress_percentage": 50}, headers=if_match(1))
    old = await fork(client, sid, "from-one", "conflict_resolution", from_version=1)
    assert (old["base_version"], old["progress_percentage"]) == (1, 0)
    deleted = await client.delete(f"{url}/branches/from-one")
    assert deleted.status_code == 204
    assert_problem(await client.get(f"{url}/branches/from-one"), 404)
    assert_problem(await client.delete(f"{url}/branches/from-one"), 404)
    assert (await client.get(f"{url}/branches")).json()["items"] == []


async def test_bad_input_is_a_4xx_problem(
    client: httpx.AsyncClient, session: dict[str, Any]
) -> None:
    sid = session["session_id"]
    url = f"/v1/sessions/{sid}"
    await fork(client, sid, "taken")
    assert_problem(await client.get(f"{url}/branches/nope"), 404)
    assert_problem(await client.post(f"{url}/branches/nope/merge"), 404)
    assert_problem(await client.post(f"{url}/branches/nope/rebase"), 404)
    assert_problem(await client.get(f"{url}/branches/nope/versions"), 404)
    assert_problem(
        await client.patch(f"{url}/branches/nope", json={"priority": "low"}, headers=if_match(1)),
        404,
    )
    unknown_session = "/v1/sessions/01900000-0000-7000-8000-000000000000"
    assert_problem(await client.get(f"{unknown_session}/branches"), 404)
    assert_problem(
        await client.post(f"{unknown_session}/branches", json={"name": "x", "purpose": "analysis"}),
        404,
    )
    assert_problem(await client.get(f"{unknown_session}/graph"), 404)
    for body in (
        {"name": "x", "purpose": "daydreaming"},
        {"name": "main", "purpose": "analysis"},
        {"name": "Has Spaces", "purpose": "analysis"},
        {"name": "x", "purpose": "analysis", "from_version": 99},
        {"name": "x", "purpose": "analysis", "colour": "red"},
    ):
        assert_problem(await client.post(f"{url}/branches", json=body), 422)
    duplicate = await client.post(f"{url}/branches", json={"name": "taken", "purpose": "analysis"})
    assert assert_problem(duplicate, 409)["branch"] == "taken"
    # Life is not branch content; a patch needs its base.
    for patch in ({"status": "idle"}, {"preserve": True}):
        assert_problem(
            await client.patch(f"{url}/branches/taken", json=patch, headers=if_match(1)), 422
        )
    assert_problem(await client.patch(f"{url}/branches/taken", json={"priority": "low"}), 428)
    # A resolution is choices or a document, of known paths and fields.
    for body in (
        {"choices": {"/priority": {"take": "mine"}}},
        {"choices": {}, "document": {}},
        {"document": {"status": "completed"}},
    ):
        assert_problem(await client.post(f"{url}/branches/taken/merge", json=body), 422)
    assert (await client.get(url)).json()["version"] == 1  # nothing was written
