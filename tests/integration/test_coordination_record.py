"""What one coordinated turn answers and records, pinned whole: the message's answer, the
request the agent gets, the decision as GET .../decisions lists it and the session it leaves.
The coordinator is assembled from several modules; this is the contract they keep together."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest

from app.settings import CoordinationSettings, DatabaseSettings, Settings
from tests.agent_server import AgentServer
from tests.conftest import LOOPBACK_ALLOWED
from tests.integration.helpers import create_session

PINS = Path(__file__).parent / "pins"
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
TRACE_ID_RE = re.compile(r"^[0-9a-f]{32}$")
TASK_URL_RE = re.compile(
    r"^/v1/tasks/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
)
# The order of a decision's fields as the API lists them.
DECISION_FIELDS = [
    "decision_id",
    "session_id",
    "session_version",
    "message",
    "context_flags",
    "classifier",
    "intents",
    "primary_intent",
    "chosen_agent",
    "routed_by",
    "breaker_state",
    "outcome",
    "fallback",
    "degraded",
    "attempts",
    "error",
    "response",
    "execution_time_ms",
    "created_by",
    "created_at",
    "trace_id",
    "task_id",
    "next_step",
    "branch",
]


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        coordination=CoordinationSettings(rules_cache_seconds=0),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


async def configure(client: httpx.AsyncClient, name: str, **fields: Any) -> None:
    response = await client.patch(f"/v1/agents/{name}", json=fields)
    assert response.status_code == 200, response.text


def stable(value: Any, *volatile: str) -> Any:
    """``value`` with ids and times checked for their form and replaced by placeholders,
    and the named timing fields checked to be non-negative integers and dropped."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if key in volatile:
                assert isinstance(item, int), (key, item)
                assert item >= 0, (key, item)
                continue
            out[key] = stable(item, *volatile)
        return out
    if isinstance(value, list):
        return [stable(item, *volatile) for item in value]
    if isinstance(value, str) and UUID_RE.match(value):
        return "<uuid>"
    if isinstance(value, str) and TIME_RE.match(value):
        return "<time>"
    if isinstance(value, str) and TRACE_ID_RE.match(value):
        return "<trace-id>"
    if isinstance(value, str) and TASK_URL_RE.match(value):
        return "/v1/tasks/<uuid>"
    return value


