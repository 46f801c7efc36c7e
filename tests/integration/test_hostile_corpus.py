"""The standing guard: hostile input on every route, a 4xx problem and nothing written.

The routes come from the app's OpenAPI document, so a new route is covered by being
registered. Every request uses the admin key, so permission is never what refuses.

For each route with a body, the corpus is sent as whole documents (bytes that are not
UTF-8, numbers past 64 bits, NULs, deep nesting, duplicate keys, broken syntax), as
values put in place of each field of a valid body for the route (``ENVELOPES``; a route
without one gets ``{}``), and with wrong media types. Each answer must be a 4xx
``application/problem+json``, and no table may have gained or lost a row. At the end the
valid body itself must succeed, so each refusal was the hostile value's doing.

For each route with typed query or path parameters, hostile values by type (an integer
past 64 bits or written as a float, a boolean as 1, a date-time as a number, a NUL, a
cursor the server never issued) must be a 4xx problem too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import orjson
import pytest

from app.asgi import create_app
from app.settings import Settings
from tests.integration.helpers import create_session

PROBLEM = "application/problem+json"


def _openapi() -> dict[str, Any]:
    app = create_app(
        Settings(), database_url="postgresql://unused@127.0.0.1/unused", admin_key="x" * 32
    )
    document: dict[str, Any] = app.openapi_schema.to_schema()
    return document


OPENAPI = _openapi()


def _operations(
    keep: Callable[[dict[str, Any]], bool],
) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, operation)
        for path, item in sorted(OPENAPI["paths"].items())
        for method, operation in sorted(item.items())
        if isinstance(operation, dict) and keep(operation)
    ]


BODY_ROUTES = _operations(lambda operation: "requestBody" in operation)
PARAMETER_ROUTES = _operations(
    lambda operation: any(p["in"] in ("query", "path") for p in operation.get("parameters", []))
)

# A valid body per route (placeholders filled in per test): hostile values replace each of
# its fields in turn. A route missing here is still sent the rest of the corpus.
ENVELOPES: dict[tuple[str, str], dict[str, Any]] = {
    ("POST", "/v1/agents"): {"name": "Corpus_Agent"},
    ("PATCH", "/v1/agents/{name}"): {"timeout_ms": 5000},
    ("POST", "/v1/agents/{name}/card"): {"name": "Planner", "url": "https://example.com/a"},
    ("POST", "/v1/agents/{name}/breaker"): {"state": "closed"},
    ("POST", "/v1/users"): {"external_ref": "corpus"},
    ("POST", "/v1/sessions"): {"user_id": "<user>", "session_type": "consultation"},
    ("PATCH", "/v1/sessions/{session_id}"): {"progress_percentage": 10, "base_version": 1},
    ("POST", "/v1/sessions/{session_id}/handoff"): {
        "to_agent": "Make_Plan_Agent",
        "reason": "corpus",
        "base_version": 1,
    },
    ("POST", "/v1/sessions/{session_id}/complete"): {"base_version": 1},
    ("POST", "/v1/sessions/{session_id}/rollback"): {"to_version": 1, "base_version": 1},
    ("POST", "/v1/sessions/{session_id}/messages"): {"text": "I need a budget"},
    ("POST", "/v1/memories"): {
        "user_id": "<user>",
        "memory_type": "orchestrator",
        "content": {"a": 1},
    },
    ("PUT", "/v1/memories/by-key"): {
        "user_id": "<user>",
        "category": "session_data",
        "key": "corpus",
        "memory_type": "orchestrator",
        "content": {"a": 1},
    },
    ("PUT", "/v1/memory-categories/{name}"): {
        "default_access_level": "all_agents",
        "retention_seconds": 3600,
    },
    ("POST", "/v1/memory-types"): {"name": "corpus_type", "default_category": "session_data"},
    ("POST", "/v1/intents/analyze"): {"message": "I need a budget"},
    ("PUT", "/v1/intents/{name}"): {"base_weight": 50, "keywords": ["budget"]},
    ("PUT", "/v1/intent-modifiers/{name}"): {"points": 10},
    ("POST", "/v1/subscriptions"): {
        "url": "https://example.com/hook",
        "event_types": ["session.expired"],
    },
    ("POST", "/webhooks/n8n/coordination"): {"user_ref": "corpus", "text": "I need a budget"},
    ("POST", "/webhooks/n8n/memory"): {
        "action": "query",
        "agent_name": "Orchestrator_Agent",
        "user_id": "<user>",
        "limit": 10,
        "cursor": None,
    },
    ("POST", "/webhooks/n8n/cleanup"): {"job": "housekeeping", "dry_run": True},
}

# Existing things the path parameters name, by the path's prefix.
NAMES = {
    "/v1/agents/": "Make_Plan_Agent",
    "/v1/memory-categories/": "session_data",
    "/v1/intents/": "request_plan",
    "/v1/intent-modifiers/": "user_expressed_urgency",
    "/v1/jobs/": "housekeeping",
}

DEEP = 300  # past every model's 64 levels, short of the decoder's recursion limit

# Values no field accepts: each replaces a field of the envelope, raw JSON text.
HOSTILE_VALUES: dict[str, bytes] = {
    "int-2^64": b"18446744073709551616",
    "int-below-int64": b"-9223372036854775809",
    "int-5000-digits": b"9" * 5000,
    "float-1e400": b"1e400",
    "float-minus-1e400": b"-1e400",
    "nul-string": b'"a\\u0000b"',
    "nul-key": b'{"k\\u0000": 1}',
    "nul-deep": b'[[["\\u0000"]]]',
    "not-utf8": b'"\xc3\x28"',
    "not-utf8-overlong": b'"\xc0\xaf"',
    "lone-surrogate": b'"\\ud800"',
    "deep-array": b"[" * DEEP + b"]" * DEEP,
    "deep-object": b'{"n":' * DEEP + b"1" + b"}" * DEEP,
    "nan": b"NaN",
    "infinity": b"-Infinity",
}

# Whole documents, sent as the body.
HOSTILE_DOCUMENTS: dict[str, bytes] = {
    "truncated": b'{"a": ',
    "trailing": b'{"a": 1} {"b": 2}',
    "not-utf8-key": b'{"\xff": 1}',
    "utf16": '{"a": 1}'.encode("utf-16"),
    "bom-and-garbage": b"\xef\xbb\xbf\x00\x01",
    "deep-10000": b"[" * 10_000 + b"]" * 10_000,
    "deep-1000-objects": b'{"a":' * 1_000 + b"1" + b"}" * 1_000,
    "big-int-document": b"18446744073709551616",
    "nul-document": b'"\\u0000"',
    "single-quotes": b"{'a': 1}",
    "comment": b'{"a": 1 /* no */}',
    "array-of-junk": b"[1e400, 18446744073709551616]",
}

MEDIA_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=corpus",
    "application/xml",
    "application/msgpack",
    "application/jsonx",
]

# Tables a refused request may write by design, and why.
WRITTEN_BY_REFUSALS = {
    # A webhook's 4xx answer is stored under its Idempotency-Key and replayed to a retry
    # (as Stripe does; 409 and 429 excepted): a record of the refusal, not data.
    "idempotency_keys",
}


def _with(envelope: dict[str, Any], field: str, raw_value: bytes) -> bytes:
    """The envelope's JSON with ``field`` set to ``raw_value`` (raw JSON text)."""
    marker = "\u2063corpus-marker\u2063"
    document = orjson.dumps({**envelope, field: marker})
    return document.replace(orjson.dumps(marker), raw_value)


