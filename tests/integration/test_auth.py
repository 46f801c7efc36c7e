"""Authentication and authorisation: keys, roles, and routes nobody can forget to protect."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import httpx
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.settings import AuthSettings, DatabaseSettings, ServerSettings, Settings
from tests.conftest import ADMIN_KEY, app_client, lifespan_of
from tests.integration.helpers import assert_problem

PUBLIC = {"/health", "/ready", "/metrics"}


async def test_no_key_is_401_with_challenge(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/v1/agents")
    assert_problem(response, 401)
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_unknown_key_is_401(running_app: Litestar) -> None:
    async with app_client(running_app, {"Authorization": "Bearer sb_not-a-real-key"}) as c:
        assert_problem(await c.get("/v1/users?external_ref=x"), 401)


async def test_malformed_authorization_header_is_401(running_app: Litestar) -> None:
    async with app_client(running_app, {"Authorization": f"Basic {ADMIN_KEY}"}) as c:
        assert_problem(await c.get("/v1/agents"), 401)


async def test_admin_key_works_as_x_api_key(running_app: Litestar) -> None:
    async with app_client(running_app, {"X-API-Key": ADMIN_KEY}) as c:
        assert (await c.get("/v1/agents")).status_code == 200


async def test_agent_key_reaches_agent_routes_but_not_admin_routes(
    make_agent_client: Any,
) -> None:
    agent = await make_agent_client("Make_Plan_Agent", ["authorized"])
    async with agent:
        response = await agent.post("/v1/users", json={})
        assert response.status_code == 201
        assert_problem(await agent.get("/v1/agents"), 403)
        assert_problem(await agent.post("/v1/agents", json={"name": "Sneaky"}), 403)
        user_id = response.json()["id"]
        assert_problem(await agent.delete(f"/v1/users/{user_id}"), 403)


async def test_disabled_agent_key_stops_working_and_rotation_revives(
    client: httpx.AsyncClient, running_app: Litestar
) -> None:
    created = (await client.post("/v1/agents", json={"name": "Educate_Customer_Agent"})).json()
    old_key = created["api_key"]
    async with app_client(running_app, {"X-API-Key": old_key}) as agent:
        assert (await agent.post("/v1/users", json={})).status_code == 201
        assert (await client.delete("/v1/agents/Educate_Customer_Agent")).status_code == 204
        assert_problem(await agent.post("/v1/users", json={}), 401)

    rotated = await client.post("/v1/agents/Educate_Customer_Agent/key")
    assert rotated.status_code == 201
    new_key = rotated.json()["api_key"]
    assert new_key != old_key
    assert rotated.json()["agent"]["disabled_at"] is None
    async with app_client(running_app, {"X-API-Key": new_key}) as agent:
        assert (await agent.post("/v1/users", json={})).status_code == 201
    async with app_client(running_app, {"X-API-Key": old_key}) as agent:
        assert_problem(await agent.post("/v1/users", json={}), 401)


async def test_auth_is_checked_before_the_body_is_parsed(anon: httpx.AsyncClient) -> None:
    response = await anon.post(
        "/v1/sessions", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert_problem(response, 401)


_SAMPLES = {
    "uuid": "00000000-0000-7000-8000-000000000000",
    "int": "1",
    "str": "sample",
    "path": "console.css",  # the console's static files
}


def _concrete_path(path: str) -> str:
    """Fill every typed path parameter with a sample value of its type."""
    return re.sub(r"\{\w+:(\w+)\}", lambda m: _SAMPLES[m.group(1)], path)


async def test_every_route_but_the_public_ones_requires_a_key(
    running_app: Litestar, anon: httpx.AsyncClient
) -> None:
    """Enumerates the app's routes, so a new route cannot forget authentication."""
    checked = 0
    for route in running_app.routes:
        if route.path in PUBLIC or route.path.startswith(("/schema", "/.well-known/")):
            continue
        if route.path.startswith("/console"):
            continue  # its own sign-in: test_console.py::test_every_console_route_needs_a_session
        for method in sorted(getattr(route, "methods", set()) - {"OPTIONS", "HEAD"}):
            response = await anon.request(method, _concrete_path(route.path), json={})
            assert response.status_code == 401, (method, route.path, response.status_code)
            checked += 1
    assert checked >= 15


