"""Agent answers that are almost JSON, from a real HTTP agent on 127.0.0.1: repaired and
used (the decision says so), or, when nothing can be made of them, a malformed answer that
gets the fallback, as before."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.settings import CoordinationSettings, DatabaseSettings, Settings
from tests.agent_server import AgentServer
from tests.conftest import LOOPBACK_ALLOWED
from tests.integration.helpers import create_session

QUESTION = "what is compound interest"


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        # A small repair bound, so that the test of an answer over it stays small.
        coordination=CoordinationSettings(repair_max_bytes=16 * 1024),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
async def agent(client: httpx.AsyncClient) -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    configured = await client.patch(
        "/v1/agents/Educate_Customer_Agent", json={"url": server.url, "retry_attempts": 0}
    )
    assert configured.status_code == 200, configured.text
    yield server
    await server.stop()


async def ask(client: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any]]:
    """Send the question; the answer and the decision it recorded."""
    session = await create_session(client)
    response = await client.post(
        f"/v1/sessions/{session['session_id']}/messages", json={"text": QUESTION}
    )
    assert response.status_code == 200, response.text
    decisions = await client.get(f"/v1/sessions/{session['session_id']}/decisions")
    return response.json(), decisions.json()["items"][0]


@pytest.mark.parametrize(
    ("raw", "kind", "text"),
    [
        # An LLM's token budget ran out mid-string.
        (
            b'{"success": true, "output_data": {"response": "Interest earned on interest, '
            b"so your savings grow fast",
            "truncated",
            "Interest earned on interest, so your savings grow fast",
        ),
        (
            b'{"success": true, "output_data": {"response": "Interest on interest",},'
            b' "next_agent_suggestions": ["Make_Plan_Agent",],}',
            "malformed",
            "Interest on interest",
        ),
        (
            b"{'success': true, 'output_data': {'response': 'Interest on interest'}}",
            "malformed",
            "Interest on interest",
        ),
        (
            b'```json\n{"success": true, "output_data": {"response": "Interest on interest"}}\n```',
            "malformed",
            "Interest on interest",
        ),
    ],
    ids=["cut-mid-string", "trailing-commas", "single-quotes", "markdown-fence"],
)
async def test_an_almost_json_answer_is_repaired_and_the_decision_says_so(
    client: httpx.AsyncClient, agent: AgentServer, raw: bytes, kind: str, text: str
) -> None:
    agent.raw_reply = raw
    result, decision = await ask(client)
    assert result["degraded"] is False
    assert result["agent"] == "Educate_Customer_Agent"
    assert result["response"] == text
    assert result["repaired"] is True
    assert decision["outcome"] == "agent"
    assert decision["error"] is None
    assert decision["response"]["repaired"] is True
    assert decision["response"]["repaired_from"] == kind
    assert decision["response"]["output_data"] == {"response": text}


async def test_valid_json_is_not_marked_repaired(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    result, decision = await ask(client)
    assert result["response"] == "Hello from the agent"
    assert result["repaired"] is False
    assert decision["response"]["repaired"] is False
    assert decision["response"]["repaired_from"] is None


@pytest.mark.parametrize(
    "raw",
    [
        b"<html>502 Bad Gateway</html>",
        b"Sorry, I cannot help with that.",
        b"",
        b"[1, 2, 3",  # repairable, but not an object
        b'"just a string',
        # A member named twice is valid syntax refused for its ambiguity: not repaired.
        b'{"success": true, "success": false}',
        # Repaired, but what it holds cannot be stored (a NUL): refused like strict JSON.
        b'{"success": true, "output_data": {"response": "hi\\u0000"},',
        b"\xff\xfe{'success': true}",  # not UTF-8
    ],
    ids=["html", "prose", "empty", "array", "string", "twice", "nul", "not-utf-8"],
)
async def test_an_answer_that_cannot_be_repaired_is_malformed_and_gets_the_fallback(
    client: httpx.AsyncClient, agent: AgentServer, raw: bytes
) -> None:
    agent.raw_reply = raw
    result, decision = await ask(client)
    assert result["degraded"] is True
    assert result["fallback"] == "static_educational_content"
    assert result["repaired"] is False
    assert decision["outcome"] == "fallback"
    assert decision["error"] in {
        "agent answered malformed JSON",
        "agent answered values that cannot be stored (output_data.response)",
    }
    assert decision["response"]["repaired"] is False


async def test_an_answer_over_the_repair_bound_is_malformed_without_trying(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """The bound is what keeps hostile input cheap: 16 KiB here (the setting), of a shape
    json-repair takes super-linear time over, and just as repairable as the small ones."""
    filler = "x, " * 6000  # 18 KB
    agent.raw_reply = b'{"success": true, "output_data": {"response": "' + filler.encode()
    started = time.monotonic()
    result, decision = await ask(client)
    assert time.monotonic() - started < 5
    assert result["degraded"] is True
    assert decision["error"] == "agent answered malformed JSON"
    # The same answer under the bound is repaired.
    agent.raw_reply = b'{"success": true, "output_data": {"response": "' + filler[:3000].encode()
    result, decision = await ask(client)
    assert result["degraded"] is False
    assert decision["response"]["repaired_from"] == "truncated"


async def test_an_answer_longer_than_a_body_may_be_is_not_read(
    client: httpx.AsyncClient, agent: AgentServer, settings: Settings
) -> None:
    limit = settings.max_body_bytes
    padding = "a" * limit
    agent.raw_reply = b'{"success": true, "output_data": {"response": "' + padding.encode() + b'"}}'
    result, decision = await ask(client)
    assert result["degraded"] is True
    assert decision["error"] == f"agent answered more than {limit} bytes"
