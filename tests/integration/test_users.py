"""Users, including the right to be forgotten."""

from __future__ import annotations

import uuid

import httpx

from tests.integration.helpers import assert_problem, create_session, create_user, if_match


async def test_create_get_and_find_by_external_ref(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/users", json={"external_ref": "crm-42"})
    assert response.status_code == 201
    user = response.json()
    assert uuid.UUID(user["id"]).version == 7
    assert (await client.get(f"/v1/users/{user['id']}")).json() == user
    assert (await client.get("/v1/users", params={"external_ref": "crm-42"})).json() == user


async def test_external_ref_is_unique(client: httpx.AsyncClient) -> None:
    first = await create_user(client, "crm-7")
    problem = assert_problem(await client.post("/v1/users", json={"external_ref": "crm-7"}), 409)
    assert problem["existing_user_id"] == first


async def test_unknown_user_is_404(client: httpx.AsyncClient) -> None:
    missing = "01900000-0000-7000-8000-000000000000"
    assert_problem(await client.get(f"/v1/users/{missing}"), 404)
    assert_problem(await client.delete(f"/v1/users/{missing}"), 404)
    assert_problem(await client.get("/v1/users", params={"external_ref": "nobody"}), 404)


async def test_malformed_user_id_is_a_4xx_problem(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/users/not-a-uuid")
    assert 400 <= response.status_code < 500
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_delete_cascades_to_sessions_and_their_history(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    session = await create_session(client, user_id=user_id)
    patched = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        json={"progress_percentage": 10},
        headers=if_match(1),
    )
    assert patched.status_code == 200
    await create_session(client, user_id=user_id)
    other = await create_session(client)  # another user's session must survive

    response = await client.delete(f"/v1/users/{user_id}")
    assert response.status_code == 200
    body = response.json()
    assert uuid.UUID(body.pop("erasure_id")).version == 7
    assert body == {
        "user_id": user_id,
        "sessions_deleted": 2,
        "deleted": {
            "users": 1,
            "session_coordination": 2,
            "session_state_versions": 3,  # the first session's two, the second's one
            "coordination_decisions": 0,
            "session_branches": 0,
            "session_branch_versions": 0,
            "session_archive": 0,
            "memories": 0,
            "memory_archive": 0,
            "branch_memories": 0,
            "idempotency_keys": 0,
            "outbox_events": 3,  # a session.version event per version: they name the user
            "event_deliveries": 0,
            "agent_tasks": 0,
            "agent_task_transitions": 0,
            "dead_letters": 0,
        },
        "redacted": {"memory_access_log": 0, "job_runs": 0},
    }

    assert_problem(await client.get(f"/v1/users/{user_id}"), 404)
    assert_problem(await client.get(f"/v1/sessions/{session['session_id']}"), 404)
    assert_problem(await client.get(f"/v1/sessions/{session['session_id']}/versions/1"), 404)
    assert (await client.get(f"/v1/sessions/{other['session_id']}")).status_code == 200


async def test_finding_a_user_without_external_ref_is_a_400_naming_it(
    client: httpx.AsyncClient,
) -> None:
    """Found by schemathesis: Litestar's refusal of a missing required parameter named no
    field and was answered as a 422 about the body."""
    problem = assert_problem(await client.get("/v1/users"), 400)
    assert problem["errors"] == [
        {"field": "external_ref", "source": "query", "message": "required"}
    ]