async def _row_counts(database_url: str) -> dict[str, int]:
    conn = await asyncpg.connect(database_url)
    try:
        tables = await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename"
        )
        counts = {}
        for row in tables:
            name = row["tablename"]
            counts[name] = await conn.fetchval(f'SELECT count(*) FROM "{name}"')  # noqa: S608
        return counts
    finally:
        await conn.close()


class Fixtures:
    """Real rows for the placeholders and path parameters."""

    def __init__(self, user_id: str, session_id: str) -> None:
        self.user_id = user_id
        self.session_id = session_id

    def path(self, template: str) -> str:
        def value(name: str, prefix: str) -> str:
            if name == "session_id":
                return self.session_id
            if name == "user_id":
                return self.user_id
            if name == "name":
                return next((v for p, v in NAMES.items() if prefix.startswith(p)), "sample")
            if name == "version":
                return "1"
            return str(uuid.uuid4())

        out = ""
        rest = template
        while "{" in rest:
            head, _, tail = rest.partition("{")
            name, _, rest = tail.partition("}")
            out += head
            out += value(name, out)
        return out + rest

    def envelope(self, method: str, template: str) -> dict[str, Any]:
        body = ENVELOPES.get((method, template), {})
        return {k: self.user_id if v == "<user>" else v for k, v in body.items()}


