"""No session can get stuck: whatever the coordinator does to a session, through real agents
on 127.0.0.1 that answer, fail, talk garbage or suggest nonsense, a client PATCH of that
session is still accepted afterwards."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.settings import CoordinationSettings, DatabaseSettings, Settings
from tests.agent_server import AgentServer
from tests.conftest import LOOPBACK_ALLOWED
from tests.integration.helpers import (
    assert_problem,
    create_session,
    store_content_a_rule_now_refuses,
)

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
        outbound=LOOPBACK_ALLOWED,
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


def refuse(agent: AgentServer) -> None:
    """The agent turns the work down for good (not retryable): its task fails within the
    message and the fallback queues the change (a task still retrying would be the
    queued work itself, app/coordination/tasks.py)."""
    agent.behaviour = "ok"
    agent.reply = {"success": False, "error_details": {"message": "away", "retryable": False}}


async def resolve_if_escalated(client: httpx.AsyncClient, session_id: str) -> None:
    """A person answers an escalation (a dead letter, or a limit of the next-step decision
    reached): an escalated session takes no messages until then, but is never stuck."""
    current = (await client.get(f"/v1/sessions/{session_id}")).json()
    if current["status"] == "escalated":
        response = await client.post(
            f"/v1/sessions/{session_id}/resolve", json={"note": "looked at it"}
        )
        assert response.status_code == 200, response.text


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
    refuse(agent)
    session = await create_session(client)
    sid = session["session_id"]
    first = await client.post(f"/v1/sessions/{sid}/messages", json={"text": PHRASES[0]})
    assert first.status_code == 200, first.text
    assert first.json()["fallback"] == "change_confirmation_without_analysis"
    # The refusal dead-lettered the task: the session waits for a person (and a PATCH of
    # it is still taken).
    await assert_patchable(client, sid, 10)
    await resolve_if_escalated(client, sid)
    retried = await client.post(f"/v1/sessions/{sid}/pending/next")
    assert retried.status_code == 200, retried.text
    # The action's task failed for good (its retries are the task's): failed at once.
    (action,) = retried.json()["pending_actions"]
    assert action["status"] == "failed"
    assert action["attempts"] == 1
    assert action["reason"]
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
            await resolve_if_escalated(client, sid)
            text = ". ".join(rng.sample(PHRASES, rng.randint(1, 3)))[:10_000]
            response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            assert response.status_code == 200, (step, response.text)
        elif operation == "pending":
            await resolve_if_escalated(client, sid)
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


async def test_two_callers_never_run_the_same_queued_action(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    refuse(agent)  # Add_Changes_Agent turns it down: the change is queued
    queued = await client.post(f"/v1/sessions/{sid}/messages", json={"text": PHRASES[0]})
    assert [a["status"] for a in queued.json()["pending_actions"]] == ["pending"]
    await resolve_if_escalated(client, sid)  # the refusal's dead letter escalated it
    agent.behaviour = "ok"
    agent.reply = {"success": True, "output_data": {"response": "Changed"}}
    called, release = asyncio.Event(), asyncio.Event()

    async def slow() -> None:
        called.set()
        await release.wait()

    agent.before_reply = slow
    calls = len(agent.requests)
    first = asyncio.create_task(client.post(f"/v1/sessions/{sid}/pending/next"))
    await called.wait()  # the first caller's agent call is in flight
    second = await client.post(f"/v1/sessions/{sid}/pending/next")
    assert second.status_code == 409, second.text
    release.set()
    assert (await first).status_code == 200
    assert len(agent.requests) == calls + 1
    assert (await client.get(f"/v1/sessions/{sid}")).json()["session_state"][
        "pending_actions"
    ] == []


async def test_a_client_cancelling_a_queued_action_while_it_runs_keeps_the_cancel(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    refuse(agent)
    await client.post(f"/v1/sessions/{sid}/messages", json={"text": PHRASES[0]})
    await resolve_if_escalated(client, sid)  # the refusal's dead letter escalated it

    async def cancel() -> None:
        current = (await client.get(f"/v1/sessions/{sid}")).json()
        actions = current["session_state"]["pending_actions"]
        assert actions[0]["status"] == "in_progress"
        actions[0]["status"] = "cancelled"
        patched = await client.patch(
            f"/v1/sessions/{sid}",
            json={"session_state": {"pending_actions": actions}},
            headers={"If-Match": "*", "content-type": "application/merge-patch+json"},
        )
        assert patched.status_code == 200, patched.text

    agent.before_reply = cancel
    result = await client.post(f"/v1/sessions/{sid}/pending/next")
    assert result.status_code == 200, result.text
    (action,) = result.json()["pending_actions"]
    assert (action["status"], action["attempts"]) == ("cancelled", 0)


async def test_a_session_stored_before_a_rule_tightened_is_refused_before_any_agent_call(
    client: httpx.AsyncClient, agent: AgentServer, database_url: str
) -> None:
    """Content an older version stored (a 5,000-character description) is a 422 naming the
    field when a message would write it, and no agent is called for nothing."""
    session = await create_session(client)
    sid = session["session_id"]
    await store_content_a_rule_now_refuses(database_url, sid)
    calls = len(agent.requests)
    refused = await client.post(f"/v1/sessions/{sid}/messages", json={"text": PHRASES[1]})
    problem = assert_problem(refused, 422)
    assert problem["errors"][0]["field"] == "pending_actions.0.description"
    assert len(agent.requests) == calls
    # The client repairs it with a PATCH, and the session works again.
    repaired = await client.patch(
        f"/v1/sessions/{sid}",
        json={"session_state": {"pending_actions": []}},
        headers={"If-Match": "*", "content-type": "application/merge-patch+json"},
    )
    assert repaired.status_code == 200, repaired.text
    again = await client.post(f"/v1/sessions/{sid}/messages", json={"text": PHRASES[1]})
    assert again.status_code == 200, again.text
