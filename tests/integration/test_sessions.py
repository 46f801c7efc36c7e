"""The sessions API: creation, reads, merge patches, handoffs, completion, heartbeats."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from app.clock import Clock, FrozenClock
from tests.integration.helpers import assert_problem, create_session, create_user, if_match


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_create_returns_201_with_etag_location_and_seed_shape(
    client: httpx.AsyncClient,
) -> None:
    user_id = await create_user(client)
    response = await client.post(
        "/v1/sessions",
        json={
            "user_id": user_id,
            "session_type": "planning_session",
            "priority": "high",
            "session_state": {
                "active_process": "budget_plan",
                "conversation_context": {"summary": "wants a budget", "channel": "telegram"},
                "agent_outputs": {"Intent_Session_Agent": {"intent": "request_plan"}},
            },
            "coordination_metadata": {"complexity_score": 3.5, "resource_requirements": ["db"]},
        },
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["etag"] == '"1"'
    assert response.headers["location"] == f"/v1/sessions/{body['session_id']}"
    assert uuid.UUID(body["session_id"]).version == 7
    assert body["version"] == 1
    assert body["status"] == "active"
    assert body["session_type"] == "planning_session"
    assert body["agent_sequence"] == []
    state = body["session_state"]
    assert state["active_process"] == "budget_plan"
    assert state["progress_percentage"] == 0
    assert state["pending_actions"] == []
    assert state["conversation_context"]["channel"] == "telegram"  # extra keys allowed
    assert body["coordination_metadata"]["session_priority"] == "high"
    assert body["coordination_metadata"]["resource_requirements"] == ["db"]
    assert ts(body["expires_at"]) - ts(body["created_at"]) == timedelta(hours=24)


async def test_create_records_version_one(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    versions = (await client.get(f"/v1/sessions/{session['session_id']}/versions")).json()
    assert [(v["version"], v["change_reason"], v["changed_by"]) for v in versions["items"]] == [
        (1, "created", "admin")
    ]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"session_type": "karaoke"}, "session_type"),
        ({"progress_percentage": 101}, "progress_percentage"),
        ({"progress_percentage": -1}, "progress_percentage"),
        ({"priority": "whenever"}, "priority"),
        ({"session_state": {"pending_actions": "soon"}}, "session_state.pending_actions"),
        ({"session_state": {"mystery": 1}}, "session_state.mystery"),
        ({"session_state": {"conversation_context": {"turn_count": "many"}}}, None),
        ({"coordination_metadata": {"session_priority": "asap"}}, None),
        ({"ttl_seconds": 5}, "ttl_seconds"),
        ({"unknown_top_level": True}, "unknown_top_level"),
    ],
)
async def test_create_rejects_bad_fields_with_422_naming_them(
    client: httpx.AsyncClient, payload: dict[str, Any], field: str | None
) -> None:
    payload = {"user_id": await create_user(client), **payload}
    body = assert_problem(await client.post("/v1/sessions", json=payload), 422)
    fields = [error["field"] for error in body["errors"]]
    assert fields
    if field is not None:
        assert field in fields, fields


async def test_create_for_unknown_user_is_422(client: httpx.AsyncClient) -> None:
    body = assert_problem(
        await client.post("/v1/sessions", json={"user_id": str(uuid.uuid4())}), 422
    )
    assert body["errors"][0]["field"] == "user_id"


@pytest.mark.parametrize("ttl", [31 * 24 * 3600, 10**20])  # 10**20 overflowed timedelta
async def test_ttl_above_the_configured_maximum_is_422(client: httpx.AsyncClient, ttl: int) -> None:
    user_id = await create_user(client)
    response = await client.post("/v1/sessions", json={"user_id": user_id, "ttl_seconds": ttl})
    assert_problem(response, 422)


async def test_mirrored_progress_and_priority_must_agree(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    response = await client.post(
        "/v1/sessions",
        json={
            "user_id": user_id,
            "progress_percentage": 10,
            "session_state": {"progress_percentage": 20},
        },
    )
    assert_problem(response, 422)
    response = await client.post(
        "/v1/sessions",
        json={"user_id": user_id, "coordination_metadata": {"session_priority": "urgent"}},
    )
    assert response.status_code == 201
    assert response.json()["priority"] == "urgent"


async def test_explicit_nulls_on_create_mean_the_defaults(client: httpx.AsyncClient) -> None:
    """Found by schemathesis: a null progress used to reach the NOT NULL column (500)."""
    user_id = await create_user(client)
    response = await client.post(
        "/v1/sessions",
        json={"user_id": user_id, "progress_percentage": None, "priority": None},
    )
    assert response.status_code == 201, response.text
    assert (response.json()["progress_percentage"], response.json()["priority"]) == (0, "normal")


async def test_get_with_etag_and_if_none_match(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    response = await client.get(url)
    assert response.status_code == 200
    assert response.headers["etag"] == '"1"'
    assert response.json() == session
    not_modified = await client.get(url, headers={"If-None-Match": '"1"'})
    assert not_modified.status_code == 304
    assert not_modified.content == b""
    assert (await client.get(url, headers={"If-None-Match": '"7"'})).status_code == 200


async def test_unknown_session_is_404_everywhere(client: httpx.AsyncClient) -> None:
    sid = str(uuid.uuid4())
    assert_problem(await client.get(f"/v1/sessions/{sid}"), 404)
    assert_problem(
        await client.patch(f"/v1/sessions/{sid}", json={"priority": "low"}, headers=if_match(1)),
        404,
    )
    handoff = {"to_agent": "Make_Plan_Agent", "reason": "x", "base_version": 1}
    assert_problem(await client.post(f"/v1/sessions/{sid}/handoff", json=handoff), 404)
    assert_problem(await client.post(f"/v1/sessions/{sid}/complete", headers=if_match(1)), 404)
    assert_problem(await client.post(f"/v1/sessions/{sid}/touch"), 404)
    assert_problem(await client.get(f"/v1/sessions/{sid}/versions"), 404)
    assert_problem(await client.get(f"/v1/sessions/{sid}/versions/1"), 404)
    assert_problem(
        await client.post(
            f"/v1/sessions/{sid}/rollback", json={"to_version": 1, "base_version": 1}
        ),
        404,
    )


async def test_patch_is_a_json_merge_patch(client: httpx.AsyncClient) -> None:
    session = await create_session(
        client,
        session_state={
            "agent_outputs": {"a": {"keep": 1, "drop": 2}, "b": 1},
            "user_preferences": {"language": "de"},
        },
    )
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        content=b'{"session_state": {"agent_outputs": {"a": {"drop": null, "new": 3}, "b": null}},'
        b' "progress_percentage": 35, "current_agent": "Make_Plan_Agent"}',
        headers={"content-type": "application/merge-patch+json", **if_match(1)},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert response.headers["etag"] == '"2"'
    assert body["version"] == 2
    assert body["session_state"]["agent_outputs"] == {"a": {"keep": 1, "new": 3}}
    assert body["session_state"]["user_preferences"]["language"] == "de"
    assert body["progress_percentage"] == 35
    assert body["session_state"]["progress_percentage"] == 35
    assert body["current_agent"] == "Make_Plan_Agent"
    assert ts(body["updated_at"]) >= ts(session["updated_at"])
    assert ts(body["last_activity_at"]) == ts(body["updated_at"])


async def test_patch_progress_through_session_state_moves_the_column(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        json={"session_state": {"progress_percentage": 60}, "base_version": 1},
    )
    assert response.status_code == 200
    assert response.json()["progress_percentage"] == 60


async def test_patch_without_precondition_is_428(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    body = assert_problem(
        await client.patch(f"/v1/sessions/{session['session_id']}", json={"priority": "low"}), 428
    )
    assert "If-Match" in body["detail"]


async def test_stale_patch_is_409_with_current_version_and_state(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    assert (
        await client.patch(url, json={"progress_percentage": 10}, headers=if_match(1))
    ).status_code == 200
    body = assert_problem(
        await client.patch(url, json={"progress_percentage": 20}, headers=if_match(1)), 409
    )
    assert body["current_version"] == 2
    assert body["current"]["progress_percentage"] == 10
    assert body["current"]["session_state"]["progress_percentage"] == 10
    assert (await client.get(url)).json()["version"] == 2


async def test_if_match_star_writes_whatever_is_current(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        json={"priority": "urgent"},
        headers={"If-Match": "*"},
    )
    assert response.status_code == 200
    assert response.json()["coordination_metadata"]["session_priority"] == "urgent"


@pytest.mark.parametrize("header", ["3", 'W/"1"', '"abc"', '"1', "", '"99999999999999999999"'])
async def test_garbage_if_match_is_400(client: httpx.AsyncClient, header: str) -> None:
    session = await create_session(client)
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        json={"priority": "low"},
        headers={"If-Match": header},
    )
    assert_problem(response, 400)


@pytest.mark.parametrize(
    "patch",
    [
        {"version": 9},
        {"session_id": "x"},
        {"user_id": "x"},
        {"progress_percentage": 101},
        {"progress_percentage": None},
        {"status": "completed"},
        {"status": "expired"},
        {"session_state": {"pending_actions": [{"no_type": True}]}},
        {"session_state": {"active_process": 5}},
        {"coordination_metadata": {"complexity_score": "high"}},
        {"base_version": "1"},
        {"base_version": True},
    ],
)
async def test_invalid_patches_are_422_and_change_nothing(
    client: httpx.AsyncClient, patch: dict[str, Any]
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    assert_problem(await client.patch(url, json=patch, headers=if_match(1)), 422)
    assert (await client.get(url)).json() == session


async def test_patch_body_must_be_an_object(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}", json=[1, 2], headers=if_match(1)
    )
    assert_problem(response, 422)


async def test_null_session_state_resets_it_to_defaults(client: httpx.AsyncClient) -> None:
    session = await create_session(client, session_state={"agent_outputs": {"x": 1}})
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}", json={"session_state": None}, headers=if_match(1)
    )
    assert response.status_code == 200
    assert response.json()["session_state"]["agent_outputs"] == {}


async def test_handoff_appends_executions_and_sets_current_agent(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    first = await client.post(
        f"{url}/handoff",
        json={"to_agent": "Intent_Session_Agent", "reason": "new message"},
        headers=if_match(1),
    )
    assert first.status_code == 200, first.text
    assert first.headers["etag"] == '"2"'
    second = await client.post(
        f"{url}/handoff",
        json={
            "to_agent": "Make_Plan_Agent",
            "reason": "user wants a plan",
            "output_summary": "intent: request_plan",
            "base_version": 2,
        },
    )
    assert second.status_code == 200, second.text
    body = second.json()
    assert body["current_agent"] == "Make_Plan_Agent"
    sequence = body["agent_sequence"]
    assert [(s["agent_name"], s["execution_order"], s["status"]) for s in sequence] == [
        ("Intent_Session_Agent", 1, "completed"),
        ("Make_Plan_Agent", 2, "executing"),
    ]
    assert sequence[0]["output_summary"] == "intent: request_plan"
    assert sequence[0]["next_agent"] == "Make_Plan_Agent"
    assert sequence[0]["completion_time"] is not None
    assert sequence[1]["start_time"] is not None
    reasons = [v["change_reason"] for v in (await client.get(f"{url}/versions")).json()["items"]]
    assert reasons == [
        "handoff to Make_Plan_Agent: user wants a plan",
        "handoff to Intent_Session_Agent: new message",
        "created",
    ]


async def test_handoff_needs_a_precondition_and_valid_body(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}/handoff"
    assert_problem(await client.post(url, json={"to_agent": "A", "reason": "r"}), 428)
    assert_problem(await client.post(url, json={"reason": "r", "base_version": 1}), 422)
    assert_problem(
        await client.post(url, json={"to_agent": "", "reason": "r", "base_version": 1}), 422
    )
    assert_problem(
        await client.post(url, json={"to_agent": "A", "reason": "r", "base_version": 5}), 409
    )


async def test_handoff_only_to_a_registered_enabled_agent(client: httpx.AsyncClient) -> None:
    """A handoff names the agent that works next: one Switchboard does not know, or one
    that is switched off, is a 422 naming ``to_agent``, and the session is unchanged."""
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"

    unknown = assert_problem(
        await client.post(
            f"{url}/handoff", json={"to_agent": "Nobody_Agent", "reason": "r"}, headers=if_match(1)
        ),
        422,
    )
    assert unknown["errors"] == [{"field": "to_agent", "message": "not a registered agent"}]
    assert "Nobody_Agent" in unknown["detail"]

    # Switched off for routing (enabled: false), or its key revoked (DELETE): both refused.
    assert (
        await client.patch("/v1/agents/Educate_Customer_Agent", json={"enabled": False})
    ).status_code == 200
    assert (await client.post("/v1/agents", json={"name": "Make_Plan_Agent"})).status_code == 201
    assert (await client.delete("/v1/agents/Make_Plan_Agent")).status_code == 204
    for agent in ("Educate_Customer_Agent", "Make_Plan_Agent"):
        off = assert_problem(
            await client.post(
                f"{url}/handoff", json={"to_agent": agent, "reason": "r"}, headers=if_match(1)
            ),
            422,
        )
        assert off["errors"] == [{"field": "to_agent", "message": "agent is disabled"}]
        assert agent in off["detail"]
        assert "disabled" in off["detail"]

    current = await client.get(url)
    assert current.headers["etag"] == '"1"'
    assert current.json()["current_agent"] is None
    # A seeded agent that has no key of its own is a valid target (n8n calls it by url).
    ok = await client.post(
        f"{url}/handoff",
        json={"to_agent": "Orchestrator_Agent", "reason": "r"},
        headers=if_match(1),
    )
    assert ok.status_code == 200, ok.text


async def test_complete_closes_the_session_to_content_changes(client: httpx.AsyncClient) -> None:
    session = await create_session(client, session_state={"active_process": "plan"})
    url = f"/v1/sessions/{session['session_id']}"
    await client.post(
        f"{url}/handoff", json={"to_agent": "Make_Plan_Agent", "reason": "r"}, headers=if_match(1)
    )
    response = await client.post(
        f"{url}/complete", json={"output_summary": "plan delivered"}, headers=if_match(2)
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "completed"
    assert body["completed_at"] is not None
    assert body["session_state"]["active_process"] is None
    assert body["agent_sequence"][-1]["status"] == "completed"
    assert body["agent_sequence"][-1]["output_summary"] == "plan delivered"

    assert_problem(await client.patch(url, json={"priority": "low"}, headers=if_match(3)), 409)
    assert_problem(
        await client.post(
            f"{url}/handoff", json={"to_agent": "A", "reason": "r"}, headers=if_match(3)
        ),
        409,
    )
    assert_problem(await client.post(f"{url}/complete", headers=if_match(3)), 409)
    assert_problem(await client.post(f"{url}/touch"), 409)
    # Preserving a finished session (exempting it from cleanup) is still allowed.
    preserved = await client.patch(url, json={"preserve": True}, headers=if_match(3))
    assert preserved.status_code == 200, preserved.text
    assert preserved.json()["preserve"] is True
    assert preserved.json()["status"] == "completed"


async def test_complete_without_body_and_without_precondition(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}/complete"
    assert_problem(await client.post(url), 428)
    response = await client.post(url, headers=if_match(1))
    assert response.status_code == 200
    assert response.json()["status"] == "completed"


class TestTouch:
    @pytest.fixture
    def clock(self, frozen_clock: FrozenClock) -> Clock:
        return frozen_clock

    async def test_touch_extends_expiry_only_with_an_active_process(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        running = await create_session(
            client, session_state={"active_process": "data_collection"}, ttl_seconds=3600
        )
        idle = await create_session(client, ttl_seconds=3600)
        frozen_clock.advance(timedelta(minutes=50))

        touched = (await client.post(f"/v1/sessions/{running['session_id']}/touch")).json()
        assert ts(touched["expires_at"]) == frozen_clock.now() + timedelta(hours=4)
        assert ts(touched["last_activity_at"]) == frozen_clock.now()
        assert touched["version"] == running["version"]  # a heartbeat is not a new version

        untouched = (await client.post(f"/v1/sessions/{idle['session_id']}/touch")).json()
        assert untouched["expires_at"] == idle["expires_at"]
        assert ts(untouched["last_activity_at"]) == frozen_clock.now()

    async def test_touch_never_shortens_expiry(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        session = await create_session(client, session_state={"active_process": "plan"})
        touched = (await client.post(f"/v1/sessions/{session['session_id']}/touch")).json()
        assert touched["expires_at"] == session["expires_at"]  # 24 h > 4 h extension

    async def test_touch_wakes_an_idle_session(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        session = await create_session(client)
        url = f"/v1/sessions/{session['session_id']}"
        idled = await client.patch(url, json={"status": "idle"}, headers=if_match(1))
        assert idled.json()["status"] == "idle"
        assert (await client.post(f"{url}/touch")).json()["status"] == "active"

    async def test_created_and_updated_times_come_from_the_clock(
        self, client: httpx.AsyncClient, frozen_clock: FrozenClock
    ) -> None:
        session = await create_session(client)
        assert ts(session["created_at"]) == frozen_clock.now()
        frozen_clock.advance(timedelta(minutes=5))
        patched = await client.patch(
            f"/v1/sessions/{session['session_id']}", json={"priority": "low"}, headers=if_match(1)
        )
        assert ts(patched.json()["updated_at"]) == frozen_clock.now()
        assert ts(patched.json()["created_at"]) == frozen_clock.now() - timedelta(minutes=5)


async def test_versions_are_paginated_newest_first(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    for version in range(1, 6):
        response = await client.patch(
            url, json={"progress_percentage": version * 10}, headers=if_match(version)
        )
        assert response.status_code == 200
    seen: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        page = (await client.get(f"{url}/versions", params=params)).json()
        seen += [item["version"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [6, 5, 4, 3, 2, 1]
    v3 = (await client.get(f"{url}/versions/3")).json()
    assert v3["progress_percentage"] == 20
    assert v3["session_state"]["progress_percentage"] == 20
    assert_problem(await client.get(f"{url}/versions/99"), 404)
    # A cursor is a parameter: 400, as for every other list.
    # A cursor is a parameter: 400, as for every other list.
    assert_problem(await client.get(f"{url}/versions", params={"cursor": "abc"}), 400)
    # str.isdigit() says yes to these; int() does not (superscript two, Arabic-Indic one).
    for digits in ("\u00b2", "\u0661"):
        assert_problem(await client.get(f"{url}/versions", params={"cursor": digits}), 400)


async def test_rollback_creates_a_new_version_equal_to_the_old_content(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client, session_state={"agent_outputs": {"v": 1}})
    url = f"/v1/sessions/{session['session_id']}"
    await client.patch(
        url,
        json={"session_state": {"agent_outputs": {"v": 2}}, "progress_percentage": 50},
        headers=if_match(1),
    )
    await client.post(
        f"{url}/handoff", json={"to_agent": "Make_Plan_Agent", "reason": "r"}, headers=if_match(2)
    )
    response = await client.post(f"{url}/rollback", json={"to_version": 1}, headers=if_match(3))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["version"] == 4
    assert body["session_state"] == session["session_state"]
    assert body["agent_sequence"] == []
    assert body["current_agent"] is None
    assert body["progress_percentage"] == 0
    history = (await client.get(f"{url}/versions")).json()["items"]
    assert [v["version"] for v in history] == [4, 3, 2, 1]
    assert history[0]["change_reason"] == "rollback to version 1"
    assert history[2]["session_state"]["agent_outputs"] == {"v": 2}  # history kept whole


async def test_rollback_errors(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}/rollback"
    assert_problem(await client.post(url, json={"to_version": 1}), 428)
    assert_problem(await client.post(url, json={"to_version": 9}, headers=if_match(1)), 404)
    assert_problem(await client.post(url, json={"to_version": 0}, headers=if_match(1)), 422)
    assert_problem(await client.post(url, json={"to_version": 1}, headers=if_match(4)), 409)


async def test_user_sessions_keyset_pagination_and_status_filter(
    client: httpx.AsyncClient,
) -> None:
    user_id = await create_user(client)
    created = [await create_session(client, user_id=user_id) for _ in range(5)]
    await create_session(client)  # someone else's
    completed = created[1]["session_id"]
    await client.post(f"/v1/sessions/{completed}/complete", headers=if_match(1))

    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2}
        if cursor:
            params["cursor"] = cursor
        response = await client.get(f"/v1/users/{user_id}/sessions", params=params)
        assert response.status_code == 200
        page = response.json()
        seen += [s["session_id"] for s in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [s["session_id"] for s in reversed(created)]

    done = (
        await client.get(f"/v1/users/{user_id}/sessions", params={"status": "completed"})
    ).json()
    assert [s["session_id"] for s in done["items"]] == [completed]
    active = (await client.get(f"/v1/users/{user_id}/sessions", params={"status": "active"})).json()
    assert len(active["items"]) == 4


async def test_user_sessions_errors(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    url = f"/v1/users/{user_id}/sessions"
    assert (await client.get(url)).json() == {"items": [], "next_cursor": None}
    assert_problem(await client.get(f"/v1/users/{uuid.uuid4()}/sessions"), 404)
    assert_problem(await client.get(url, params={"status": "sleeping"}), 400)
    # Expiry is not a status (an expired session is archived), so no list filters by it.
    assert_problem(await client.get(url, params={"status": "expired"}), 400)
    assert_problem(await client.get(url, params={"limit": 0}), 400)
    assert_problem(await client.get(url, params={"limit": 201}), 400)
    assert_problem(await client.get(url, params={"cursor": "!!!"}), 400)
    assert_problem(await client.get(url, params={"cursor": "WzEsMiwzXQ"}), 400)  # [1,2,3]


async def test_agents_may_use_sessions_and_are_recorded_as_authors(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    agent = await make_agent_client("Orchestrator_Agent", ["coordination_manager"])
    async with agent:
        session = await create_session(agent, user_id=await create_user(client))
        url = f"/v1/sessions/{session['session_id']}"
        assert (
            await agent.patch(url, json={"priority": "high"}, headers=if_match(1))
        ).status_code == 200
    history = (await client.get(f"{url}/versions")).json()["items"]
    assert {v["changed_by"] for v in history} == {"Orchestrator_Agent"}


async def test_every_session_answer_with_an_etag_is_built_once_by_lean_response(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Create, read, PATCH (merged too), handoff, touch, rollback and complete answer through
    ``LeanResponse``'s direct path (headers encoded once, app/common/responses.py), with
    their ETag, Location and Preference-Applied as before."""
    import app.common.responses as responses

    built: list[int] = []

    class Counted(responses._Answer):
        __slots__ = ()

        def __init__(
            self, body: bytes, status_code: int, raw_headers: list[tuple[bytes, bytes]]
        ) -> None:
            built.append(status_code)
            super().__init__(body, status_code, raw_headers)

    user_id = await create_user(client)
    monkeypatch.setattr(responses, "_Answer", Counted)
    created = await client.post("/v1/sessions", json={"user_id": user_id})
    url = created.headers["location"]
    assert url == f"/v1/sessions/{created.json()['session_id']}"
    merge = {"Prefer": "merge=auto", **if_match(1)}
    answers = [
        created,
        await client.get(url),
        await client.patch(url, json={"progress_percentage": 40}, headers=if_match(1)),
        merged := await client.patch(url, json={"priority": "high"}, headers=merge),
        await client.post(
            f"{url}/handoff",
            json={"to_agent": "Make_Plan_Agent", "reason": "r"},
            headers=if_match(3),
        ),
        await client.post(f"{url}/touch"),
        await client.post(f"{url}/rollback", json={"to_version": 1}, headers=if_match(4)),
        await client.post(f"{url}/complete", headers=if_match(5)),
    ]
    assert [a.status_code for a in answers] == [201, 200, 200, 200, 200, 200, 200, 200]
    assert [a.headers["etag"] for a in answers] == [f'"{a.json()["version"]}"' for a in answers]
    assert merged.headers["preference-applied"] == "merge=auto"
    assert built == [a.status_code for a in answers]
