"""Inputs are validated strictly, as the OpenAPI schema documents them: no bool for an int
or an int for a bool, no number for a string or a string for a number, a date-time written
as one; parameters too. Each refusal names the field; nothing changes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.integration.helpers import assert_problem, create_session, create_user, if_match


def _names(body: dict[str, Any], field: str) -> None:
    assert [error["field"] for error in body["errors"]] == [field], body


@pytest.mark.parametrize("weight", [False, True, "50", 50.0, 50.5], ids=str)
async def test_an_intent_weight_is_an_integer(client: httpx.AsyncClient, weight: Any) -> None:
    before = (await client.get("/v1/intents")).json()
    response = await client.put("/v1/intents/budgeting", json={"base_weight": weight})
    _names(assert_problem(response, 422), "base_weight")
    assert (await client.get("/v1/intents")).json() == before


async def test_an_intent_weight_that_is_an_integer_is_stored(client: httpx.AsyncClient) -> None:
    response = await client.put("/v1/intents/budgeting", json={"base_weight": 55})
    assert response.status_code == 200, response.text
    assert response.json()["base_weight"] == 55


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/intent-modifiers/user_expressed_urgency", {"points": "25"}, "points"),
        (
            "/v1/memory-categories/session_data",
            {"retention_seconds": "3600", "default_access_level": "all_agents"},
            "retention_seconds",
        ),
        ("/v1/memory-categories/session_data", {"default_access_level": 1}, "default_access_level"),
    ],
    ids=["modifier-points", "retention", "level"],
)
async def test_strings_and_numbers_are_not_interchangeable(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], field: str
) -> None:
    _names(assert_problem(await client.put(path, json=body), 422), field)


@pytest.mark.parametrize("enabled", [0, 1, "true"], ids=str)
async def test_enabled_is_a_boolean(client: httpx.AsyncClient, enabled: Any) -> None:
    response = await client.patch("/v1/agents/Make_Plan_Agent", json={"enabled": enabled})
    _names(assert_problem(response, 422), "enabled")
    created = await client.post("/v1/agents", json={"name": "Strict_Agent", "enabled": enabled})
    _names(assert_problem(created, 422), "enabled")
    assert_problem(await client.get("/v1/agents/Strict_Agent"), 404)


async def test_timeouts_are_integers_not_strings(client: httpx.AsyncClient) -> None:
    response = await client.patch("/v1/agents/Make_Plan_Agent", json={"timeout_ms": "5000"})
    _names(assert_problem(response, 422), "timeout_ms")


@pytest.mark.parametrize("preserve", [0, 1, "false"], ids=str)
async def test_preserve_is_a_boolean(client: httpx.AsyncClient, preserve: Any) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    patched = await client.patch(url, json={"preserve": preserve}, headers=if_match(1))
    _names(assert_problem(patched, 422), "preserve")
    assert (await client.get(url)).json()["version"] == 1
    user_id = await create_user(client)
    created = await client.post("/v1/sessions", json={"user_id": user_id, "preserve": preserve})
    _names(assert_problem(created, 422), "preserve")


async def test_progress_is_an_integer_in_a_patch(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    for progress in ("40", 40.5, True):
        response = await client.patch(
            url, json={"progress_percentage": progress}, headers=if_match(1)
        )
        _names(assert_problem(response, 422), "progress_percentage")
    assert (await client.patch(url, json={"progress_percentage": 40}, headers=if_match(1))).json()[
        "progress_percentage"
    ] == 40


async def test_a_memory_key_is_a_string_in_a_batch_too(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    item = {"user_id": user_id, "memory_type": "orchestrator", "content": {}}
    body = assert_problem(await client.post("/v1/memories", json=[item, {**item, "key": 7}]), 422)
    _names(body, "1.key")
    single = await client.post("/v1/memories", json={**item, "key": 7})
    _names(assert_problem(single, 422), "key")
    assert (await client.get("/v1/memories", params={"user_id": user_id})).json()["items"] == []


async def test_a_user_reference_is_a_string(client: httpx.AsyncClient) -> None:
    _names(
        assert_problem(await client.post("/v1/users", json={"external_ref": 42}), 422),
        "external_ref",
    )


async def test_a_date_time_is_written_as_one_in_a_body(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    for written in ("0.5", "1700000000", 1700000000):
        action = {"type": "follow_up", "created_at": written}
        response = await client.patch(
            url, json={"session_state": {"pending_actions": [action]}}, headers=if_match(1)
        )
        _names(assert_problem(response, 422), "session_state.pending_actions.0.created_at")
    action = {"type": "follow_up", "created_at": "2026-11-01T12:00:00Z"}
    response = await client.patch(
        url, json={"session_state": {"pending_actions": [action]}}, headers=if_match(1)
    )
    assert response.status_code == 200, response.text

    query = {"action": "query", "agent_name": "Orchestrator_Agent", "user_id": session["user_id"]}
    hook = await client.post("/webhooks/n8n/memory", json={**query, "since": "0.5"})
    _names(assert_problem(hook, 422), "since")
    fine = await client.post(
        "/webhooks/n8n/memory", json={**query, "since": "2026-01-01T00:00:00Z"}
    )
    assert fine.status_code == 200, fine.text


def _parameter_named(response: httpx.Response, name: str) -> str:
    body = assert_problem(response, 400)
    assert body["type"].endswith(":invalid-parameter")
    (error,) = body["errors"]
    assert error["field"] == name, body
    message: str = error["message"]
    return message


@pytest.mark.parametrize("since", ["0.5", "1700000000", "-1"])
async def test_since_is_a_date_time_not_a_number(client: httpx.AsyncClient, since: str) -> None:
    user_id = await create_user(client)
    listed = await client.get("/v1/memories", params={"user_id": user_id, "since": since})
    assert "RFC 3339" in _parameter_named(listed, "since")
    audited = await client.get("/v1/audit/memory", params={"since": since})
    _parameter_named(audited, "since")


@pytest.mark.parametrize("limit", ["1e1", "10.0", "0x10"])
async def test_limit_is_written_in_digits(client: httpx.AsyncClient, limit: str) -> None:
    user_id = await create_user(client)
    response = await client.get("/v1/memories", params={"user_id": user_id, "limit": limit})
    _parameter_named(response, "limit")


@pytest.mark.parametrize("flag", ["1", "0", "TRUE", "yes"])
async def test_boolean_parameters_are_true_or_false(client: httpx.AsyncClient, flag: str) -> None:
    response = await client.post("/v1/jobs/housekeeping/run", params={"dry_run": flag})
    _parameter_named(response, "dry_run")
    assert (await client.get("/v1/jobs/housekeeping/runs")).json()["items"] == []
    category = {"default_access_level": "all_agents", "retention_seconds": 3600}
    reapplied = await client.put(
        "/v1/memory-categories/session_data", params={"reapply": flag}, json=category
    )
    _parameter_named(reapplied, "reapply")
    dry = await client.post("/v1/jobs/housekeeping/run", params={"dry_run": "true"})
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] is True


async def test_a_version_past_64_bits_names_the_parameter_and_the_bound(
    client: httpx.AsyncClient,
) -> None:
    """This was 422 "The database rejected a value" with no field."""
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}/versions"
    message = _parameter_named(await client.get(f"{url}/9223372036854775808"), "version")
    assert "9223372036854775807" in message
    assert_problem(await client.get(f"{url}/9223372036854775807"), 404)
    assert (await client.get(f"{url}/1")).status_code == 200


async def test_a_nul_in_a_parameter_is_named(client: httpx.AsyncClient) -> None:
    """This was 422 "The database rejected a value" with no field."""
    response = await client.get("/v1/users", params={"external_ref": "a\x00b"})
    assert "NUL" in _parameter_named(response, "external_ref")
