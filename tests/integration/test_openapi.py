"""The OpenAPI document is valid, and true: every problem it documents, the real app (on a
real PostgreSQL) gives, as application/problem+json of the documented ``Problem`` shape.

The tests walk the served document. Statuses derived from a shared mechanism (the key
check, a guard, the body, the parameters, the path: ``app.openapi.derived_problems``) are
provoked by one recipe per mechanism on every operation, and checked both ways: an
operation that does not document the status must not give it to that recipe either. Every
other documented status needs an entry in ``PROVOKE`` below; a documented status without
one fails ``test_a_service_problem_is_reachable``.
"""

from __future__ import annotations

import json
import re
import socket
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import jsonschema
import pytest
from litestar import Litestar
from openapi_spec_validator import validate

from app.asgi import create_app
from app.auth.principal import ADMIN_NAME
from app.auth.ratelimit import RateLimiter
from app.errors import PROBLEM_JSON, TooManyStreams
from app.openapi import SERVICE_PROBLEMS, derived_problems, document, operations
from app.settings import DatabaseSettings, ServerSettings, Settings, StreamSettings
from app.webhooks.idempotency import request_hash
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED, app_client, lifespan_of, same_app_client
from tests.integration.helpers import create_session, create_user, if_match

_UNUSED_DB = "postgresql://unused@127.0.0.1/unused"


_APP = create_app(Settings(), database_url=_UNUSED_DB, admin_key=ADMIN_KEY, run_scheduler=False)
DOC = document(_APP)
Operation = tuple[str, str, dict[str, Any]]
OPERATIONS: list[Operation] = [
    (method.upper(), path, operation)
    for path, item in sorted(DOC["paths"].items())
    for method, operation in sorted(item.items())
    if isinstance(operation, dict) and "responses" in operation
]
_DERIVED = {(op.method, op.path): set(derived_problems(op)) for op in operations(_APP)}


def documents(operation: dict[str, Any], status: int) -> bool:
    """True if ``operation`` documents the problem ``status``."""
    response = operation["responses"].get(str(status))
    return response is not None and PROBLEM_JSON in response.get("content", {})


