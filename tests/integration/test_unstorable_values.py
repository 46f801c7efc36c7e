"""Values JSON allows but the service cannot hold (integers past 64 bits, numbers past a
float, NUL characters) and bytes that are not UTF-8: one rule on every path, each answer a
4xx naming the field, nothing written."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from app.common.jsonbody import INT64_MAX, INT64_MIN
from tests.integration.helpers import assert_problem, create_session, create_user, if_match

JSON = {"content-type": "application/json"}
TOO_BIG = str(2**64).encode()  # 18446744073709551616
TOO_SMALL = str(INT64_MIN - 1).encode()  # -9223372036854775809


async def _memory_count(client: httpx.AsyncClient, user_id: str) -> int:
    page = (await client.get("/v1/memories", params={"user_id": user_id})).json()
    return len(page["items"])


def _bound_named(body: dict[str, Any], field: str) -> None:
    assert body["errors"][0]["field"] == field, body
    assert str(INT64_MAX) in body["errors"][0]["message"], body


@pytest.mark.parametrize("number", [TOO_BIG, TOO_SMALL], ids=["2^64", "-2^63-1"])
async def test_integers_outside_64_bits_are_422_naming_the_field_on_memory_writes(
    client: httpx.AsyncClient, number: bytes
) -> None:
    """These were 500s: orjson.dumps raised in the size check and the idempotency hash."""
    user_id = await create_user(client)
    memory = b'{"user_id": "%s", "memory_type": "orchestrator", "content": %s}'
    nested = b'{"user_id": "%s", "memory_type": "orchestrator", "content": {"a": [%s]}}'

    scalar = await client.post(
        "/v1/memories", content=memory % (user_id.encode(), number), headers=JSON
    )
    _bound_named(assert_problem(scalar, 422), "content")
    deep = await client.post(
        "/v1/memories", content=nested % (user_id.encode(), number), headers=JSON
    )
    _bound_named(assert_problem(deep, 422), "content.a.0")
    batch = (
        b"[" + memory % (user_id.encode(), b"1") + b"," + nested % (user_id.encode(), number) + b"]"
    )
    in_batch = await client.post("/v1/memories", content=batch, headers=JSON)
    _bound_named(assert_problem(in_batch, 422), "1.content.a.0")

    by_key = b'{"user_id": "%s", "category": "session_data", "key": "k", "content": %s}'
    upsert = await client.put(
        "/v1/memories/by-key", content=by_key % (user_id.encode(), number), headers=JSON
    )
    _bound_named(assert_problem(upsert, 422), "content")

    hook = (
        b'{"agent_name": "Orchestrator_Agent", "user_id": "%s", "memory_type": "orchestrator",'
        b' "memory_content": {"n": %s}}'
    )
    webhook = await client.post(
        "/webhooks/n8n/memory",
        content=hook % (user_id.encode(), number),
        headers={**JSON, "Idempotency-Key": "big-number"},
    )
    _bound_named(assert_problem(webhook, 422), "memory_content.n")
    assert await _memory_count(client, user_id) == 0


async def test_the_bounds_themselves_are_stored(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    content = {"max": INT64_MAX, "min": INT64_MIN, "float": 1.7976931348623157e308}
    response = await client.post(
        "/v1/memories", json={"user_id": user_id, "memory_type": "orchestrator", "content": content}
    )
    assert response.status_code == 201, response.text
    assert response.json()["content"] == content


async def test_a_float_beyond_64_bits_is_422_naming_the_field(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    raw = b'{"user_id": "%s", "memory_type": "orchestrator", "content": {"x": [1, -1e400]}}'
    body = assert_problem(
        await client.post("/v1/memories", content=raw % user_id.encode(), headers=JSON), 422
    )
    assert body["errors"][0]["field"] == "content.x.1"
    assert "finite" in body["errors"][0]["message"]


async def test_huge_integers_in_session_state_name_the_field_and_the_bound(
    client: httpx.AsyncClient,
) -> None:
    """This was 422 "The database rejected a value" with no field."""
    session = await create_session(client)
    raw = b'{"session_state": {"agent_outputs": {"x": %s}}}' % TOO_BIG
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}", content=raw, headers={**JSON, **if_match(1)}
    )
    body = assert_problem(response, 422)
    _bound_named(body, "session_state.agent_outputs.x")
    assert "database" not in body["detail"]
    current = await client.get(f"/v1/sessions/{session['session_id']}")
    assert current.json()["version"] == 1


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"external_ref": "a\\u0000b"}', "external_ref"),
        (b'{"external_ref": "a", "x\\u0000": 1}', "x\\u0000"),
    ],
    ids=["in-a-string", "in-a-key"],
)
async def test_nul_characters_are_422_naming_the_field(
    client: httpx.AsyncClient, raw: bytes, field: str
) -> None:
    body = assert_problem(await client.post("/v1/users", content=raw, headers=JSON), 422)
    assert body["errors"][0]["field"] == field
    assert "NUL" in body["errors"][0]["message"]


async def test_nul_in_a_memory_names_the_path(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    raw = b'{"user_id": "%s", "memory_type": "orchestrator", "content": {"a": ["ok", "\\u0000"]}}'
    body = assert_problem(
        await client.post("/v1/memories", content=raw % user_id.encode(), headers=JSON), 422
    )
    assert body["errors"][0]["field"] == "content.a.1"
    assert await _memory_count(client, user_id) == 0


@pytest.mark.parametrize(
    ("path", "raw"),
    [
        ("/v1/users", b'{"external_ref": "\xc3\x28"}'),
        ("/v1/users", b'{"\xff": "x"}'),
        ("/v1/agents", b'{"name": "Bad_Bytes", "description": "\xed\xa0\x80"}'),
        ("/webhooks/n8n/cleanup", b'{"job": "\xc3"}'),
    ],
    ids=["in-a-value", "in-a-key", "surrogate", "webhook"],
)
async def test_invalid_utf8_is_a_400_problem(
    client: httpx.AsyncClient, path: str, raw: bytes
) -> None:
    """This was a 500 on every route that reads its body (the decoder's UnicodeDecodeError)."""
    body = assert_problem(await client.post(path, content=raw, headers=JSON), 400)
    assert body["type"].endswith(":malformed-json")
    assert "UTF-8" in body["detail"]
    assert_problem(await client.get("/v1/agents/Bad_Bytes"), 404)


@pytest.mark.parametrize(
    ("contains", "field"),
    [('{"n": 18446744073709551616}', "contains.n"), ('{"s": "a\\u0000"}', "contains.s")],
    ids=["big-integer", "nul"],
)
async def test_contains_follows_the_same_rule(
    client: httpx.AsyncClient, contains: str, field: str
) -> None:
    user_id = await create_user(client)
    response = await client.get("/v1/memories", params={"user_id": user_id, "contains": contains})
    body = assert_problem(response, 400)
    assert body["errors"][0]["field"] == field


async def test_a_member_named_twice_is_400_naming_it_and_nothing_is_written(
    client: httpx.AsyncClient,
) -> None:
    """Last-one-wins used to store "dup-b" silently; a reader that keeps the first (a proxy
    checking the body, say) would have seen another request."""
    twice = b'{"external_ref": "dup-a", "external_ref": "dup-b"}'
    problem = assert_problem(await client.post("/v1/users", content=twice, headers=JSON), 400)
    assert problem["errors"] == [
        {"field": "external_ref", "message": "appears twice in one object"}
    ]
    assert_problem(await client.get("/v1/users", params={"external_ref": "dup-b"}), 404)
    user_id = await create_user(client)
    nested = (
        b'{"user_id": "%s", "memory_type": "orchestrator", "content": {"a": 1, "a": 2}}'
        % user_id.encode()
    )
    assert_problem(await client.post("/v1/memories", content=nested, headers=JSON), 400)
    assert await _memory_count(client, user_id) == 0
    # The same name in two different objects is not a duplicate.
    apart = (
        b'{"user_id": "%s", "memory_type": "orchestrator", "content": [{"a": 1}, {"a": 2}]}'
        % user_id.encode()
    )
    assert (await client.post("/v1/memories", content=apart, headers=JSON)).status_code == 201