@pytest.fixture
async def fixtures(client: httpx.AsyncClient) -> Fixtures:
    session = await create_session(client)
    return Fixtures(session["user_id"], session["session_id"])


def _problem_4xx(response: httpx.Response) -> str | None:
    """None if the answer is a 4xx problem, else what is wrong with it."""
    if not 400 <= response.status_code < 500:
        return f"status {response.status_code}: {response.text[:200]}"
    if not response.headers.get("content-type", "").startswith(PROBLEM):
        return f"content-type {response.headers.get('content-type')}"
    body = response.json()
    if body.get("status") != response.status_code or not body.get("detail"):
        return f"not a problem body: {response.text[:200]}"
    return None


def _cases(envelope: dict[str, Any]) -> list[tuple[str, bytes, str]]:
    """(name, body, content type) for every hostile request to a route."""
    json_type = "application/json"
    cases = [(f"document:{name}", raw, json_type) for name, raw in HOSTILE_DOCUMENTS.items()]
    for field in [*envelope, "\u0000"]:
        for name, raw in HOSTILE_VALUES.items():
            cases.append((f"{field!r}={name}", _with(envelope, field, raw), json_type))
    if "limit" in envelope:
        cases += [
            ("limit=-1", _with(envelope, "limit", b"-1"), json_type),
            ("limit=0", _with(envelope, "limit", b"0"), json_type),
            ("limit=huge", _with(envelope, "limit", b"1000000000000000000"), json_type),
        ]
    if "cursor" in envelope:
        cases += [
            ("cursor=forged", _with(envelope, "cursor", b'"not-a-cursor"'), json_type),
            ("cursor=base64-junk", _with(envelope, "cursor", b'"W1syXV0"'), json_type),
            ("cursor=number", _with(envelope, "cursor", b"12"), json_type),
        ]
    # Each field of the valid body, named twice with its own valid value: ambiguous, not
    # invalid, so only the duplicate can be what refuses it.
    for field, value in envelope.items():
        again = orjson.dumps(value)
        cases.append(
            (
                f"{field!r} twice",
                _with(envelope, field, again + b", " + orjson.dumps(field) + b": " + again),
                json_type,
            )
        )
    valid = orjson.dumps(envelope)
    cases += [(f"media:{media}", valid, media) for media in MEDIA_TYPES]
    cases.append(("media:none", valid, ""))
    return cases


@pytest.mark.parametrize(
    ("method", "template"),
    [(method, path) for method, path, _ in BODY_ROUTES],
    ids=[f"{method} {path}" for method, path, _ in BODY_ROUTES],
)
async def test_hostile_bodies_are_4xx_problems_and_write_nothing(
    client: httpx.AsyncClient,
    fixtures: Fixtures,
    database_url: str,
    method: str,
    template: str,
) -> None:
    url = fixtures.path(template)
    envelope = fixtures.envelope(method, template)
    before = await _row_counts(database_url)
    failures = []
    for number, (name, body, content_type) in enumerate(_cases(envelope)):
        # A key of its own per request: a reused key would answer "reused" instead.
        sent = {"Idempotency-Key": f"corpus-{number}"}
        if content_type:
            sent["content-type"] = content_type
        response = await client.request(method, url, content=body, headers=sent)
        wrong = _problem_4xx(response)
        if wrong is not None:
            failures.append(f"{name}: {wrong}")
    after = await _row_counts(database_url)
    changed = {
        table: (before[table], after[table])
        for table in before
        if before[table] != after[table] and table not in WRITTEN_BY_REFUSALS
    }
    assert not failures, "\n".join(failures)
    assert not changed, f"rows written by refused requests: {changed}"

    if (method, template) in ENVELOPES:
        accepted = await client.request(method, url, json=envelope)
        assert accepted.status_code < 300, (
            f"the envelope itself is refused, so the corpus proves little: {accepted.text}"
        )


