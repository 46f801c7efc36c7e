"""The coordinator on durable tasks, with real agents on 127.0.0.1: the wait budget
(Prefer: wait=N, respond-async), the degraded answer with its task, the late answer applied
to the session, and the task.completed / task.failed events a real subscriber receives."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

from app.events.service import EventService
from tests.agent_server import AgentServer
from tests.integration import agent_tasks
from tests.integration.agent_tasks import (
    PLAN,
    PLAN_AGENT,
    agent_slow_until_released,
    answered_by_plan_agent,
    configure,
    decisions,
    delivered,
    plan_session,
    post_message,
    session_when,
    subscribe,
    task_of,
)
from tests.integration.helpers import assert_problem, create_session, eventually

# The fixtures (pytest finds them by these names).
settings, app, agent, subscriber, events, told = agent_tasks.FIXTURES


async def test_a_fast_agent_answers_within_the_budget_as_before_plus_its_task(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    sid = await plan_session(client, agent)

    response = await post_message(client, sid, PLAN)

    assert response.status_code == 200, response.text
    assert "preference-applied" not in response.headers
    result = response.json()
    assert result["response"] == "Here is your plan"
    assert result["degraded"] is False
    assert result["fallback"] is None
    assert result["progress_percentage"] == 40
    assert result["memory_updates"] == {"applied": 1, "rejected": []}
    assert result["task_url"] == f"/v1/tasks/{result['task_id']}"
    assert len(agent.requests) == 1
    assert agent.headers[0]["traceparent"].startswith("00-")

    task = await task_of(client, result["task_id"])
    assert (task["status"], task["kind"], task["agent_name"], task["attempt"]) == (
        "completed",
        "message",
        PLAN_AGENT,
        1,
    )
    assert task["detached"] is False
    assert task["result"]["output_data"]["response"] == "Here is your plan"
    assert task["input"]["request"] == agent.requests[0]
    [decision] = await decisions(client, sid)
    assert (decision["outcome"], decision["task_id"]) == ("agent", result["task_id"])
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    assert current["version"] == 2
    assert current["agent_sequence"][-1]["status"] == "completed"
    assert "task_id" not in current["agent_sequence"][-1]


async def test_a_slow_agent_gets_the_fallback_now_and_its_answer_applied_later(
    client: httpx.AsyncClient,
    agent: AgentServer,
    subscriber: AgentServer,
    events: EventService,
) -> None:
    sid = await plan_session(client, agent)
    await subscribe(client, subscriber.url)
    release = agent_slow_until_released(agent)

    started = time.monotonic()
    response = await post_message(client, sid, PLAN, "wait=1")
    elapsed = time.monotonic() - started

    assert response.status_code == 200, response.text
    assert response.headers["preference-applied"] == "wait=1"
    assert 1.0 <= elapsed < 3.0
    result = response.json()
    assert result["degraded"] is True
    assert result["fallback"] is not None
    assert result["agent"] == PLAN_AGENT
    task_id = result["task_id"]
    assert result["task_url"] == f"/v1/tasks/{task_id}"
    waiting = await task_of(client, task_id)
    assert (waiting["status"], waiting["detached"]) == ("working", True)
    after_fallback = (await client.get(f"/v1/sessions/{sid}")).json()
    assert after_fallback["version"] == 2
    step = after_fallback["agent_sequence"][-1]
    assert (step["agent_name"], step["status"], step["task_id"]) == (
        PLAN_AGENT,
        "executing",
        task_id,
    )
    [fallback_decision] = await decisions(client, sid)
    assert (fallback_decision["outcome"], fallback_decision["degraded"]) == ("fallback", True)
    assert fallback_decision["task_id"] == task_id

    release.set()  # the agent answers now, long after the caller got its answer

    current = await session_when(client, sid, lambda s: s["version"] == 3)
    step = current["agent_sequence"][-1]
    assert (step["status"], step["task_id"], step["output_summary"]) == (
        "completed",
        task_id,
        "Here is your plan",
    )
    assert current["session_state"]["agent_outputs"][PLAN_AGENT]["response"] == "Here is your plan"
    assert current["progress_percentage"] == 40
    assert current["current_agent"] == PLAN_AGENT
    late = (await decisions(client, sid))[0]
    assert (late["outcome"], late["degraded"], late["task_id"]) == ("agent", False, task_id)
    assert late["session_version"] == 3
    assert late["response"]["text"] == "Here is your plan"
    assert late["message"] == PLAN
    memories = (await client.get("/v1/memories", params={"session_id": sid})).json()["items"]
    assert [m["content"] for m in memories] == [{"plan": "v1"}]

    [event] = await delivered(events, subscriber, 1)
    assert event["event_type"] == "task.completed"
    payload = event["payload"]
    assert payload["task_id"] == task_id
    assert payload["session_id"] == sid
    assert payload["reply"] == "Here is your plan"
    assert (payload["session_version"], payload["decision_id"]) == (3, late["decision_id"])
    assert payload["applied"] is True


async def test_a_dead_agent_fails_its_task_and_the_session_is_escalated(
    client: httpx.AsyncClient,
    agent: AgentServer,
    subscriber: AgentServer,
    events: EventService,
) -> None:
    sid = await plan_session(client, agent, fail_max=50)
    await subscribe(client, subscriber.url)
    agent.behaviour = "fail"

    started = time.monotonic()
    response = await post_message(client, sid, PLAN)
    # The first attempt failed: the caller is not held for the retries' backoff.
    assert time.monotonic() - started < 2.0
    result = response.json()
    assert result["degraded"] is True
    task_id = result["task_id"]

    async def failed() -> dict[str, Any] | None:
        task = await task_of(client, task_id)
        return task if task["status"] == "failed" else None

    task = await eventually(failed)
    assert task["attempt"] == 3  # 1 + max_retries
    assert len(agent.requests) == 3
    [event] = await delivered(events, subscriber, 1)
    assert event["event_type"] == "task.failed"
    assert event["payload"]["task_id"] == task_id
    assert "HTTP 500" in event["payload"]["error"]

    current = await session_when(client, sid, lambda s: s["status"] == "escalated")
    step = next(s for s in current["agent_sequence"] if s.get("task_id") == task_id)
    assert step["status"] == "failed"
    letters = (await client.get("/v1/dead-letters")).json()["items"]
    assert [letter["task_id"] for letter in letters] == [task_id]


async def test_a_requeued_dead_letter_applies_its_answer_to_the_session(
    client: httpx.AsyncClient,
    agent: AgentServer,
    subscriber: AgentServer,
    events: EventService,
) -> None:
    """Nobody waits for a requeued task: its late answer reaches the session and the
    subscribers, like a detached task's."""
    sid = await plan_session(client, agent, fail_max=50)
    agent.behaviour = "fail"
    task_id = (await post_message(client, sid, PLAN)).json()["task_id"]

    async def letter() -> dict[str, Any] | None:
        items = (await client.get("/v1/dead-letters")).json()["items"]
        return items[0] if items else None

    dead = await eventually(letter)
    assert dead["task_id"] == task_id
    # The dead letter can show before the failed task's end reaches the session (a version
    # and a task.failed event of its own): wait for that first, so that what follows is the
    # requeued task's doing alone.
    await session_when(
        client,
        sid,
        lambda s: (
            [step["status"] for step in s["agent_sequence"] if step.get("task_id") == task_id]
            == ["failed"]
        ),
    )
    await subscribe(client, subscriber.url)
    before = (await client.get(f"/v1/sessions/{sid}")).json()["version"]

    agent.behaviour = "ok"
    requeued = await client.post(f"/v1/dead-letters/{dead['dead_letter_id']}/requeue")
    assert requeued.status_code in (200, 201), requeued.text
    body = requeued.json()
    new_id = body.get("task", body)["task_id"]
    assert new_id != task_id

    def answered(session: dict[str, Any]) -> bool:
        return any(
            s.get("task_id") == new_id and s["status"] == "completed"
            for s in session["agent_sequence"]
        )

    current = await session_when(client, sid, answered)
    assert current["version"] > before
    step = next(s for s in current["agent_sequence"] if s.get("task_id") == new_id)
    assert (step["status"], step["output_summary"]) == ("completed", "Here is your plan")
    assert current["session_state"]["agent_outputs"][PLAN_AGENT]["response"] == "Here is your plan"
    [event] = await delivered(events, subscriber, 1)
    assert (event["event_type"], event["payload"]["task_id"]) == ("task.completed", new_id)


