"""No session can get stuck: whatever the coordinator does to a session, through real agents
on 127.0.0.1 that answer, fail, talk garbage or suggest nonsense, a client PATCH of that
session is still accepted afterwards."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.coordination.turn import MAX_PENDING_ATTEMPTS
from app.settings import CoordinationSettings, DatabaseSettings, Settings
from tests.agent_server import AgentServer
from tests.integration.helpers import create_session

SPECIALISTS = ["Make_Plan_Agent", "Add_Changes_Agent", "Educate_Customer_Agent"]
PHRASES = [
    "Please change my savings rate",
    "make a plan for my budget",
    "what is compound interest?",
    "I earn 4000 a month",
    "hello",
    "I lost my job, this is an emergency",
    "urgent: cancel my subscription and explain why fees exist",
    "x" * 9000 + " what is a budget?",
]


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


REPLIES: list[dict[str, Any]] = [
    {"success": True, "output_data": {"response": "Done", "progress_percentage": 55}},
    {"success": True, "output_data": "plain text answer", "next_agent_suggestions": [""]},
    {"success": True, "output_data": {"response": "ok"}, "next_agent_suggestions": ["N" * 300]},
    {
        "success": True,
        "output_data": {"response": "next"},
        "next_agent_suggestions": ["Nobody", "Make_Plan_Agent"],
    },
    {"success": True, "output_data": nested(70)},
    {"success": True, "output_data": {"response": "y" * 20_000}},
    {"success": False, "error_details": {"message": "busy", "retryable": False}},
]


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        coordination=CoordinationSettings(breaker_sync_seconds=0.2, rules_cache_seconds=0),
    )


@pytest.fixture
async def agent(client: httpx.AsyncClient) -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    for name in SPECIALISTS:
        response = await client.patch(
            f"/v1/agents/{name}", json={"url": server.url, "retry_attempts": 0, "fail_max": 1000}
        )
        assert response.status_code == 200, response.text
    yield server
    await server.stop()


async def assert_patchable(client: httpx.AsyncClient, session_id: str, progress: int) -> None:
    """The smallest client write there is: it must never be refused for what the server
    wrote."""
    response = await client.patch(
        f"/v1/sessions/{session_id}",
        json={"progress_percentage": progress},
        headers={"If-Match": "*", "content-type": "application/merge-patch+json"},
    )
    assert response.status_code == 200, response.text
    assert response.json()["progress_percentage"] == progress


async def test_an_action_the_coordinator_gives_up_on_leaves_the_session_writable(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    agent.behaviour = "fail"
    session = await create_session(client)
    sid = session["session_id"]
    first = await client.post(f"/v1/sessions/{sid}/messages", json={"text": PHRASES[0]})
    assert first.status_code == 200, first.text
    assert first.json()["fallback"] == "change_confirmation_without_analysis"
    for _ in range(MAX_PENDING_ATTEMPTS):
        retried = await client.post(f"/v1/sessions/{sid}/pending/next")
        assert retried.status_code == 200, retried.text
    (action,) = retried.json()["pending_actions"]
    assert action["status"] == "failed"
    assert action["attempts"] == MAX_PENDING_ATTEMPTS
    assert action["reason"].startswith(f"gave up after {MAX_PENDING_ATTEMPTS} attempts")
    assert (await client.post(f"/v1/sessions/{sid}/pending/next")).status_code == 409
    await assert_patchable(client, sid, 20)


@pytest.mark.parametrize("seed", range(6))
async def test_random_coordinator_work_never_locks_a_session(
    client: httpx.AsyncClient, agent: AgentServer, seed: int
) -> None:
    rng = random.Random(seed)
    session = await create_session(client, session_state={"active_process": "budget"})
    sid = session["session_id"]
    for step in range(14):
        operation = rng.choice(["message", "message", "pending", "handoff", "agent", "agent"])
        if operation == "agent":
            agent.behaviour = rng.choice(["ok", "ok", "ok", "fail", "garbage"])
            agent.reply = rng.choice(REPLIES)
        elif operation == "message":
            text = ". ".join(rng.sample(PHRASES, rng.randint(1, 3)))[:10_000]
            response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            assert response.status_code == 200, (step, response.text)
        elif operation == "pending":
            response = await client.post(f"/v1/sessions/{sid}/pending/next")
            assert response.status_code in (200, 409), (step, response.text)
        else:
            response = await client.post(
                f"/v1/sessions/{sid}/handoff",
                json={"to_agent": rng.choice(SPECIALISTS), "reason": "test"},
                headers={"If-Match": "*"},
            )
            assert response.status_code == 200, (step, response.text)
        await assert_patchable(client, sid, rng.randint(0, 100))
    versions = (await client.get(f"/v1/sessions/{sid}/versions", params={"limit": 1})).json()
    assert versions["items"][0]["change_reason"] == "patched"