def target(path: str, operation: dict[str, Any], **values: str) -> str:
    """``path`` with every parameter filled: ``values`` by name, else a sample of its type
    (a fresh UUID, 1, or "sample")."""
    kinds = {
        p["name"]: p["schema"]
        for p in operation.get("parameters", [])
        if p["in"] == "path" and "schema" in p
    }

    def sample(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in values:
            return values[name]
        schema = kinds.get(name, {})
        if schema.get("format") == "uuid":
            return str(uuid.uuid4())
        return "1" if schema.get("type") == "integer" else "sample"

    return re.sub(r"\{(\w+)\}", sample, path)


# The Problem schema, with the components its references (#/components/...) resolve in.
PROBLEM_SCHEMA = {**DOC["components"]["schemas"]["Problem"], "components": DOC["components"]}


def assert_documented_problem(response: httpx.Response, status: int, what: str) -> None:
    """``response`` is the problem ``status``, in the documented shape."""
    assert response.status_code == status, (what, response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith(PROBLEM_JSON), (what, response.headers)
    body = response.json()
    jsonschema.validate(body, PROBLEM_SCHEMA)
    assert body["status"] == status, (what, body)


# -- the document -------------------------------------------------------------------------


async def test_the_served_document_is_valid_openapi_and_what_the_tests_walk(
    anon: httpx.AsyncClient,
) -> None:
    response = await anon.get("/schema/openapi.json")
    assert response.status_code == 200
    served = response.json()
    validate(served)
    assert served == json.loads(json.dumps(DOC, default=str))
    yaml_answer = await anon.get("/schema/openapi.yaml")
    assert yaml_answer.status_code == 200
    assert "application/problem+json" in yaml_answer.text


def test_every_error_answer_is_a_problem_and_every_operation_has_some() -> None:
    for method, path, operation in OPERATIONS:
        errors = {s: r for s, r in operation["responses"].items() if int(s) >= 400}
        public = operation.get("security") == []
        assert errors or (public and method == "GET"), (method, path)
        for status, response in errors.items():
            assert list(response["content"]) == [PROBLEM_JSON], (method, path, status)
            schema = response["content"][PROBLEM_JSON]["schema"]
            assert schema == {"$ref": "#/components/schemas/Problem"}, (method, path, status)
            assert response["description"], (method, path, status)


def test_request_bodies_are_the_real_ones() -> None:
    paths = DOC["paths"]
    memories = paths["/v1/memories"]["post"]["requestBody"]["content"]["application/json"]
    one, batch = memories["schema"]["oneOf"]
    assert one == {"$ref": "#/components/schemas/MemoryWrite"}
    assert batch["items"] == one
    assert (batch["minItems"], batch["maxItems"]) == (1, 500)
    assert DOC["components"]["schemas"]["MemoryWrite"]["required"] == [
        "user_id",
        "memory_type",
        "content",
    ]
    patch = paths["/v1/sessions/{session_id}"]["patch"]["requestBody"]["content"]
    assert set(patch) == {"application/merge-patch+json", "application/json"}
    session_patch = DOC["components"]["schemas"]["SessionPatch"]
    assert set(session_patch["properties"]) == {
        "session_state",
        "coordination_metadata",
        "progress_percentage",
        "priority",
        "current_agent",
        "preserve",
        "status",
        "base_version",
    }
    # null removes an optional member; a required one cannot be removed.
    assert session_patch["properties"]["current_agent"]["anyOf"][-1] == {"type": "null"}
    assert session_patch["properties"]["progress_percentage"]["type"] == "integer"
    for method, path, operation in OPERATIONS:
        for media in operation.get("requestBody", {}).get("content", {}).values():
            schema = media["schema"]
            free_form = schema.get("type") == "object" and "properties" not in schema
            assert not free_form, (method, path, schema)
    for path in ("/webhooks/n8n/coordination", "/webhooks/n8n/memory", "/webhooks/n8n/cleanup"):
        names = {p["name"] for p in paths[path]["post"]["parameters"]}
        assert {"Idempotency-Key", "X-Switchboard-Signature"} <= names


async def test_a_documented_merge_patch_is_accepted_as_documented(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    for media_type, progress in (("application/merge-patch+json", 10), ("application/json", 20)):
        response = await client.patch(
            f"/v1/sessions/{session['session_id']}",
            content=json.dumps({"progress_percentage": progress, "current_agent": None}),
            headers={"content-type": media_type, **if_match(session["version"])},
        )
        assert response.status_code == 200, response.text
        session = response.json()


# -- statuses of the shared mechanisms, checked both ways ----------------------------------


def _derived(method: str, path: str, status: int) -> bool:
    return status in _DERIVED[(method, path)]


async def _agent_key(client: httpx.AsyncClient, name: str) -> str:
    response = await client.post("/v1/agents", json={"name": name, "roles": ["authorized"]})
    assert response.status_code == 201, response.text
    key: str = response.json()["api_key"]
    return key


async def test_401_without_a_key(anon: httpx.AsyncClient) -> None:
    for method, path, operation in OPERATIONS:
        response = await anon.request(method, target(path, operation), json={})
        if documents(operation, 401):
            assert_documented_problem(response, 401, f"{method} {path}")
        else:
            assert response.status_code != 401, (method, path)


async def test_403_for_an_agent_on_routes_it_may_not_call(
    client: httpx.AsyncClient, running_app: Litestar
) -> None:
    key = await _agent_key(client, "Probe_Agent")
    async with same_app_client(running_app, {"X-API-Key": key}) as agent:
        for method, path, operation in OPERATIONS:
            response = await agent.request(method, target(path, operation), json={})
            if _derived(method, path, 403):
                assert_documented_problem(response, 403, f"{method} {path}")
            elif not documents(operation, 403):
                assert response.status_code != 403, (method, path, response.text)


async def test_415_for_a_body_that_is_not_json(client: httpx.AsyncClient) -> None:
    for method, path, operation in OPERATIONS:
        response = await client.request(
            method, target(path, operation), content=b"x", headers={"content-type": "text/plain"}
        )
        if documents(operation, 415):
            assert_documented_problem(response, 415, f"{method} {path}")
        else:
            assert response.status_code != 415, (method, path)


async def test_400_for_a_body_that_is_not_json(client: httpx.AsyncClient) -> None:
    checked = 0
    for method, path, operation in OPERATIONS:
        response = await client.request(
            method,
            target(path, operation),
            content=b'{"a": ',
            headers={"content-type": "application/json"},
        )
        if "requestBody" in operation:
            assert_documented_problem(response, 400, f"{method} {path}")
            assert response.json()["type"].endswith(":malformed-json"), (method, path)
            checked += 1
        elif response.status_code == 400:
            assert not response.json()["type"].endswith(":malformed-json"), (method, path)
    assert checked >= 20


async def test_422_for_a_body_that_breaks_its_schema(client: httpx.AsyncClient) -> None:
    for method, path, operation in OPERATIONS:
        if "requestBody" not in operation:
            continue
        response = await client.request(method, target(path, operation), json="not an object")
        assert documents(operation, 422), (method, path)
        assert_documented_problem(response, 422, f"{method} {path}")
        assert response.json()["errors"], (method, path)


async def test_400_for_a_parameter_that_breaks_its_rules(client: httpx.AsyncClient) -> None:
    """A NUL in a query or text path parameter, a number past 64 bits in an integer one."""
    for method, path, operation in OPERATIONS:
        parameters = operation.get("parameters", [])
        query = [p for p in parameters if p["in"] == "query"]
        text = [p for p in parameters if p["in"] == "path" and p["schema"].get("format") != "uuid"]
        body = {"json": {}} if "requestBody" in operation else {}
        if query:
            url = target(path, operation) + f"?{query[0]['name']}=%00"
        elif text:
            wrong = "1" * 20 if text[0]["schema"].get("type") == "integer" else "%00"
            url = target(path, operation, **{text[0]["name"]: wrong})
        else:
            response = await client.request(method, target(path, operation) + "?x=%00", **body)
            assert not _derived(method, path, 400) or "requestBody" in operation, (method, path)
            if response.status_code == 400:
                assert response.json()["type"].endswith(":malformed-json"), (method, path)
            continue
        response = await client.request(method, url, **body)
        assert _derived(method, path, 400), (method, path)
        assert_documented_problem(response, 400, f"{method} {url}")
        assert response.json()["type"].endswith(":invalid-parameter"), (method, url)


# Bodies the handlers accept, so a request gets as far as looking up what its path names.
VALID_BODIES: dict[tuple[str, str], Any] = {
    ("PATCH", "/v1/agents/{name}"): {},
    ("POST", "/v1/agents/{name}/card"): {"name": "Probe", "url": "http://127.0.0.1:9/"},
    ("POST", "/v1/agents/{name}/breaker"): {"state": "open"},
    ("PUT", "/v1/intent-modifiers/{name}"): {"points": 5},
    ("PATCH", "/v1/sessions/{session_id}"): {"progress_percentage": 5, "base_version": 1},
    ("POST", "/v1/sessions/{session_id}/handoff"): {
        "to_agent": "Make_Plan_Agent",
        "reason": "probe",
        "base_version": 1,
    },
    ("POST", "/v1/sessions/{session_id}/complete"): {"base_version": 1},
    ("POST", "/v1/sessions/{session_id}/rollback"): {"to_version": 1, "base_version": 1},
    ("POST", "/v1/sessions/{session_id}/resolve"): {"note": "probe"},
    ("POST", "/v1/sessions/{session_id}/messages"): {"text": "hello"},
    ("POST", "/v1/sessions/{session_id}/branches/{name}/messages"): {"text": "hello"},
    ("POST", "/v1/sessions/{session_id}/branches"): {"name": "probe", "purpose": "analysis"},
    ("PATCH", "/v1/sessions/{session_id}/branches/{name}"): {"priority": "low", "base_version": 1},
    ("POST", "/v1/sessions/{session_id}/branches/{name}/merge"): {},
    ("POST", "/v1/sessions/{session_id}/branches/{name}/rebase"): {},
    ("PUT", "/v1/sessions/{session_id}/branches/{name}/memories/by-key"): {
        "category": "agent_outputs",
        "key": "probe",
        "memory_type": "planning",
        "content": 1,
    },
}


async def test_404_for_a_path_that_names_nothing(client: httpx.AsyncClient) -> None:
    """Every path parameter names something that may not exist (a fresh UUID, a name no
    agent, job, category or modifier has); a create-or-replace PUT documents no 404."""
    for method, path, operation in OPERATIONS:
        if "{" not in path:
            continue
        names = {p["name"]: "no_such_thing" for p in operation.get("parameters", [])}
        url = target(path, operation, **{n: v for n, v in names.items() if f"{{{n}}}" in path})
        # A version of a session that does not exist: the session is what is missing.
        url = url.replace("/versions/no_such_thing", "/versions/1")
        if "requestBody" in operation and (method, path) not in VALID_BODIES:
            assert not documents(operation, 404), (method, path, "add a VALID_BODIES entry")
            continue
        response = await client.request(method, url, json=VALID_BODIES.get((method, path)))
        if documents(operation, 404):
            assert_documented_problem(response, 404, f"{method} {url}")
        else:
            assert response.status_code != 404, (method, url, response.text)


@pytest.fixture
def settings() -> Settings:
    """The conftest's settings, with event streams that end at once: the recipes call every
    operation in-process, where a stream's answer is read whole."""
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        outbound=LOOPBACK_ALLOWED,
        streams=StreamSettings(max_seconds=0.001),
    )


@pytest.fixture
def small_body_settings() -> Settings:
    return Settings(
        server=ServerSettings(max_body_bytes=1024),
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        outbound=LOOPBACK_ALLOWED,
        streams=StreamSettings(max_seconds=0.001),
    )


async def test_413_for_a_body_over_the_limit(
    small_body_settings: Settings, database_url: str
) -> None:
    app = create_app(
        small_body_settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False
    )
    big = json.dumps({"text": "x" * 2000})
    headers = {"Authorization": f"Bearer {ADMIN_KEY}", "content-type": "application/json"}
    async with lifespan_of(app), app_client(app, headers) as client:
        for method, path, operation in OPERATIONS:
            response = await client.request(method, target(path, operation), content=big)
            if "requestBody" in operation:
                assert documents(operation, 413), (method, path)
                assert_documented_problem(response, 413, f"{method} {path}")
            else:
                assert response.status_code != 413, (method, path)


async def test_429_for_a_key_over_its_rate(running_app: Litestar) -> None:
    async with same_app_client(running_app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as client:
        for method, path, operation in OPERATIONS:
            # One request a burst, and the next token in a thousand seconds.
            running_app.state.rate_limiter = RateLimiter(0.001, 1)
            await client.get("/v1/skills")
            response = await client.request(method, target(path, operation), json={})
            if documents(operation, 429):
                assert_documented_problem(response, 429, f"{method} {path}")
                assert int(response.headers["retry-after"]) >= 1
            else:
                assert response.status_code != 429, (method, path)


def unreachable_database() -> str:
    """The URL of a PostgreSQL that is down: nothing listens on its port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/switchboard"


async def test_503_when_the_database_is_down(settings: Settings) -> None:
    """An agent key is looked up in PostgreSQL before anything else: with PostgreSQL
    down, every keyed route answers 503, and so does readiness."""
    settings.database.pool_min_size = 0
    app = create_app(
        settings, database_url=unreachable_database(), admin_key=ADMIN_KEY, run_scheduler=False
    )
    async with lifespan_of(app), app_client(app, {"X-API-Key": "sb_probe_unknown"}) as client:
        for method, path, operation in OPERATIONS:
            response = await client.request(method, target(path, operation), json={})
            if documents(operation, 503):
                assert_documented_problem(response, 503, f"{method} {path}")
                assert response.headers["retry-after"] == "1"
            else:
                assert response.status_code != 503, (method, path)


# -- statuses of the services' own rules ----------------------------------------------------


@dataclass
class Probe:
    """What a provocation may use: the admin's client on a fresh database."""

    client: httpx.AsyncClient
    app: Litestar
    database_url: str
    settings: Settings

    async def agent(self) -> httpx.AsyncClient:
        """A client of a new agent with the role authorized."""
        key = await _agent_key(self.client, unique("Probe"))
        return same_app_client(self.app, {"X-API-Key": key})

    async def sql(self, statement: str, *args: Any) -> None:
        """Run ``statement`` on the test's database."""
        conn = await asyncpg.connect(self.database_url)
        try:
            await conn.execute(statement, *args)
        finally:
            await conn.close()

    async def completed_session(self) -> dict[str, Any]:
        """A session that has been completed."""
        session = await create_session(self.client)
        done = await self.client.post(
            f"/v1/sessions/{session['session_id']}/complete", json={"base_version": 1}
        )
        assert done.status_code == 200, done.text
        result: dict[str, Any] = done.json()
        return result

    async def held_idempotency_key(self, endpoint: str, body: dict[str, Any], key: str) -> None:
        """A claim of the admin's on ``key`` that is still running (written by a replica
        without leases: it holds for 12 minutes)."""
        await self.sql(
            "INSERT INTO idempotency_keys (principal, key, endpoint, request_hash, status,"
            " created_at, expires_at) VALUES ('admin', $1, $2, $3, 'in_progress', now(),"
            " now() + interval '1 day')",
            key,
            endpoint,
            request_hash(endpoint, body),
        )


Provocation = Callable[[Probe], Awaitable[httpx.Response]]


def unique(prefix: str) -> str:
    """A name no other provocation uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


async def _ready_without_database(probe: Probe, path: str = "/ready") -> httpx.Response:
    probe.settings.database.pool_min_size = 0
    app = create_app(
        probe.settings,
        database_url=unreachable_database(),
        admin_key=ADMIN_KEY,
        run_scheduler=False,
    )
    async with lifespan_of(app), app_client(app) as anon:
        return await anon.get(path)


async def _stale_session_write(probe: Probe, action: str, body: dict[str, Any]) -> httpx.Response:
    session = await create_session(probe.client)
    sid = session["session_id"]
    moved = await probe.client.patch(
        f"/v1/sessions/{sid}", json={"priority": "high"}, headers=if_match(1)
    )
    assert moved.status_code == 200, moved.text
    if action == "patch":
        return await probe.client.patch(f"/v1/sessions/{sid}", json=body, headers=if_match(1))
    return await probe.client.post(f"/v1/sessions/{sid}/{action}", json=body, headers=if_match(1))


async def _session_write(
    probe: Probe, action: str, body: dict[str, Any], headers: dict[str, str]
) -> httpx.Response:
    sid = (await create_session(probe.client))["session_id"]
    if action == "patch":
        return await probe.client.patch(f"/v1/sessions/{sid}", json=body, headers=headers)
    return await probe.client.post(f"/v1/sessions/{sid}/{action}", json=body, headers=headers)


async def _message_merged_branch(probe: Probe) -> httpx.Response:
    """A message to a branch that was merged (it takes no more changes)."""
    sid = (await create_session(probe.client))["session_id"]
    fork = {"name": "probe", "purpose": "analysis"}
    assert (await probe.client.post(f"/v1/sessions/{sid}/branches", json=fork)).is_success
    assert (await probe.client.post(f"/v1/sessions/{sid}/branches/probe/merge")).is_success
    return await probe.client.post(
        f"/v1/sessions/{sid}/branches/probe/messages", json={"text": "hello"}
    )


async def _branch(probe: Probe, headers: dict[str, str] | None = None) -> httpx.Response:
    """A session with a branch ``probe`` whose write is based on version 1 with ``headers``
    (None: the session is forked twice under one name)."""
    sid = (await create_session(probe.client))["session_id"]
    fork = {"name": "probe", "purpose": "analysis"}
    if headers is None:
        return await _twice(probe, f"/v1/sessions/{sid}/branches", fork)
    assert (await probe.client.post(f"/v1/sessions/{sid}/branches", json=fork)).is_success
    return await probe.client.patch(
        f"/v1/sessions/{sid}/branches/probe", json={"priority": "low"}, headers=headers
    )


async def _branch_memory(
    probe: Probe, headers: dict[str, str], content: Any = 1, exists: bool = False
) -> httpx.Response:
    """A memory written on a fresh branch ``probe`` with ``headers`` (after a first write
    of it when ``exists``)."""
    sid = (await create_session(probe.client))["session_id"]
    fork = {"name": "probe", "purpose": "analysis"}
    assert (await probe.client.post(f"/v1/sessions/{sid}/branches", json=fork)).is_success
    url = f"/v1/sessions/{sid}/branches/probe/memories/by-key"
    body = {"category": "agent_outputs", "key": "k", "memory_type": "planning"}
    if exists:
        assert (await probe.client.put(url, json={**body, "content": 1})).status_code == 201
    return await probe.client.put(url, json={**body, "content": content}, headers=headers)


async def _merge_with_large_memory_value(probe: Probe) -> httpx.Response:
    """A memory key both sides changed, settled by a value over the content limit."""
    user_id = await create_user(probe.client)
    sid = (await create_session(probe.client, user_id=user_id))["session_id"]
    main = {"user_id": user_id, "category": "agent_outputs", "key": "k", "memory_type": "planning"}
    assert (await probe.client.put("/v1/memories/by-key", json={**main, "content": 1})).is_success
    fork = {"name": "probe", "purpose": "analysis"}
    assert (await probe.client.post(f"/v1/sessions/{sid}/branches", json=fork)).is_success
    on_branch = {"category": "agent_outputs", "key": "k", "memory_type": "planning", "content": 2}
    url = f"/v1/sessions/{sid}/branches/probe"
    assert (await probe.client.put(f"{url}/memories/by-key", json=on_branch)).is_success
    assert (await probe.client.put("/v1/memories/by-key", json={**main, "content": 3})).is_success
    choice = {"take": "value", "value": _too_large(probe)}
    return await probe.client.post(
        f"{url}/merge", json={"choices": {"/memories/agent_outputs/k": choice}}
    )


async def _conflicting_branch(probe: Probe, action: str) -> httpx.Response:
    """Branch and session both change the priority; then ``action`` (merge, rebase)."""
    sid = (await create_session(probe.client))["session_id"]
    fork = {"name": "probe", "purpose": "analysis"}
    assert (await probe.client.post(f"/v1/sessions/{sid}/branches", json=fork)).is_success
    on_branch = await probe.client.patch(
        f"/v1/sessions/{sid}/branches/probe", json={"priority": "low"}, headers=if_match(1)
    )
    assert on_branch.status_code == 200, on_branch.text
    on_main = await probe.client.patch(
        f"/v1/sessions/{sid}", json={"priority": "high"}, headers=if_match(1)
    )
    assert on_main.status_code == 200, on_main.text
    return await probe.client.post(f"/v1/sessions/{sid}/branches/probe/{action}")


_HANDOFF = {"to_agent": "Make_Plan_Agent", "reason": "probe"}
_ROLLBACK = {"to_version": 1}
_BAD_TAG = {"If-Match": "1"}


async def _memory(probe: Probe, **fields: Any) -> dict[str, Any]:
    return {
        "user_id": await create_user(probe.client),
        "memory_type": "planning",
        "content": {"a": 1},
        **fields,
    }


async def _memory_key_twice(probe: Probe) -> httpx.Response:
    body = await _memory(probe, key="plan")
    assert (await probe.client.post("/v1/memories", json=body)).status_code == 201
    return await probe.client.post("/v1/memories", json=body)


def _too_large(probe: Probe) -> str:
    return "x" * (probe.settings.memories.max_content_bytes + 1)


async def _by_key(probe: Probe, headers: dict[str, str], exists: bool = False) -> httpx.Response:
    body = await _memory(probe, category="user_profile", key="tone")
    if exists:
        first = await probe.client.put("/v1/memories/by-key", json=body)
        assert first.status_code == 201, first.text
    return await probe.client.put("/v1/memories/by-key", json=body, headers=headers)


async def _run_taken_over(probe: Probe) -> httpx.Response:
    # As if another replica took the run over while it ran: every run row this test's
    # database stores names someone else as its claimer, so finishing it finds no row.
    await probe.sql(
        "CREATE FUNCTION probe_take_over() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN NEW.claimed_by := 'another-replica'; RETURN NEW; END $$;"
        " CREATE TRIGGER probe_take_over BEFORE INSERT ON job_runs"
        " FOR EACH ROW EXECUTE FUNCTION probe_take_over()"
    )
    try:
        return await probe.client.post("/v1/jobs/expiry_cleanup/run?dry_run=true")
    finally:
        await probe.sql("DROP TRIGGER probe_take_over ON job_runs")


async def _cleanup_with_a_failing_job(probe: Probe) -> httpx.Response:
    # A statement trigger fires even when there is nothing to purge: housekeeping fails.
    await probe.sql(
        "CREATE FUNCTION probe_refuse_purge() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'outbox_events is read-only here'; END $$;"
        " CREATE TRIGGER probe_refuse_purge BEFORE DELETE ON outbox_events"
        " FOR EACH STATEMENT EXECUTE FUNCTION probe_refuse_purge()"
    )
    try:
        response = await probe.client.post("/webhooks/n8n/cleanup", json={"job": "housekeeping"})
        assert response.json()["type"].endswith(":cleanup-failed"), response.text
        return response
    finally:
        await probe.sql("DROP TRIGGER probe_refuse_purge ON outbox_events")


async def _held_hook(probe: Probe, path: str, body: dict[str, Any]) -> httpx.Response:
    key = unique("held")
    await probe.held_idempotency_key(path, body, key)
    return await probe.client.post(path, json=body, headers={"Idempotency-Key": key})


async def _hook_memory_key_twice(probe: Probe) -> httpx.Response:
    body = {
        "agent_name": "Make_Plan_Agent",
        "user_id": await create_user(probe.client),
        "memory_type": "planning",
        "memory_content": {"a": 1},
        "key": "plan",
    }
    first = await probe.client.post("/webhooks/n8n/memory", json=body)
    assert first.status_code == 200, first.text
    return await probe.client.post("/webhooks/n8n/memory", json=body)


async def _hook_memory_for_another_agent(probe: Probe) -> httpx.Response:
    async with await probe.agent() as agent:
        return await agent.post(
            "/webhooks/n8n/memory",
            json={
                "agent_name": "Make_Plan_Agent",
                "action": "read",
                "memory_id": str(uuid.uuid4()),
            },
        )


async def _hook_memory_too_large(probe: Probe) -> httpx.Response:
    body = {
        "agent_name": "Make_Plan_Agent",
        "user_id": await create_user(probe.client),
        "memory_type": "planning",
        "memory_content": _too_large(probe),
    }
    return await probe.client.post("/webhooks/n8n/memory", json=body)


async def _post(probe: Probe, path: str, body: Any = None) -> httpx.Response:
    return await probe.client.post(path, json=body)


async def _twice(probe: Probe, path: str, body: dict[str, Any]) -> httpx.Response:
    assert (await probe.client.post(path, json=body)).status_code == 201
    return await probe.client.post(path, json=body)


async def _resolve_active(probe: Probe) -> httpx.Response:
    session = await create_session(probe.client)
    return await probe.client.post(
        f"/v1/sessions/{session['session_id']}/resolve", json={"note": "nothing to resolve"}
    )


async def _on_completed(probe: Probe, action: str, body: Any = None) -> httpx.Response:
    session = await probe.completed_session()
    return await probe.client.post(f"/v1/sessions/{session['session_id']}/{action}", json=body)


async def _task(probe: Probe, **extra: Any) -> dict[str, Any]:
    body = {"agent_name": "Make_Plan_Agent", "input": {"message": "plan"}, **extra}
    response = await probe.client.post("/v1/tasks", json=body)
    assert response.status_code == 201, response.text
    task: dict[str, Any] = response.json()
    return task


async def _cancel_twice(probe: Probe) -> httpx.Response:
    task = await _task(probe)
    assert (await probe.client.post(f"/v1/tasks/{task['task_id']}/cancel")).status_code == 200
    return await probe.client.post(f"/v1/tasks/{task['task_id']}/cancel")


async def _cancel_anothers_task(probe: Probe) -> httpx.Response:
    session = await create_session(probe.client)
    task = await _task(probe, session_id=session["session_id"])
    async with await probe.agent() as agent:
        return await agent.post(f"/v1/tasks/{task['task_id']}/cancel")


async def _discarded_letter(probe: Probe) -> str:
    """A dead letter someone already discarded."""
    task = await _task(probe)
    letter = str(uuid.uuid4())
    await probe.sql(
        "UPDATE agent_tasks SET status = 'failed', last_error = 'boom' WHERE task_id = $1",
        uuid.UUID(task["task_id"]),
    )
    await probe.sql(
        "INSERT INTO dead_letters (dead_letter_id, task_id, failure_reason, failed_at)"
        " VALUES ($1, $2, 'not_retryable', now())",
        uuid.UUID(letter),
        uuid.UUID(task["task_id"]),
    )
    assert (await probe.client.delete(f"/v1/dead-letters/{letter}")).status_code == 200
    return letter


async def _requeue_discarded(probe: Probe) -> httpx.Response:
    return await probe.client.post(f"/v1/dead-letters/{await _discarded_letter(probe)}/requeue")


async def _discard_discarded(probe: Probe) -> httpx.Response:
    return await probe.client.delete(f"/v1/dead-letters/{await _discarded_letter(probe)}")


async def _discover(probe: Probe, url: str | None) -> httpx.Response:
    """Discovery of an agent without a url (422), or whose url answers nothing (502)."""
    name = unique("Cardless")
    created = await probe.client.post("/v1/agents", json={"name": name, "url": url})
    assert created.status_code == 201, created.text
    return await probe.client.post(f"/v1/agents/{name}/discover")


# (method, path, status) -> how to make the app answer it. Every documented status that
# is not derived from a shared mechanism, and every status a service documents, needs one.
PROVOKE: dict[tuple[str, str, int], Provocation] = {
    ("GET", "/ready", 503): _ready_without_database,
    ("GET", "/.well-known/agent-card.json", 503): lambda p: _ready_without_database(
        p, "/.well-known/agent-card.json"
    ),
    ("GET", "/.well-known/agent.json", 503): lambda p: _ready_without_database(
        p, "/.well-known/agent.json"
    ),
    ("POST", "/v1/sessions/{session_id}/branches", 409): lambda p: _branch(p),
    ("PATCH", "/v1/sessions/{session_id}/branches/{name}", 400): lambda p: _branch(p, _BAD_TAG),
    ("PATCH", "/v1/sessions/{session_id}/branches/{name}", 409): lambda p: _branch(p, if_match(2)),
    ("PATCH", "/v1/sessions/{session_id}/branches/{name}", 428): lambda p: _branch(p, {}),
    ("POST", "/v1/sessions/{session_id}/branches/{name}/merge", 409): lambda p: _conflicting_branch(
        p, "merge"
    ),
    ("POST", "/v1/sessions/{session_id}/branches/{name}/merge", 413): (
        _merge_with_large_memory_value
    ),
    ("PUT", "/v1/sessions/{session_id}/branches/{name}/memories/by-key", 400): lambda p: (
        _branch_memory(p, {"If-None-Match": '"1"'})
    ),
    ("PUT", "/v1/sessions/{session_id}/branches/{name}/memories/by-key", 409): lambda p: (
        _branch_memory(p, {"If-None-Match": "*"}, exists=True)
    ),
    ("PUT", "/v1/sessions/{session_id}/branches/{name}/memories/by-key", 413): lambda p: (
        _branch_memory(p, {}, content=_too_large(p))
    ),
    ("POST", "/v1/sessions/{session_id}/branches/{name}/rebase", 409): lambda p: (
        _conflicting_branch(p, "rebase")
    ),
    ("POST", "/v1/sessions/{session_id}/branches/{name}/messages", 409): _message_merged_branch,
    ("POST", "/v1/agents", 409): lambda p: _twice(p, "/v1/agents", {"name": unique("Twice")}),
    ("GET", "/v1/agents/{name}/card", 404): lambda p: p.client.get(
        "/v1/agents/Make_Plan_Agent/card"
    ),
    ("POST", "/v1/agents/{name}/discover", 422): lambda p: _discover(p, None),
    ("POST", "/v1/agents/{name}/discover", 502): lambda p: _discover(p, "http://127.0.0.1:9/"),
    ("GET", "/v1/users", 404): lambda p: p.client.get("/v1/users?external_ref=nobody"),
    ("POST", "/v1/users", 409): lambda p: _twice(p, "/v1/users", {"external_ref": unique("crm")}),
    ("PATCH", "/v1/sessions/{session_id}", 400): lambda p: _session_write(
        p, "patch", {"priority": "high"}, _BAD_TAG
    ),
    ("PATCH", "/v1/sessions/{session_id}", 409): lambda p: _stale_session_write(
        p, "patch", {"priority": "low"}
    ),
    ("PATCH", "/v1/sessions/{session_id}", 428): lambda p: _session_write(
        p, "patch", {"priority": "high"}, {}
    ),
    ("POST", "/v1/sessions/{session_id}/handoff", 400): lambda p: _session_write(
        p, "handoff", _HANDOFF, _BAD_TAG
    ),
    ("POST", "/v1/sessions/{session_id}/handoff", 409): lambda p: _stale_session_write(
        p, "handoff", _HANDOFF
    ),
    ("POST", "/v1/sessions/{session_id}/handoff", 428): lambda p: _session_write(
        p, "handoff", _HANDOFF, {}
    ),
    ("POST", "/v1/sessions/{session_id}/complete", 400): lambda p: _session_write(
        p, "complete", {}, _BAD_TAG
    ),
    ("POST", "/v1/sessions/{session_id}/complete", 409): lambda p: _stale_session_write(
        p, "complete", {}
    ),
    ("POST", "/v1/sessions/{session_id}/complete", 428): lambda p: _session_write(
        p, "complete", {}, {}
    ),
    ("POST", "/v1/sessions/{session_id}/rollback", 400): lambda p: _session_write(
        p, "rollback", _ROLLBACK, _BAD_TAG
    ),
    ("POST", "/v1/sessions/{session_id}/rollback", 409): lambda p: _stale_session_write(
        p, "rollback", _ROLLBACK
    ),
    ("POST", "/v1/sessions/{session_id}/rollback", 428): lambda p: _session_write(
        p, "rollback", _ROLLBACK, {}
    ),
    ("POST", "/v1/sessions/{session_id}/touch", 409): lambda p: _on_completed(p, "touch"),
    ("POST", "/v1/memories", 409): _memory_key_twice,
    ("POST", "/v1/memories", 413): lambda p: _post_memory_too_large(p),
    ("PUT", "/v1/memories/by-key", 400): lambda p: _by_key(p, {"If-None-Match": '"1"'}),
    ("PUT", "/v1/memories/by-key", 409): lambda p: _by_key(p, {"If-None-Match": "*"}, True),
    ("PUT", "/v1/memories/by-key", 413): lambda p: _by_key_too_large(p),
    ("GET", "/v1/memories", 422): lambda p: p.client.get("/v1/memories?limit=5"),
    ("POST", "/v1/memory-types", 409): lambda p: p.client.post(
        "/v1/memory-types", json={"name": "planning", "default_category": "agent_outputs"}
    ),
    ("POST", "/v1/intents/analyze", 404): lambda p: _post(
        p, "/v1/intents/analyze", {"message": "hello", "session_id": str(uuid.uuid4())}
    ),
    ("POST", "/v1/sessions/{session_id}/messages", 409): lambda p: _on_completed(
        p, "messages", {"text": "hello"}
    ),
    ("POST", "/v1/sessions/{session_id}/pending/next", 400): lambda p: _nothing_pending(
        p, {"Prefer": "wait=1, " + "x" * 1024}
    ),
    ("POST", "/v1/sessions/{session_id}/pending/next", 409): lambda p: _nothing_pending(p),
    ("POST", "/v1/sessions/{session_id}/resolve", 409): _resolve_active,
    ("POST", "/v1/jobs/{name}/run", 409): _run_taken_over,
    ("GET", "/v1/sessions/{session_id}/events", 400): lambda p: _session_stream(
        p, {"Last-Event-ID": "not-an-id"}
    ),
    ("GET", "/v1/sessions/{session_id}/events", 429): lambda p: _too_many_streams(
        p, "/v1/sessions/{session_id}/events"
    ),
    ("GET", "/v1/events/stream", 400): lambda p: p.client.get("/v1/events/stream?types=x.y"),
    ("GET", "/v1/events/stream", 429): lambda p: _too_many_streams(p, "/v1/events/stream"),
    ("POST", "/v1/sessions/{session_id}/restore", 409): lambda p: _restore_live(p),
    ("POST", "/v1/tasks", 404): lambda p: _post(
        p, "/v1/tasks", {"agent_name": "Nobody_Agent", "input": {}}
    ),
    ("POST", "/v1/tasks/{task_id}/cancel", 403): _cancel_anothers_task,
    ("POST", "/v1/tasks/{task_id}/cancel", 409): _cancel_twice,
    ("POST", "/v1/dead-letters/{dead_letter_id}/requeue", 409): _requeue_discarded,
    ("DELETE", "/v1/dead-letters/{dead_letter_id}", 409): _discard_discarded,
    ("POST", "/webhooks/n8n/coordination", 404): lambda p: _post(
        p, "/webhooks/n8n/coordination", {"user_id": str(uuid.uuid4()), "text": "hello"}
    ),
    ("POST", "/webhooks/n8n/coordination", 409): lambda p: _held_hook(
        p, "/webhooks/n8n/coordination", {"user_ref": unique("crm"), "text": "hello"}
    ),
    ("POST", "/webhooks/n8n/memory", 403): _hook_memory_for_another_agent,
    ("POST", "/webhooks/n8n/memory", 404): lambda p: _post(
        p,
        "/webhooks/n8n/memory",
        {"agent_name": "Make_Plan_Agent", "action": "read", "memory_id": str(uuid.uuid4())},
    ),
    ("POST", "/webhooks/n8n/memory", 409): _hook_memory_key_twice,
    ("POST", "/webhooks/n8n/memory", 413): _hook_memory_too_large,
    ("POST", "/webhooks/n8n/cleanup", 404): lambda p: _post(
        p, "/webhooks/n8n/cleanup", {"job": "no_such_job"}
    ),
    ("POST", "/webhooks/n8n/cleanup", 500): _cleanup_with_a_failing_job,
    ("POST", "/webhooks/n8n/cleanup", 409): lambda p: _held_hook(
        p, "/webhooks/n8n/cleanup", {"dry_run": True}
    ),
}


async def _post_memory_too_large(probe: Probe) -> httpx.Response:
    return await probe.client.post(
        "/v1/memories", json=await _memory(probe, content=_too_large(probe))
    )


async def _by_key_too_large(probe: Probe) -> httpx.Response:
    body = await _memory(probe, category="user_profile", key="tone", content=_too_large(probe))
    return await probe.client.put("/v1/memories/by-key", json=body)


async def _nothing_pending(probe: Probe, headers: dict[str, str] | None = None) -> httpx.Response:
    session = await create_session(probe.client)
    return await probe.client.post(
        f"/v1/sessions/{session['session_id']}/pending/next", headers=headers
    )


async def _session_stream(probe: Probe, headers: dict[str, str]) -> httpx.Response:
    session = await create_session(probe.client)
    return await probe.client.get(f"/v1/sessions/{session['session_id']}/events", headers=headers)


async def _too_many_streams(probe: Probe, path: str) -> httpx.Response:
    """Hold the key's every stream (their answers are read whole in-process), then ask."""
    session = await create_session(probe.client)
    url = path.replace("{session_id}", session["session_id"])
    hub = probe.app.state.event_hub
    held = 0
    try:
        while True:
            try:
                hub.open_stream(ADMIN_NAME)
            except TooManyStreams:
                break
            held += 1
        return await probe.client.get(url)
    finally:
        for _ in range(held):
            hub.close_stream(ADMIN_NAME)


async def _restore_live(probe: Probe) -> httpx.Response:
    session = await create_session(probe.client)
    return await probe.client.post(f"/v1/sessions/{session['session_id']}/restore")


# Every documented problem a shared mechanism does not explain, and every one a service
# documents (a status may have both kinds of reason: each is provoked on its own).
SERVICE_CASES = sorted(
    (method, path, int(status))
    for method, path, operation in OPERATIONS
    for status in operation["responses"]
    if int(status) >= 400
    and (
        not _derived(method, path, int(status))
        or int(status) in SERVICE_PROBLEMS.get((method, path), {})
    )
)


@pytest.mark.parametrize(("method", "path", "status"), SERVICE_CASES, ids=str)
def test_a_service_problem_has_a_way_to_provoke_it(method: str, path: str, status: int) -> None:
    assert (method, path, status) in PROVOKE, (
        f"{method} {path} documents {status}, and nothing here provokes it: add a way to "
        "PROVOKE, or stop documenting it (app/openapi.py SERVICE_PROBLEMS)"
    )


async def test_every_service_problem_is_reachable(
    client: httpx.AsyncClient, running_app: Litestar, database_url: str, settings: Settings
) -> None:
    """One database for all: each provocation makes its own users, sessions and names."""
    probe = Probe(client, running_app, database_url, settings)
    failures = []
    for method, path, status in SERVICE_CASES:
        provoke = PROVOKE.get((method, path, status))
        if provoke is None:
            continue  # test_a_service_problem_has_a_way_to_provoke_it says so
        response = await provoke(probe)
        try:
            assert_documented_problem(response, status, f"{method} {path}")
        except AssertionError as failure:
            failures.append(str(failure))
    assert not failures, "\n".join(failures)


def test_every_provocation_provokes_something_documented() -> None:
    assert set(PROVOKE) <= set(SERVICE_CASES)
