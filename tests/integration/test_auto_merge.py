"""Auto-merge: a write based on an older version is merged with the changes since when
they touch different paths (Prefer: merge=auto, or the setting), refused with the list of
conflicting paths when they do not, and refused outright in strict mode."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.integration.helpers import assert_problem, create_session, if_match

AUTO = {"Prefer": "merge=auto"}


def merged_from(version: int) -> dict[str, str]:
    return {**if_match(version), **AUTO}


async def history(client: httpx.AsyncClient, url: str) -> list[dict[str, Any]]:
    """Every version, newest first."""
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"{url}/versions", params=params)).json()
        items += page["items"]
        cursor = page["next_cursor"]
        if cursor is None:
            return items


async def test_disjoint_writes_from_one_base_both_land(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    first = await client.patch(url, json={"progress_percentage": 40}, headers=merged_from(1))
    assert first.status_code == 200, first.text
    assert "Preference-Applied" not in first.headers  # it was based on the current version

    second = await client.patch(
        url,
        json={"session_state": {"active_process": "drafting"}, "priority": "high"},
        headers=merged_from(1),
    )
    assert second.status_code == 200, second.text
    assert second.headers["Preference-Applied"] == "merge=auto"
    assert second.headers["ETag"] == '"3"'
    body = second.json()
    assert body["progress_percentage"] == 40
    assert body["session_state"]["progress_percentage"] == 40
    assert body["session_state"]["active_process"] == "drafting"
    assert body["coordination_metadata"]["session_priority"] == "high"

    newest = (await history(client, url))[0]
    assert newest["version"] == 3
    assert newest["merge_base"] == 1
    assert newest["merged_branch"] is None
    assert "merged from version 1" in newest["change_reason"]


async def test_the_same_path_changed_differently_is_a_409_listing_it(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client, session_state={"agent_outputs": {"a": 1, "b": 1}})
    url = f"/v1/sessions/{session['session_id']}"
    await client.patch(
        url, json={"session_state": {"agent_outputs": {"a": 2}}}, headers=if_match(1)
    )
    refused = await client.patch(
        url,
        json={"session_state": {"agent_outputs": {"a": 3, "b": 3}}, "progress_percentage": 9},
        headers=merged_from(1),
    )
    problem = assert_problem(refused, 409)
    assert problem["type"] == "urn:switchboard:problem:merge-conflict"
    assert problem["current_version"] == 2
    assert problem["base_version"] == 1
    assert problem["conflicts"] == [
        {"path": "/session_state/agent_outputs/a", "base": 1, "current": 2, "proposed": 3}
    ]
    # Nothing of the refused write was stored (not even its disjoint parts).
    after = (await client.get(url)).json()
    assert after["version"] == 2
    assert after["session_state"]["agent_outputs"] == {"a": 2, "b": 1}
    assert after["progress_percentage"] == 0


async def test_strict_is_the_default_and_merge_strict_asks_for_it(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    await client.patch(url, json={"progress_percentage": 5}, headers=if_match(1))
    for headers in (if_match(1), {**if_match(1), "Prefer": "return=minimal, merge=strict"}):
        refused = await client.patch(url, json={"priority": "low"}, headers=headers)
        assert assert_problem(refused, 409)["type"] == "urn:switchboard:problem:version-conflict"


async def test_pending_actions_merge_by_id_not_by_index(client: httpx.AsyncClient) -> None:
    actions = [{"id": "a1", "type": "follow_up"}, {"id": "a2", "type": "follow_up"}]
    session = await create_session(client, session_state={"pending_actions": actions})
    url = f"/v1/sessions/{session['session_id']}"
    # One writer finishes a1 and queues a3; another, from the same base, cancels a2.
    done = [{"id": "a1", "type": "follow_up", "status": "done"}, actions[1]]
    first = await client.patch(
        url,
        json={"session_state": {"pending_actions": [*done, {"id": "a3", "type": "search"}]}},
        headers=merged_from(1),
    )
    assert first.status_code == 200, first.text
    cancelled = [actions[0], {"id": "a2", "type": "follow_up", "status": "cancelled"}]
    second = await client.patch(
        url, json={"session_state": {"pending_actions": cancelled}}, headers=merged_from(1)
    )
    assert second.status_code == 200, second.text
    merged = {a["id"]: a["status"] for a in second.json()["session_state"]["pending_actions"]}
    assert merged == {"a1": "done", "a2": "cancelled", "a3": "pending"}


async def test_a_handoff_merges_with_a_patch_made_since(client: httpx.AsyncClient) -> None:
    await client.post("/v1/agents", json={"name": "Merge_Helper_Agent", "roles": []})
    session = await create_session(client, current_agent="Planner")
    url = f"/v1/sessions/{session['session_id']}"
    await client.patch(url, json={"session_state": {"active_process": "x"}}, headers=if_match(1))
    handed = await client.post(
        f"{url}/handoff",
        json={"to_agent": "Merge_Helper_Agent", "reason": "needs help"},
        headers=merged_from(1),
    )
    assert handed.status_code == 200, handed.text
    assert handed.headers["Preference-Applied"] == "merge=auto"
    body = handed.json()
    assert body["current_agent"] == "Merge_Helper_Agent"
    assert body["session_state"]["active_process"] == "x"


async def test_a_base_that_does_not_exist_is_refused(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    refused = await client.patch(url, json={"priority": "low"}, headers=merged_from(7))
    assert assert_problem(refused, 409)["current_version"] == 1


async def test_a_completed_session_takes_no_merged_write(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    await client.post(f"{url}/complete", headers=if_match(1))
    refused = await client.patch(url, json={"priority": "low"}, headers=merged_from(1))
    assert assert_problem(refused, 409)["session_status"] == "completed"


# -- 20 agents, 15 writes each, from stale versions -------------------------------------------

# 15, not 50: 1,000 merged writes took 197 s of a loaded run (load 12), 300 take 55 s. The
# 20 agents still race from stale versions on every write, and the 301 versions still span
# two history pages.
AGENTS, WRITES = 20, 15


async def run_agents(client: httpx.AsyncClient, url: str, prefer: str) -> tuple[int, int]:
    """Each agent writes its own key of agent_outputs WRITES times, each time from the
    version its previous write returned (stale: the others wrote since). Returns the 409s
    seen and the merged writes."""
    conflicts = merged = 0

    async def agent(index: int) -> None:
        nonlocal conflicts, merged
        version = 1
        for write in range(WRITES):
            while True:
                response = await client.patch(
                    url,
                    json={
                        "session_state": {"agent_outputs": {f"agent{index}": {str(write): write}}}
                    },
                    headers={**if_match(version), "Prefer": f"merge={prefer}"},
                )
                if response.status_code == 200:
                    version = response.json()["version"]
                    merged += response.headers.get("Preference-Applied") == "merge=auto"
                    break
                assert_problem(response, 409)
                conflicts += 1
                version = response.json()["current_version"]  # strict: re-read and retry

    await asyncio.gather(*(agent(i) for i in range(AGENTS)))
    return conflicts, merged


def expected_outputs() -> dict[str, Any]:
    return {f"agent{i}": {str(w): w for w in range(WRITES)} for i in range(AGENTS)}


async def check_final(client: httpx.AsyncClient, url: str) -> None:
    final = (await client.get(url)).json()
    assert final["version"] == 1 + AGENTS * WRITES
    assert final["session_state"]["agent_outputs"] == expected_outputs()
    versions = [v["version"] for v in await history(client, url)]
    assert versions == list(range(final["version"], 0, -1))  # gapless, no duplicates


async def test_twenty_agents_writing_from_stale_versions_merge_without_a_409(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    conflicts, merged = await run_agents(client, url, "auto")
    assert conflicts == 0
    assert merged > 0
    await check_final(client, url)


async def test_twenty_agents_in_strict_mode_get_409s_retry_and_end_the_same(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    conflicts, merged = await run_agents(client, url, "strict")
    assert conflicts > 0
    assert merged == 0
    await check_final(client, url)