async def test_respond_async_answers_202_with_the_task_at_once(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    sid = await plan_session(client, agent)
    release = agent_slow_until_released(agent)

    started = time.monotonic()
    response = await post_message(client, sid, PLAN, "respond-async")
    assert time.monotonic() - started < 1.0

    assert response.status_code == 202, response.text
    assert response.headers["preference-applied"] == "respond-async"
    body = response.json()
    assert response.headers["location"] == body["task_url"] == f"/v1/tasks/{body['task_id']}"
    assert body["agent"] == PLAN_AGENT
    assert body["task_status"] in ("submitted", "working")
    assert body["session_version"] == 2
    [decision] = await decisions(client, sid)
    assert (decision["outcome"], decision["task_id"], decision["degraded"]) == (
        "accepted",
        body["task_id"],
        False,
    )
    step = (await client.get(f"/v1/sessions/{sid}")).json()["agent_sequence"][-1]
    assert (step["status"], step["task_id"]) == ("executing", body["task_id"])

    release.set()

    current = await session_when(client, sid, lambda s: s["version"] == 3)
    assert current["agent_sequence"][-1]["status"] == "completed"
    assert current["session_state"]["agent_outputs"][PLAN_AGENT]["response"] == "Here is your plan"


async def test_wait_zero_answers_with_the_fallback_at_once_and_the_agent_later(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    sid = await plan_session(client, agent)
    response = await post_message(client, sid, PLAN, "wait=0")
    assert response.status_code == 200, response.text
    assert response.headers["preference-applied"] == "wait=0"
    result = response.json()
    assert result["degraded"] is True
    assert result["task_id"]

    await session_when(client, sid, answered_by_plan_agent)


# Preferences Switchboard does not understand, and malformed ones: ignored.
NOT_UNDERSTOOD = [
    "wait=abc",
    "wait=-3",
    "wait=1.5",
    "return=minimal",
    "respond-async=1",
    'wait="',
    ";;,,",
]


@pytest.mark.parametrize(
    ("prefer", "applied"),
    [
        # respond-async with a wait: an agent in time answers 200 all the same.
        ("respond-async, wait=5", "respond-async, wait=5"),
        ("wait=86400", "wait=55"),  # capped
        *((prefer, None) for prefer in NOT_UNDERSTOOD),
    ],
)
async def test_an_agent_in_time_answers_200_saying_what_of_prefer_applied(
    client: httpx.AsyncClient, agent: AgentServer, prefer: str, applied: str | None
) -> None:
    sid = await plan_session(client, agent)
    response = await post_message(client, sid, PLAN, prefer)
    assert response.status_code == 200, response.text
    assert response.headers.get("preference-applied") == applied
    assert response.json()["response"] == "Here is your plan"


async def test_a_prefer_header_too_long_is_a_problem(client: httpx.AsyncClient) -> None:
    sid = (await create_session(client))["session_id"]
    response = await post_message(client, sid, PLAN, "wait=1," + "x" * 2000)
    assert_problem(response, 400)


async def test_an_agent_4xx_is_not_retried(client: httpx.AsyncClient, agent: AgentServer) -> None:
    sid = await plan_session(client, agent)
    agent.status = 404
    result = (await post_message(client, sid, PLAN)).json()
    assert result["degraded"] is True
    task = await task_of(client, result["task_id"])
    assert (task["status"], task["attempt"], task["detached"]) == ("failed", 1, False)
    assert len(agent.requests) == 1


async def test_a_pending_action_runs_as_a_task(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    sid = await plan_session(client, agent)
    # The change agent (no url) answers with its fallback; the plan waits in the queue.
    first = (
        await post_message(client, sid, "I need to change my address urgently. Also make a plan")
    ).json()
    assert "request_plan" in [p["type"] for p in first["pending_actions"]]
    while True:
        response = await client.post(f"/v1/sessions/{sid}/pending/next")
        assert response.status_code in (200, 409), response.text
        if response.status_code == 409:
            break
        body = response.json()
        if body["agent"] == PLAN_AGENT:
            plan = body
    assert plan["response"] == "Here is your plan"
    task = await task_of(client, plan["task_id"])
    assert (task["kind"], task["status"]) == ("pending_action", "completed")
    final = (await client.get(f"/v1/sessions/{sid}")).json()["session_state"]["pending_actions"]
    assert "request_plan" not in [a["type"] for a in final]


async def test_a_pending_action_whose_agent_is_slow_is_settled_by_its_task(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    sid = await plan_session(client, agent)
    queued = await client.patch(
        f"/v1/sessions/{sid}",
        json={
            "session_state": {"pending_actions": [{"type": "request_plan", "priority_score": 50}]}
        },
        headers={"If-Match": '"1"'},
    )
    assert queued.status_code == 200, queued.text
    release = agent_slow_until_released(agent)
    response = await client.post(f"/v1/sessions/{sid}/pending/next", headers={"Prefer": "wait=0"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["degraded"] is True
    [action] = body["pending_actions"]
    assert (action["status"], action["task_id"]) == ("in_progress", body["task_id"])
    # Bound to its task: not taken again while the task works.
    assert_problem(await client.post(f"/v1/sessions/{sid}/pending/next"), 409)

    release.set()

    async def settled() -> list[Any] | None:
        state = (await client.get(f"/v1/sessions/{sid}")).json()["session_state"]
        return None if state["pending_actions"] else [True]

    await eventually(settled)


async def test_the_webhook_waits_the_same_way_and_names_the_task(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url)
    release = agent_slow_until_released(agent)
    response = await client.post(
        "/webhooks/n8n/coordination",
        json={"user_ref": "tg:42", "text": PLAN},
        headers={"Prefer": "wait=1, respond-async"},
    )
    release.set()
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["degraded"] is True
    assert body["task_url"] == f"/v1/tasks/{body['task_id']}"


async def test_a_caller_that_goes_away_still_gets_the_answer_into_the_session(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    sid = await plan_session(client, agent)
    called = asyncio.Event()
    release = agent_slow_until_released(agent, called)
    request = asyncio.create_task(post_message(client, sid, PLAN))
    await called.wait()
    request.cancel()  # the client disconnects while the request waits for the agent
    with pytest.raises(asyncio.CancelledError):
        await request
    [task] = (await client.get(f"/v1/sessions/{sid}/tasks")).json()["items"]
    assert (task["status"], task["detached"]) == ("working", True)

    release.set()

    current = await session_when(client, sid, answered_by_plan_agent)
    assert current["agent_sequence"][-1]["task_id"] == task["task_id"]
    late = (await decisions(client, sid))[0]
    assert (late["outcome"], late["task_id"]) == ("agent", task["task_id"])


async def test_canceling_a_detached_task_closes_its_step(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """A task the caller stopped waiting for and a person then cancels: its session step
    is closed, not left executing for ever."""
    sid = await plan_session(client, agent)
    agent.behaviour = "hang"
    result = (await post_message(client, sid, PLAN, "wait=0")).json()
    task_id = result["task_id"]
    canceled = await client.post(f"/v1/tasks/{task_id}/cancel")
    assert canceled.status_code == 200, canceled.text

    async def closed() -> dict[str, Any] | None:
        current: dict[str, Any] = (await client.get(f"/v1/sessions/{sid}")).json()
        step = next(s for s in current["agent_sequence"] if s.get("task_id") == task_id)
        return step if step["status"] != "executing" else None

    step = await eventually(closed)
    assert step["status"] == "failed"
