"""Switchboard as an A2A client, against real a2a-sdk agents on 127.0.0.1: discovery
(success, unreachable, invalid, unknown agent), SendMessage in place of the seed's JSON
request (the answer mapped, the trace and request id sent), input-required that the
user's next message answers on the same remote task, the breaker and fallback when the
agent fails, and the agent_cards job marking a dead agent."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.settings import (
    CoordinationSettings,
    DatabaseSettings,
    ServerSettings,
    Settings,
    TaskSettings,
)
from tests.a2a_agent import A2AAgent
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED, app_client, lifespan_of
from tests.integration.helpers import assert_problem, create_session, eventually

PLAN = "Please make a plan for my savings"
PLAN_AGENT = "Make_Plan_Agent"


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        coordination=CoordinationSettings(
            breaker_sync_seconds=0.2, rules_cache_seconds=0, card_timeout_seconds=2
        ),
        tasks=TaskSettings(
            max_retries=1, retry_base_seconds=0.05, retry_cap_seconds=0.1, poll_interval=0.2
        ),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
def app(settings: Settings, database_url: str) -> Litestar:
    return create_app(settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False)


@pytest.fixture
async def agent() -> AsyncIterator[A2AAgent]:
    server = await A2AAgent().start()
    yield server
    await server.stop()


async def discover(client: httpx.AsyncClient, url: str, name: str = PLAN_AGENT) -> Any:
    patched = await client.patch(f"/v1/agents/{name}", json={"url": url})
    assert patched.status_code == 200, patched.text
    response = await client.post(f"/v1/agents/{name}/discover")
    assert response.status_code == 200, response.text
    return response.json()


async def message(client: httpx.AsyncClient, sid: str, text: str) -> Any:
    response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert response.status_code == 200, response.text
    return response.json()


# -- discovery ------------------------------------------------------------------------------


async def test_discovery_stores_the_card_and_registers_its_skills(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    found = await discover(client, agent.url)
    assert found["a2a_url"] == agent.url + "/a2a"
    assert found["a2a_protocol_version"] == "1.0"
    assert found["card_status"] == "discovered"
    assert found["card_error"] is None
    assert found["card_fetched_at"] is not None
    assert found["url"].rstrip("/") == agent.url  # where the card is fetched from stays
    assert [s["id"] for s in found["skills"]] == ["a2a_budgeting"]
    card = (await client.get(f"/v1/agents/{PLAN_AGENT}/card")).json()
    assert card["name"] == "planner"
    assert card["supportedInterfaces"][0]["protocolBinding"] == "JSONRPC"
    skills = {s["skill_id"]: s for s in (await client.get("/v1/skills")).json()}
    assert skills["a2a_budgeting"]["agents"] == [PLAN_AGENT]
    assert skills["a2a_budgeting"]["tags"] == ["budget", "plan"]


async def test_discovery_on_registration(client: httpx.AsyncClient, agent: A2AAgent) -> None:
    created = await client.post(
        "/v1/agents", json={"name": "remote_planner", "url": agent.url, "discover": True}
    )
    assert created.status_code == 201, created.text
    body = created.json()["agent"]
    assert body["card_status"] == "discovered"
    assert body["a2a_url"] == agent.url + "/a2a"
    # A card that cannot be had does not refuse the registration: it is the agent's status.
    agent.card_mode = "missing"
    other = await client.post(
        "/v1/agents", json={"name": "cardless", "url": agent.url, "discover": True}
    )
    assert other.status_code == 201, other.text
    assert other.json()["agent"]["card_status"] == "unreachable"
    assert "HTTP 404" in other.json()["agent"]["card_error"]
    # Without discover, nothing is fetched.
    fetches = agent.card_fetches
    plain = await client.post("/v1/agents", json={"name": "plain", "url": agent.url})
    assert plain.status_code == 201
    assert plain.json()["agent"]["card_status"] is None
    assert agent.card_fetches == fetches


async def test_discovery_of_an_unreachable_agent_is_502_and_marks_it(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    await discover(client, agent.url)
    url = agent.url
    await agent.stop()
    response = await client.post(f"/v1/agents/{PLAN_AGENT}/discover")
    assert_problem(response, 502)
    assert response.json()["card_status"] == "unreachable"
    assert url in response.json()["detail"]
    shown = (await client.get(f"/v1/agents/{PLAN_AGENT}")).json()
    assert shown["card_status"] == "unreachable"
    assert shown["card_error"]
    # The card fetched before stays in use: its skills still route.
    assert shown["a2a_url"] == url + "/a2a"
    assert [s["id"] for s in shown["skills"]] == ["a2a_budgeting"]


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("garbage", "parse JSON"),
        ("no_interface", "no JSON-RPC interface"),
        ("bad_skill", "skills[0].id"),
    ],
)
async def test_discovery_of_an_invalid_card_is_422(
    client: httpx.AsyncClient, agent: A2AAgent, mode: Any, said: str
) -> None:
    agent.card_mode = mode
    await client.patch(f"/v1/agents/{PLAN_AGENT}", json={"url": agent.url})
    response = await client.post(f"/v1/agents/{PLAN_AGENT}/discover")
    assert_problem(response, 422)
    assert said in response.json()["detail"]
    shown = (await client.get(f"/v1/agents/{PLAN_AGENT}")).json()
    assert shown["card_status"] == "invalid"
    assert shown["a2a_url"] is None  # nothing of the bad card is used


async def test_discovery_of_unknown_or_urlless_agents(client: httpx.AsyncClient) -> None:
    assert_problem(await client.post("/v1/agents/nobody_here/discover"), 404)
    assert_problem(await client.post(f"/v1/agents/{PLAN_AGENT}/discover"), 422)


async def test_discovery_is_the_admins(client: httpx.AsyncClient, make_agent_client: Any) -> None:
    other = await make_agent_client("some_agent")
    assert_problem(await other.post(f"/v1/agents/{PLAN_AGENT}/discover"), 403)


async def test_discovery_respects_the_outbound_policy(
    app: Litestar, database_url: str, agent: A2AAgent
) -> None:
    """With loopback refused (the default policy), the card of an agent on 127.0.0.1 is
    never fetched."""
    strict = create_app(
        Settings(database=DatabaseSettings(pool_min_size=1, pool_max_size=2)),
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
        run_worker=False,
    )
    # The url is set through an app that allows loopback (the strict one refuses it at
    # PATCH), then discovered by the strict one: its transport refuses the address.
    async with lifespan_of(app), app_client(app, {"X-API-Key": ADMIN_KEY}) as lenient:
        patched = await lenient.patch(f"/v1/agents/{PLAN_AGENT}", json={"url": agent.url})
        assert patched.status_code == 200
    async with lifespan_of(strict), app_client(strict, {"X-API-Key": ADMIN_KEY}) as admin:
        response = await admin.post(f"/v1/agents/{PLAN_AGENT}/discover")
        assert_problem(response, 502)
        shown = (await admin.get(f"/v1/agents/{PLAN_AGENT}")).json()
        assert shown["card_status"] == "unreachable"
    assert agent.card_fetches == 0


# -- calling an A2A agent -------------------------------------------------------------------


async def test_an_a2a_agent_is_called_with_send_message(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    await discover(client, agent.url)
    session = await create_session(client)
    result = await message(client, session["session_id"], PLAN)
    assert result["agent"] == PLAN_AGENT
    assert result["degraded"] is False
    assert result["response"] == "Here is your plan"
    output = result["output_data"]
    assert output["a2a"]["state"] == "completed"
    assert output["artifacts"][0]["name"] == "plan"
    assert output["artifacts"][0]["parts"][0]["text"] == f"plan for: {PLAN}"
    [sent] = agent.received
    assert sent.text == PLAN
    switchboard = sent.metadata["switchboard"]
    assert switchboard["session_id"] == session["session_id"]
    assert switchboard["input_data"]["intent"] == "request_plan"
    # The request id and the trace context travel with the call.
    [headers] = agent.headers
    assert headers["x-request-id"] == switchboard["request_id"]
    assert headers["traceparent"].startswith("00-")
    assert headers["a2a-version"] == "1.0"
    task = (await client.get(result["task_url"])).json()
    assert task["task"]["status"] == "completed"
    assert task["task"]["result"]["output_data"]["a2a"]["task_id"]


async def test_an_agent_message_answer_is_the_reply(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    agent.behaviour = "message"
    agent.answer = "A plan, straight away"
    await discover(client, agent.url)
    session = await create_session(client)
    result = await message(client, session["session_id"], PLAN)
    assert result["response"] == "A plan, straight away"
    assert result["degraded"] is False


async def test_input_required_then_the_next_message_continues_the_same_task(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    agent.behaviour = "ask"
    await discover(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    asked = await message(client, sid, PLAN)
    assert asked["response"] == "Which month should the plan start?"
    assert asked["degraded"] is False
    assert asked["output_data"]["a2a"]["state"] == "input-required"
    task_id = asked["task_id"]
    waiting = (await client.get(f"/v1/tasks/{task_id}")).json()
    assert waiting["task"]["status"] == "input-required"
    remote_task = asked["output_data"]["a2a"]["task_id"]
    remote_context = asked["output_data"]["a2a"]["context_id"]

    # The answer has no planning words: it is not routed, it goes to the waiting task.
    done = await message(client, sid, "January, thanks")
    assert done["agent"] == PLAN_AGENT
    assert done["response"] == "Here is your plan"
    assert done["task_id"] == task_id  # the same Switchboard task
    assert done["output_data"]["a2a"]["state"] == "completed"
    assert done["output_data"]["a2a"]["task_id"] == remote_task
    first, second = agent.received
    assert first.task_id != ""
    assert second.task_id == remote_task
    assert second.context_id == remote_context
    assert second.text == "January, thanks"
    detail = (await client.get(f"/v1/tasks/{task_id}")).json()
    assert detail["task"]["status"] == "completed"
    path = [(t["from_status"], t["to_status"]) for t in detail["transitions"]]
    assert ("working", "input-required") in path
    assert ("input-required", "working") in path
    assert path[-1] == ("working", "completed")
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert decisions[0]["classifier"] == "input_required"
    assert decisions[0]["routed_by"] == f"input_required:{task_id}"

    # The task is over: the next message is routed afresh (a new remote task).
    again = await message(client, sid, PLAN)
    assert again["task_id"] != task_id
    assert agent.received[-1].task_id not in ("", remote_task)


async def test_a_canceled_waiting_task_is_not_continued(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    agent.behaviour = "ask"
    await discover(client, agent.url)
    sid = (await create_session(client))["session_id"]
    asked = await message(client, sid, PLAN)
    canceled = await client.post(f"/v1/tasks/{asked['task_id']}/cancel", json={})
    assert canceled.status_code == 200, canceled.text
    agent.behaviour = "complete"
    fresh = await message(client, sid, PLAN)
    assert fresh["task_id"] != asked["task_id"]
    assert agent.received[-1].task_id != agent.received[0].task_id


async def test_a_failing_a2a_agent_gets_its_fallback_and_opens_its_breaker(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    await discover(client, agent.url)
    await client.patch(f"/v1/agents/{PLAN_AGENT}", json={"fail_max": 2})
    agent.behaviour = "http500"
    sid = (await create_session(client))["session_id"]
    first = await message(client, sid, PLAN)
    assert first["degraded"] is True
    assert first["fallback"] == "basic_budget_template"
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    # The turn's own decision: the task's dead letter may already have added an escalation.
    [turn] = [d for d in decisions if d["decision_id"] == first["decision_id"]]
    assert "HTTP 500" in (turn["error"] or "")

    # The task retries in the background (max_retries=1): two failures open the breaker.
    async def opened() -> bool:
        breaker = (await client.get(f"/v1/agents/{PLAN_AGENT}/breaker")).json()
        return bool(breaker["state"] == "open")

    await eventually(opened)
    calls = len(agent.headers)
    # The task's dead letter escalated that session: another user's session asks.
    other = (await create_session(client))["session_id"]
    refused = await message(client, other, PLAN)
    assert refused["degraded"] is True
    assert len(agent.headers) == calls  # an open circuit sends nothing


async def test_a_failed_a2a_task_is_a_failed_call(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    agent.behaviour = "fail_task"
    await discover(client, agent.url)
    sid = (await create_session(client))["session_id"]
    result = await message(client, sid, PLAN)
    assert result["degraded"] is True
    task = (await client.get(result["task_url"])).json()["task"]
    assert task["status"] == "failed"
    assert "the planner broke" in task["last_error"]


async def test_a_hanging_a2a_agent_times_out_to_its_fallback(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    agent.behaviour = "hang"
    await discover(client, agent.url)
    await client.patch(f"/v1/agents/{PLAN_AGENT}", json={"timeout_ms": 300})
    sid = (await create_session(client))["session_id"]
    result = await message(client, sid, PLAN)
    assert result["degraded"] is True
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    [turn] = [d for d in decisions if d["decision_id"] == result["decision_id"]]
    assert "timeout" in (turn["error"] or "")


# -- the agent_cards job ----------------------------------------------------------------------


async def test_the_agent_cards_job_refreshes_and_marks_a_dead_agent(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    await discover(client, agent.url)
    fetched = agent.card_fetches
    run = await client.post("/v1/jobs/agent_cards/run")
    assert run.status_code == 200, run.text
    assert run.json()["details"]["agent_cards_checked"] == 1
    assert agent.card_fetches == fetched + 1
    assert (await client.get(f"/v1/agents/{PLAN_AGENT}")).json()["card_status"] == "discovered"

    await agent.stop()
    run = await client.post("/v1/jobs/agent_cards/run")
    assert run.json()["status"] == "succeeded"
    shown = (await client.get(f"/v1/agents/{PLAN_AGENT}")).json()
    assert shown["card_status"] == "unreachable"
    assert shown["card_error"]
    assert shown["card_checked_at"] > shown["card_fetched_at"]
    # A dry run counts without fetching.
    dry = await client.post("/v1/jobs/agent_cards/run", params={"dry_run": "true"})
    assert dry.json()["details"]["agent_cards_checked"] == 1


async def test_a_question_that_comes_after_the_wait_is_applied_and_answered(
    client: httpx.AsyncClient, agent: A2AAgent
) -> None:
    """202 (respond-async): the agent's question arrives after the caller stopped waiting;
    it is applied to the session like a late answer, and the next message answers it."""
    agent.behaviour = "ask"
    await discover(client, agent.url)
    sid = (await create_session(client))["session_id"]
    accepted = await client.post(
        f"/v1/sessions/{sid}/messages",
        json={"text": PLAN},
        headers={"Prefer": "respond-async, wait=0"},
    )
    assert accepted.status_code == 202, accepted.text
    task_id = accepted.json()["task_id"]

    async def waiting() -> bool:
        task = (await client.get(f"/v1/tasks/{task_id}")).json()["task"]
        return bool(task["status"] == "input-required")

    async def question() -> Any:
        session = (await client.get(f"/v1/sessions/{sid}")).json()
        return session["session_state"]["agent_outputs"].get(PLAN_AGENT)

    await eventually(waiting)
    outputs = await eventually(question)
    assert outputs["response"] == "Which month should the plan start?"
    done = await message(client, sid, "March")
    assert done["task_id"] == task_id
    assert done["response"] == "Here is your plan"
    assert agent.received[-1].task_id == agent.received[0].task_id


async def test_an_answer_past_the_size_bound_is_not_read(
    settings: Settings, database_url: str, agent: A2AAgent
) -> None:
    """The SDK reads whole answers: the A2A client's transport stops at the body limit."""
    small = settings.model_copy(update={"server": ServerSettings(max_body_bytes=64 * 1024)})
    app = create_app(small, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False)
    agent.answer = "x" * (200 * 1024)
    async with lifespan_of(app), app_client(app, {"X-API-Key": ADMIN_KEY}) as admin:
        await discover(admin, agent.url)
        sid = (await create_session(admin))["session_id"]
        result = await message(admin, sid, PLAN)
        assert result["degraded"] is True
        task = (await admin.get(result["task_url"])).json()["task"]
        assert task["status"] == "failed"  # not retried: the same answer would come back
        assert "more than 65536 bytes" in task["last_error"]
