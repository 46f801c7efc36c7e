"""A session keeps only its latest agent executions; the rest stay in its history."""

from __future__ import annotations

import httpx
import pytest

from app.settings import CoordinationSettings, DatabaseSettings, SessionSettings, Settings
from tests.integration.helpers import create_session


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        sessions=SessionSettings(agent_sequence_limit=3),
        # Five fallbacks of one step in a row would escalate the session (its fourth failure
        # is past the default three retries); this test is about the sequence, not that.
        coordination=CoordinationSettings(max_step_retries=100, max_consecutive_fallbacks=100),
    )


async def test_messages_keep_the_last_executions_and_log_every_one(
    client: httpx.AsyncClient,
) -> None:
    sid = (await create_session(client))["session_id"]
    for _ in range(5):
        response = await client.post(
            f"/v1/sessions/{sid}/messages", json={"text": "what is compound interest"}
        )
        assert response.status_code == 200, response.text

    session = (await client.get(f"/v1/sessions/{sid}")).json()
    assert session["version"] == 6
    assert [s["execution_order"] for s in session["agent_sequence"]] == [3, 4, 5]
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert len(decisions) == 5
    versions = (await client.get(f"/v1/sessions/{sid}/versions")).json()["items"]
    third = next(v for v in versions if v["version"] == 4)
    assert [s["execution_order"] for s in third["agent_sequence"]] == [1, 2, 3]


async def test_handoffs_keep_the_last_executions(client: httpx.AsyncClient) -> None:
    sid = (await create_session(client))["session_id"]
    agents = [
        "Intent_Session_Agent",
        "Make_Plan_Agent",
        "Educate_Customer_Agent",
        "Orchestrator_Agent",
    ]
    for version, agent in enumerate(agents, start=1):
        response = await client.post(
            f"/v1/sessions/{sid}/handoff",
            json={"to_agent": agent, "reason": "next"},
            headers={"If-Match": f'"{version}"'},
        )
        assert response.status_code == 200, response.text
    body = response.json()
    assert body["current_agent"] == "Orchestrator_Agent"
    assert [(s["agent_name"], s["execution_order"]) for s in body["agent_sequence"]] == [
        ("Make_Plan_Agent", 2),
        ("Educate_Customer_Agent", 3),
        ("Orchestrator_Agent", 4),
    ]