def test_the_corpus_reaches_every_route_with_a_body() -> None:
    assert len(BODY_ROUTES) >= 22
    assert set(ENVELOPES) <= {(method, path) for method, path, _ in BODY_ROUTES}


# Hostile parameter values by the type the OpenAPI document gives the parameter.
HOSTILE_PARAMETERS: dict[str, list[str]] = {
    "integer": [
        "9223372036854775808",
        "-99999999999999999999",
        "1e1",
        "10.0",
        "0x10",
        "",
        "9" * 5000,
    ],
    "boolean": ["1", "0", "yes", "TRUE", ""],
    "date-time": ["0.5", "1700000000", "2026-13-45T99:99:99Z", "tomorrow"],
    "cursor": ["not-a-cursor", "W10", "eyJ", "%%%"],
    "limit": ["-1", "0", "1000000", "9223372036854775808", "1e1"],
    "uuid": ["not-a-uuid", "0" * 5000],
}


def _kind(parameter: dict[str, Any]) -> str:
    schemas = parameter.get("schema", {})
    options = schemas.get("oneOf") or schemas.get("anyOf") or [schemas]
    for option in options:
        if option.get("type") == "integer":
            return "integer"
        if option.get("type") == "boolean":
            return "boolean"
        if option.get("format") == "date-time":
            return "date-time"
        if option.get("format") == "uuid":
            return "uuid"
    return "cursor" if parameter["name"] == "cursor" else "text"


def _kind_of(parameter: dict[str, Any]) -> str:
    """The kind whose hostile values a parameter gets: page sizes have their own."""
    return "limit" if parameter["name"] == "limit" else _kind(parameter)


@pytest.mark.parametrize(
    ("method", "template"),
    [(method, path) for method, path, _ in PARAMETER_ROUTES],
    ids=[f"{method} {path}" for method, path, _ in PARAMETER_ROUTES],
)
async def test_hostile_parameters_are_4xx_problems(
    client: httpx.AsyncClient, fixtures: Fixtures, method: str, template: str
) -> None:
    (operation,) = [op for m, p, op in PARAMETER_ROUTES if (m, p) == (method, template)]
    failures = []
    for parameter in operation["parameters"]:
        kind = _kind_of(parameter)
        if parameter["in"] == "path":
            values = [v for v in HOSTILE_PARAMETERS.get(kind, []) if v]
            values += ["a%00b"] if kind == "text" else []
        elif parameter["in"] == "query":
            values = [*HOSTILE_PARAMETERS.get(kind, []), "a\x00b"]
        else:
            continue
        for value in values:
            url = fixtures.path(template)
            params: dict[str, str] = {}
            if parameter["in"] == "path":
                url = fixtures.path(template.replace("{" + parameter["name"] + "}", "\x01"))
                url = url.replace("\x01", value if "%" in value else quote(value, safe=""))
            else:
                params[parameter["name"]] = value
            if "user_id" not in params and template == "/v1/memories" and method == "GET":
                params.setdefault("user_id", fixtures.user_id)
            response = await client.request(
                method, url, params=params, headers={"content-type": "application/json"}
            )
            wrong = _problem_4xx(response)
            if wrong is not None:
                failures.append(f"{parameter['name']}={value[:40]!r}: {wrong}")
    assert not failures, "\n".join(failures)


def test_the_parameter_corpus_covers_the_typed_parameters() -> None:
    kinds = {
        _kind_of(parameter)
        for _, _, operation in PARAMETER_ROUTES
        for parameter in operation["parameters"]
    }
    assert {"integer", "boolean", "date-time", "cursor", "uuid", "limit"} <= kinds