async def test_options_is_answered_on_every_route_without_a_key(
    running_app: Litestar, anon: httpx.AsyncClient
) -> None:
    """Found by schemathesis: OPTIONS on admin-only controllers used to be a 500. Its
    Allow lists every method of the path: it used to list only the methods of the path's
    first handler (``OPTIONS, POST`` on /v1/agents, which serves GET too)."""
    for route in running_app.routes:
        if "OPTIONS" in getattr(route, "methods", set()):
            response = await anon.options(_concrete_path(route.path))
            assert response.status_code == 204, route.path
            allowed = {method.strip() for method in response.headers["allow"].split(",")}
            assert allowed == set(route.methods), route.path


@pytest.mark.parametrize("path", [*sorted(PUBLIC), "/schema/openapi.json"])
async def test_public_routes_need_no_key(anon: httpx.AsyncClient, path: str) -> None:
    assert (await anon.get(path)).status_code == 200


class TestRateLimit:
    @pytest.fixture
    def settings(self) -> Settings:
        return Settings(
            server=ServerSettings(rate_limit_per_second=1, rate_limit_burst=3),
            database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        )

    async def test_a_key_over_its_rate_gets_429_with_retry_after(
        self, client: httpx.AsyncClient, anon: httpx.AsyncClient
    ) -> None:
        statuses = [(await client.get("/v1/agents")).status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        limited = await client.get("/v1/agents")
        problem = assert_problem(limited, 429)
        assert int(limited.headers["retry-after"]) >= 1
        assert problem["retry_after"] >= 1
        assert (await anon.get("/health")).status_code == 200  # public routes are not limited


async def test_keys_never_reach_the_logs(
    client: httpx.AsyncClient, make_agent_client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.DEBUG)
    created = await client.post("/v1/agents", json={"name": "Logged_Agent"})
    key = created.json()["api_key"]
    async with app_client(client._transport.app, {"X-API-Key": key}) as agent:  # type: ignore[attr-defined]
        await agent.get("/v1/users/not-a-uuid")
        await agent.post(
            "/v1/sessions", content=b"{broken", headers={"content-type": "application/json"}
        )
    async with app_client(client._transport.app, {"X-API-Key": key + "x"}) as wrong:  # type: ignore[attr-defined]
        await wrong.get("/v1/agents")
    text = caplog.text
    assert key not in text
    assert ADMIN_KEY not in text


async def test_role_changes_apply_at_once_on_the_replica_that_made_them(
    client: httpx.AsyncClient, running_app: Litestar
) -> None:
    user_id = (await client.post("/v1/users", json={})).json()["id"]
    memory = await client.post(
        "/v1/memories",
        json={
            "user_id": user_id,
            "memory_type": "orchestrator",
            "access_level": "analytics_agents",
            "content": {"n": 1},
        },
    )
    path = f"/v1/memories/{memory.json()['memory_id']}"
    key = (await client.post("/v1/agents", json={"name": "Role_Test_Agent"})).json()["api_key"]
    async with app_client(running_app, {"X-API-Key": key}) as agent:
        # The key is resolved (and cached) while the agent lacks the role...
        assert_problem(await agent.get(path), 404)
        changed = await client.patch("/v1/agents/Role_Test_Agent", json={"roles": ["analytics"]})
        assert changed.status_code == 200
        # ...and the cached principal must not outlive the change.
        assert (await agent.get(path)).status_code == 200
        await client.patch("/v1/agents/Role_Test_Agent", json={"roles": []})
        assert_problem(await agent.get(path), 404)


async def test_another_replica_stops_a_revoked_key_within_the_cache_time(
    client: httpx.AsyncClient, running_app: Litestar, database_url: str
) -> None:
    ttl = 0.5
    other = create_app(
        Settings(
            database=DatabaseSettings(pool_min_size=1, pool_max_size=2),
            auth=AuthSettings(key_cache_seconds=ttl),
        ),
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
    )
    key = (await client.post("/v1/agents", json={"name": "Revoked_Agent"})).json()["api_key"]
    async with lifespan_of(other), app_client(other, {"X-API-Key": key}) as agent:
        assert (await agent.post("/v1/users", json={})).status_code == 201  # now cached there
        assert (await client.delete("/v1/agents/Revoked_Agent")).status_code == 204
        started = time.monotonic()
        # Revoked through the first replica: the second may trust its cache for ttl seconds,
        # and no longer.
        while (await agent.post("/v1/users", json={})).status_code == 201:
            assert time.monotonic() - started < ttl + 0.5, "revoked key outlived the cache"
            await asyncio.sleep(0.05)
        assert_problem(await agent.post("/v1/users", json={}), 401)


# What an agent key without special roles gets for a malformed body on each route that
# takes one: 403 where it may not call the route at all (decided from the key and the path,
# before the body is read), 400 where it may. Every route with a body must be listed, so a
# new one cannot be added without saying who may call it.
_MALFORMED = b'{"broken": '
_PLAIN_AGENT_WITH_A_MALFORMED_BODY = {
    ("POST", "/v1/agents"): 403,
    ("PATCH", "/v1/agents/{name:str}"): 403,
    ("POST", "/v1/agents/{name:str}/card"): 403,  # another agent's card
    ("POST", "/v1/agents/{name:str}/breaker"): 403,
    ("POST", "/v1/users"): 400,
    ("POST", "/v1/sessions"): 400,
    ("PATCH", "/v1/sessions/{session_id:uuid}"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/complete"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/handoff"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/rollback"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/messages"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/resolve"): 403,  # admin or coordination_manager
    ("POST", "/v1/sessions/{session_id:uuid}/branches"): 400,
    ("PATCH", "/v1/sessions/{session_id:uuid}/branches/{name:str}"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/branches/{name:str}/merge"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/branches/{name:str}/rebase"): 400,
    ("PUT", "/v1/sessions/{session_id:uuid}/branches/{name:str}/memories/by-key"): 400,
    ("POST", "/v1/sessions/{session_id:uuid}/branches/{name:str}/messages"): 400,
    ("POST", "/v1/memories"): 400,
    ("PUT", "/v1/memories/by-key"): 400,
    ("PUT", "/v1/memory-categories/{name:str}"): 403,
    ("POST", "/v1/memory-types"): 403,
    ("POST", "/v1/intents/analyze"): 400,
    ("PUT", "/v1/intents/{name:str}"): 403,
    ("PUT", "/v1/intent-modifiers/{name:str}"): 403,
    ("POST", "/v1/subscriptions"): 403,
    ("POST", "/webhooks/n8n/coordination"): 400,
    ("POST", "/webhooks/n8n/memory"): 400,
    ("POST", "/webhooks/n8n/cleanup"): 403,  # needs the coordination_manager role
    ("POST", "/v1/tasks"): 400,  # any agent may submit a task
}


def _routes_with_a_body(app: Litestar) -> set[tuple[str, str]]:
    """(method, path) of every handler that takes a body (a ``data`` parameter)."""
    found = set()
    for route in app.routes:
        for method, (handler, _) in getattr(route, "route_handler_map", {}).items():
            if "data" in handler.parsed_fn_signature.parameters:
                found.add((method, route.path))
    return found


async def test_permission_is_decided_before_the_body_is_parsed_on_every_route(
    running_app: Litestar, make_agent_client: Any
) -> None:
    """A key that may not call a route learns nothing about the body it would need."""
    routes = _routes_with_a_body(running_app)
    assert routes == set(_PLAIN_AGENT_WITH_A_MALFORMED_BODY), "list every route with a body"
    headers = {"content-type": "application/json"}
    async with await make_agent_client("Probe_Agent", ["authorized"]) as agent:
        for method, path in sorted(routes):
            concrete = re.sub(r"\{name:str\}", "Make_Plan_Agent", path)
            response = await agent.request(
                method, _concrete_path(concrete), content=_MALFORMED, headers=headers
            )
            expected = _PLAIN_AGENT_WITH_A_MALFORMED_BODY[(method, path)]
            assert response.status_code == expected, (method, path, response.text)
            assert_problem(response, expected)
        # Where the key and the path do allow the call, the body is what is wrong.
        own_card = await agent.post(
            "/v1/agents/Probe_Agent/card", content=_MALFORMED, headers=headers
        )
        assert_problem(own_card, 400)
    async with await make_agent_client("N8n_Integration", ["coordination_manager"]) as n8n:
        cleanup = await n8n.post("/webhooks/n8n/cleanup", content=_MALFORMED, headers=headers)
        assert_problem(cleanup, 400)