async def latest_decision(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    page = (await client.get(f"/v1/sessions/{sid}/decisions")).json()
    assert page["next_cursor"] is None
    decision: dict[str, Any] = page["items"][0]
    assert list(decision) == DECISION_FIELDS
    return decision


def pinned(name: str, observed: Any) -> None:
    """``observed`` is what tests/integration/pins/coordination_<name>.json holds. (Made by
    the coordinator as it was before its modules were split out; a deliberate change of
    behaviour rewrites the pin, and the diff shows what changed.)"""
    pin = PINS / f"coordination_{name}.json"
    assert observed == json.loads(pin.read_text()), f"differs from {pin}"


async def test_an_answering_agent_and_a_queued_secondary(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, "Make_Plan_Agent", url=agent.url)
    agent.reply = {
        "success": True,
        "output_data": {"response": "Here is your plan", "progress_percentage": 40},
        "memory_updates": [
            {
                "memory_type": "planning",
                "content": {"plan": "v1"},
                "category": "user_profile",
                "key": "plan",
                "scope": "user",
            },
            {"memory_type": "planning", "content": {"x": 1}, "access_level": "authorized_agents"},
            {"memory_type": "planning", "content": {"x": 2}, "access_level": "no_such_level"},
        ],
        "next_agent_suggestions": ["Educate_Customer_Agent", "Nobody_Agent"],
        "execution_time_ms": 12,
    }
    session = await create_session(client)
    sid = session["session_id"]
    answer = await client.post(
        f"/v1/sessions/{sid}/messages",
        json={
            "text": "Please make a plan for my savings urgently. Also what is a budget?",
            "context_flags": ["time_sensitive_deadline"],
        },
    )
    assert answer.status_code == 200, answer.text
    sent = agent.requests[-1]
    assert UUID_RE.match(sent.pop("request_id"))
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    pinned(
        "agent",
        stable(
            {
                "answer": answer.json(),
                "sent": sent,
                "decision": await latest_decision(client, sid),
                "session": current,
            },
            "execution_time_ms",
            "seconds_without_progress",
        ),
    )

    # The queued secondary, processed: no url, so its fallback answers.
    queued = await client.post(f"/v1/sessions/{sid}/pending/next")
    assert queued.status_code == 200, queued.text
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    pinned(
        "pending",
        stable(
            {
                "answer": queued.json(),
                "decision": await latest_decision(client, sid),
                "session": current,
            },
            "execution_time_ms",
            "seconds_without_progress",
        ),
    )


async def test_a_fallback_that_passes_the_request_on(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    classifier = await AgentServer().start()
    try:
        classifier.reply = {
            "success": True,
            "output_data": {"intents": [{"intent": "general_inquiry", "clause": "hi there"}]},
        }
        await configure(client, "Intent_Session_Agent", url=classifier.url)
        await configure(client, "Make_Plan_Agent", url=agent.url, retry_attempts=0)
        agent.behaviour = "fail"
        session = await create_session(client)
        sid = session["session_id"]
        answer = await client.post(
            f"/v1/sessions/{sid}/messages",
            json={"text": "hi there, make a plan for my savings. What is a budget?"},
        )
        assert answer.status_code == 200, answer.text
        asked = classifier.requests[-1]
    finally:
        await classifier.stop()
    assert UUID_RE.match(asked.pop("request_id"))
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    pinned(
        "routed",
        stable(
            {
                "answer": answer.json(),
                "classifier_request": asked,
                "decision": await latest_decision(client, sid),
                "session": current,
            },
            "execution_time_ms",
            "seconds_without_progress",
        ),
    )


async def test_a_clarification_and_a_change_queued_by_its_fallback(
    client: httpx.AsyncClient,
) -> None:
    await client.put(
        "/v1/intents/request_plan", json={"base_weight": 60, "keywords": ["plan", "budget"]}
    )
    session = await create_session(client, session_state={"active_process": "budget"})
    sid = session["session_id"]
    asked = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": "I want a plan and also some advice"}
    )
    assert asked.status_code == 200, asked.text
    first = await latest_decision(client, sid)
    changed = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": "change my savings rate to 15%"}
    )
    assert changed.status_code == 200, changed.text
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    pinned(
        "clarification",
        stable(
            {
                "asked": asked.json(),
                "asked_decision": first,
                "changed": changed.json(),
                "changed_decision": await latest_decision(client, sid),
                "session": current,
            },
            "execution_time_ms",
            "seconds_without_progress",
        ),
    )


async def test_a_decision_recorded_before_direct_routing_still_lists(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """Decisions stored before 2be24e5 have no response.routed_to; they are listed with
    it null, like every decision since whose message was not passed on."""
    session = await create_session(client)
    sid = session["session_id"]
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """
            INSERT INTO coordination_decisions (
                session_id, session_version, message, context_flags, classifier, intents,
                primary_intent, chosen_agent, routed_by, breaker_state, outcome, fallback,
                degraded, attempts, error, response, execution_time_ms, created_by
            ) VALUES (
                $1, 1, 'hello', '{}', 'rules', '[]', NULL, 'Orchestrator_Agent', 'intent',
                'closed', 'fallback', 'direct_agent_routing', true, 0, 'no url',
                '{"text": "Hi", "output_data": null, "next_agent_suggestions": []}', 3, 'admin'
            )
            """,
            UUID(sid),
        )
    finally:
        await conn.close()
    decision = await latest_decision(client, sid)
    assert decision["response"] == {
        "text": "Hi",
        "output_data": None,
        "next_agent_suggestions": [],
        "routed_to": None,
        "repaired": False,
        "repaired_from": None,
    }
    assert decision["trace_id"] is None  # recorded before decisions kept their trace
