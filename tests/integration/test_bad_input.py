"""Bad input of every kind gets a clear 4xx problem, never a 500, never a half-write."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from litestar import Litestar

from app.common.validation import MAX_JSON_DEPTH
from app.settings import DatabaseSettings, ServerSettings, Settings
from tests.conftest import ADMIN_KEY
from tests.integration.helpers import assert_problem, create_session, if_match


@pytest.fixture
def settings() -> Settings:
    return Settings(
        server=ServerSettings(max_body_bytes=64 * 1024),
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
    )


async def _unchanged(client: httpx.AsyncClient, session: dict[str, Any]) -> None:
    current = (await client.get(f"/v1/sessions/{session['session_id']}")).json()
    assert current == session


async def test_body_over_the_limit_is_413(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    big = {"session_state": {"agent_outputs": {"blob": "x" * (65 * 1024)}}}
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}", json=big, headers=if_match(1)
    )
    assert_problem(response, 413)
    await _unchanged(client, session)


async def test_malformed_json_is_400(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    for raw in (b"{", b'{"a": }', b"\xff\xfe", b'{"a": 1} trailing'):
        response = await client.patch(
            f"/v1/sessions/{session['session_id']}",
            content=raw,
            headers={"content-type": "application/json", **if_match(1)},
        )
        assert_problem(response, 400)
    await _unchanged(client, session)


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml", ""]
)
async def test_non_json_body_is_415(client: httpx.AsyncClient, content_type: str) -> None:
    response = await client.post(
        "/v1/users", content=b'{"external_ref": "a"}', headers={"content-type": content_type}
    )
    assert_problem(response, 415)


async def test_json_with_charset_parameter_is_accepted(client: httpx.AsyncClient) -> None:
    response = await client.post(
        "/v1/users",
        content=b'{"external_ref": "charset"}',
        headers={"content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201


@pytest.mark.parametrize(
    "value",
    [
        "nul \u0000 inside",
        {"key\u0000": 1},
        2**64,
        -(2**70),
        1e400,
    ],
    ids=["nul-in-string", "nul-in-key", "above-uint64", "below-int64", "float-overflow"],
)
async def test_values_postgres_cannot_store_are_4xx_and_write_nothing(
    client: httpx.AsyncClient, value: Any
) -> None:
    session = await create_session(client)
    if value == 1e400:
        raw = b'{"session_state": {"agent_outputs": {"x": 1e400}}}'
    else:
        import json

        raw = json.dumps({"session_state": {"agent_outputs": {"x": value}}}).encode()
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        content=raw,
        headers={"content-type": "application/json", **if_match(1)},
    )
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    await _unchanged(client, session)


@pytest.mark.parametrize("depth", [300, 1_000, 10_000])
async def test_deeply_nested_json_is_4xx(client: httpx.AsyncClient, depth: int) -> None:
    session = await create_session(client)
    raw = b'{"session_state": {"agent_outputs": {"x": ' + b"[" * depth + b"]" * depth + b"}}}"
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        content=raw,
        headers={"content-type": "application/json", **if_match(1)},
    )
    assert 400 <= response.status_code < 500, response.text
    await _unchanged(client, session)


async def test_nesting_up_to_the_limit_is_stored_and_beyond_is_422(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"

    def nested(levels: int) -> Any:
        value: Any = "leaf"
        for _ in range(levels):
            value = {"n": value}
        return value

    # session_state -> agent_outputs -> x adds three levels on top of the nested value.
    fits = {"session_state": {"agent_outputs": {"x": nested(MAX_JSON_DEPTH - 2)}}}
    too_deep = {"session_state": {"agent_outputs": {"x": nested(MAX_JSON_DEPTH - 1)}}}
    assert (await client.patch(url, json=fits, headers=if_match(1))).status_code == 200
    body = assert_problem(await client.patch(url, json=too_deep, headers=if_match(2)), 422)
    assert body["errors"][0]["field"] == "session_state"


async def test_sql_looking_strings_are_stored_literally(client: httpx.AsyncClient) -> None:
    evil = "'); DROP TABLE session_coordination; --"
    session = await create_session(
        client, session_state={"conversation_context": {"summary": evil}}, current_agent=evil[:100]
    )
    again = (await client.get(f"/v1/sessions/{session['session_id']}")).json()
    assert again["session_state"]["conversation_context"]["summary"] == evil
    assert again["current_agent"] == evil[:100]
    response = await client.get("/v1/users", params={"external_ref": evil})
    assert_problem(response, 404)


async def test_unknown_route_and_method_are_problems(client: httpx.AsyncClient) -> None:
    assert_problem(await client.get("/v1/nothing-here"), 404)
    assert_problem(await client.put("/v1/users"), 405)


async def test_unexpected_errors_are_500_problems_without_internals(
    running_app: Litestar, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.users.service import UserService

    async def broken(self: UserService, external_ref: str | None) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(UserService, "create_user", broken)
    response = await client.post("/v1/users", json={})
    body = assert_problem(response, 500)
    assert "secret" not in response.text
    assert body["type"].endswith("internal-error")


# The url columns hold at most 2000 characters (pydantic alone allows 2083), counted on the
# URL as stored, which pydantic normalises: "é" is stored as "%C3%A9".
_PREFIX = "http://example.com/"
_URLS = {
    "2001": _PREFIX + "a" * (2001 - len(_PREFIX)),
    "2083": _PREFIX + "a" * (2083 - len(_PREFIX)),
    "grows-past-2000": _PREFIX + "\u00e9" * 400,
}


@pytest.mark.parametrize("url", list(_URLS.values()), ids=list(_URLS))
async def test_urls_longer_than_their_columns_are_422(client: httpx.AsyncClient, url: str) -> None:
    created = await client.post("/v1/agents", json={"name": "Long_Url_Agent", "url": url})
    assert assert_problem(created, 422)["errors"][0]["field"] == "url"
    assert_problem(await client.get("/v1/agents/Long_Url_Agent"), 404)

    changed = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": url})
    assert assert_problem(changed, 422)["errors"][0]["field"] == "url"
    card = {"name": "Planner", "url": url}
    assert_problem(await client.post("/v1/agents/Make_Plan_Agent/card", json=card), 422)
    assert (await client.get("/v1/agents/Make_Plan_Agent")).json()["url"] is None

    subscription = {"url": url, "event_types": ["session.expired"]}
    assert_problem(await client.post("/v1/subscriptions", json=subscription), 422)
    assert (await client.get("/v1/subscriptions")).json() == []


async def test_a_url_of_exactly_2000_characters_is_stored(client: httpx.AsyncClient) -> None:
    url = _PREFIX + "a" * (2000 - len(_PREFIX))
    changed = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": url})
    assert changed.status_code == 200, changed.text
    assert changed.json()["url"] == url
    subscription = {"url": url, "event_types": ["session.expired"]}
    assert (await client.post("/v1/subscriptions", json=subscription)).status_code == 201


async def test_a_client_that_disconnects_mid_body_is_not_logged_as_a_server_error(
    running_app: Litestar, caplog: pytest.LogCaptureFixture
) -> None:
    """A load generator stopping, or a caller timing out, closes the connection while its
    body is on the way: not a bug of ours, so no ERROR log and no traceback."""
    sent: list[dict[str, Any]] = []
    chunks = [
        {"type": "http.request", "body": b'{"user_id": ', "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/memories",
        "raw_path": b"/v1/memories",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver.local"),
            (b"authorization", f"Bearer {ADMIN_KEY}".encode()),
            (b"content-type", b"application/json"),
            (b"content-length", b"100"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }
    with caplog.at_level(logging.INFO):
        await running_app(scope, receive, send)  # type: ignore[arg-type]
    assert sent[0]["status"] == 400
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any("disconnected" in r.getMessage() for r in caplog.records)


async def test_an_agent_card_nested_past_the_limit_is_422(client: httpx.AsyncClient) -> None:
    """Its extra fields are stored as published; they had no depth limit."""
    nested: Any = "leaf"
    for _ in range(MAX_JSON_DEPTH):
        nested = {"n": nested}
    card = {"name": "Planner", "url": "https://example.com/a", "capabilities": nested}
    body = assert_problem(await client.post("/v1/agents/Make_Plan_Agent/card", json=card), 422)
    assert body["errors"][0]["field"] == "$"
    skill = {"id": "plan", "name": "Plan", "extra": nested}
    changed = await client.patch("/v1/agents/Make_Plan_Agent", json={"skills": [skill]})
    assert assert_problem(changed, 422)["errors"][0]["field"] == "skills.0"
    assert_problem(await client.get("/v1/agents/Make_Plan_Agent/card"), 404)
