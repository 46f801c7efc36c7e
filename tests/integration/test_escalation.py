"""Next step and escalation against the real database and real local agents: a dead
letter and a run of fallbacks each escalate (one path: version, decision with its context,
session.escalated), the limits trigger at exactly their boundary, nothing is processed
while a session is escalated (its task stays queued, its agent hears nothing, messages get
409), and a person's resolution resumes it (the held task runs)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import msgspec
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.clock import SystemClock
from app.coordination.escalation import Decided, EscalationService, StepEvent
from app.coordination.next_step import NextStepRule
from app.db.pool import Database
from app.services import build_services
from app.settings import CoordinationSettings, DatabaseSettings, Settings, TaskSettings
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED
from tests.integration.helpers import assert_problem, create_session, eventually, if_match

PLAN = "Please make a plan for my savings"
PLAN_AGENT = "Make_Plan_Agent"
# Routed to Educate_Customer_Agent, which has no url in the seed: its fallback answers,
# without a task (so without a dead letter).
QUESTION = "what is compound interest"
EDUCATE_AGENT = "Educate_Customer_Agent"
POLL = 0.1


def make_settings(**limits: Any) -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        coordination=CoordinationSettings(
            breaker_sync_seconds=0.2, rules_cache_seconds=0, **limits
        ),
        tasks=TaskSettings(
            max_retries=2, retry_base_seconds=0.05, retry_cap_seconds=0.1, poll_interval=POLL
        ),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
def limits() -> dict[str, Any]:
    """The limits of the test (overridden by parametrisation or per test)."""
    return {}


@pytest.fixture
def settings(limits: dict[str, Any]) -> Settings:
    return make_settings(**limits)


@pytest.fixture
def app(settings: Settings, database_url: str) -> Litestar:
    """The application with its task worker running."""
    return create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
        run_worker=True,
    )


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    server.reply = {"success": True, "output_data": {"response": "Here is your plan"}}
    yield server
    await server.stop()


async def subscribe(client: httpx.AsyncClient, url: str) -> None:
    """Events are written while someone subscribes to them (delivery is not run here)."""
    response = await client.post(
        "/v1/subscriptions",
        json={
            "url": url,
            "event_types": ["session.escalated", "session.resolved", "task.dead_lettered"],
        },
    )
    assert response.status_code == 201, response.text


async def configure(client: httpx.AsyncClient, name: str, **fields: Any) -> None:
    response = await client.patch(f"/v1/agents/{name}", json=fields)
    assert response.status_code == 200, response.text


async def send(client: httpx.AsyncClient, sid: str, text: str) -> httpx.Response:
    return await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})


async def decisions(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """The session's decisions, oldest first."""
    response = await client.get(f"/v1/sessions/{sid}/decisions", params={"limit": 100})
    assert response.status_code == 200, response.text
    return list(reversed(response.json()["items"]))


async def session_events(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    response = await client.get("/v1/events", params={"limit": 100})
    assert response.status_code == 200, response.text
    return [e for e in reversed(response.json()["items"]) if e["payload"].get("session_id") == sid]


async def status_of(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    response = await client.get(f"/v1/sessions/{sid}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


@asynccontextmanager
async def late_fallback(
    client: httpx.AsyncClient, database_url: str, settings: Settings, sid: str, error: str
) -> AsyncIterator[tuple[EscalationService, Decided]]:
    """The escalation service of another replica (as a task's worker would be), and its
    decision on a fallback of the educator's step in ``sid``, from the counters as they
    are now; the service stays open inside the block."""
    database = Database(database_url, settings.database)
    await database.open()
    try:
        services = build_services(settings, database, SystemClock(), replica="late")
        try:
            rules = (await client.get("/v1/next-step-rules")).json()
            happened = StepEvent(
                event="fallback",
                intent="ask_question",
                agent=EDUCATE_AGENT,
                error=error,
                handed_off=False,
                suggested=None,
                progress_before=0,
                progress_after=0,
                pending_actions=(),
            )
            decided = await services.escalation.decide(
                UUID(sid), happened, [msgspec.convert(r, NextStepRule) for r in rules]
            )
            yield services.escalation, decided
        finally:
            await services.aclose()
    finally:
        await database.close()


async def test_a_dead_lettered_task_escalates_with_its_context(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    agent.behaviour = "fail"
    await subscribe(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    result = (await send(client, sid, PLAN)).json()
    assert result["degraded"] is True
    assert result["next_step"]["outcome"] != "request_manual_intervention"
    task_id = result["task_id"]

    async def escalated() -> dict[str, Any] | None:
        current = await status_of(client, sid)
        return current if current["status"] == "escalated" else None

    current = await eventually(escalated)
    versions = (await client.get(f"/v1/sessions/{sid}/versions")).json()["items"]
    mark = next(v for v in reversed(versions) if v["status"] == "escalated")
    assert mark["change_reason"].startswith(f"escalated: task {task_id}")
    assert mark["changed_by"] == f"task:{task_id}"

    [escalation] = [d for d in await decisions(client, sid) if d["outcome"] == "escalated"]
    assert escalation["task_id"] == task_id
    assert escalation["session_version"] == mark["version"]
    step = escalation["next_step"]
    assert (step["outcome"], step["rule"]) == ("request_manual_intervention", "dead_lettered")
    assert step["inputs"]["counters"] == {"attempts": 3, "escalation_level": 1}
    assert step["inputs"]["limits"] == {"max_attempts": 3}
    context = escalation["response"]["output_data"]
    assert context["what_failed"]["task_id"] == task_id
    assert context["what_failed"]["agent"] == PLAN_AGENT
    assert context["how_often"]["attempts"] == 3
    # The final error, then the retries' (newest first): every attempt's failure.
    assert len(context["last_errors"]) == 3
    assert all("HTTP 500" in error for error in context["last_errors"])

    kinds = [e["event_type"] for e in await session_events(client, sid)]
    assert "session.escalated" in kinds
    assert "task.dead_lettered" in kinds
    [told] = [
        e for e in await session_events(client, sid) if e["event_type"] == "session.escalated"
    ]
    assert told["payload"]["decision_id"] == escalation["decision_id"]
    assert told["payload"]["session_version"] == mark["version"]
    assert told["payload"]["context"] == context
    assert current["version"] >= mark["version"]

    # Nothing more is taken while it waits for a person.
    problem = assert_problem(await send(client, sid, PLAN), 409)
    assert problem["session_status"] == "escalated"
    assert problem["resolve_url"] == f"/v1/sessions/{sid}/resolve"


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 2, "max_step_retries": 100}])
async def test_consecutive_fallbacks_escalate_just_past_the_limit(
    client: httpx.AsyncClient, agent: AgentServer, limits: dict[str, Any]
) -> None:
    await subscribe(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    for expected in (1, 2):
        result = (await send(client, sid, QUESTION)).json()
        assert result["degraded"] is True
        assert result["session_status"] == "active"
        step = result["next_step"]
        assert step["outcome"] == "ask_user"
        assert step["inputs"]["event"] == "fallback"
        assert step["inputs"]["counters"]["consecutive_fallbacks"] == expected
        assert step["inputs"]["limits"]["max_consecutive_fallbacks"] == 2
        assert (await status_of(client, sid))["status"] == "active"

    third = (await send(client, sid, QUESTION)).json()
    assert third["degraded"] is True  # the turn is still answered
    assert third["session_status"] == "escalated"
    assert third["next_step"]["outcome"] == "request_manual_intervention"
    assert third["next_step"]["rule"] == "consecutive_fallbacks"
    assert third["next_step"]["inputs"]["counters"]["consecutive_fallbacks"] == 3
    current = await status_of(client, sid)
    assert current["status"] == "escalated"
    assert current["version"] == third["session_version"] + 1

    log = await decisions(client, sid)
    assert [d["outcome"] for d in log] == ["fallback", "fallback", "fallback", "escalated"]
    # Every decision carries the next step with its inputs (counters, limits, facts).
    for turn, count in zip(log[:3], (1, 2, 3), strict=True):
        inputs = turn["next_step"]["inputs"]
        assert inputs["counters"]["consecutive_fallbacks"] == count
        assert inputs["facts"]["intent"] == "ask_question"
        assert inputs["facts"]["agent"] == EDUCATE_AGENT
        assert inputs["facts"]["error"]
    context = log[3]["response"]["output_data"]
    assert context["what_failed"]["agent"] == EDUCATE_AGENT
    assert context["how_often"]["consecutive_fallbacks"] == 3
    assert context["limits"]["max_consecutive_fallbacks"] == 2
    assert "no url" in context["last_errors"][0]
    [told] = [
        e for e in await session_events(client, sid) if e["event_type"] == "session.escalated"
    ]
    assert told["payload"]["decision_id"] == log[3]["decision_id"]

    assert_problem(await send(client, sid, QUESTION), 409)
    assert len(await decisions(client, sid)) == 4  # the refused message decided nothing


@pytest.mark.parametrize("limits", [{"max_step_retries": 1, "max_consecutive_fallbacks": 100}])
async def test_retries_of_the_same_step_escalate_at_the_limit(
    client: httpx.AsyncClient, agent: AgentServer, limits: dict[str, Any]
) -> None:
    """One retry allowed: the first failure is not a retry, the second failure (the retry
    failed) asks for a person; an answer in between starts the count again."""
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    session = await create_session(client)
    sid = session["session_id"]
    first = (await send(client, sid, QUESTION)).json()
    assert first["next_step"]["inputs"]["counters"]["step_retries"] == 0
    answered = (await send(client, sid, PLAN)).json()  # another step answers: no reset
    assert answered["degraded"] is False
    second = (await send(client, sid, QUESTION)).json()
    assert second["next_step"]["inputs"]["counters"]["step_retries"] == 1
    assert second["next_step"]["inputs"]["counters"]["consecutive_fallbacks"] == 1
    assert second["next_step"]["rule"] == "step_retries"
    assert (await status_of(client, sid))["status"] == "escalated"


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 1}])
async def test_nothing_runs_while_escalated_and_resolve_resumes(
    client: httpx.AsyncClient,
    agent: AgentServer,
    make_agent_client: Any,
    limits: dict[str, Any],
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    await subscribe(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    await send(client, sid, QUESTION)
    escalating = (await send(client, sid, QUESTION)).json()
    assert escalating["session_status"] == "escalated"
    escalated = await status_of(client, sid)

    # A task for the session is accepted and stays queued: not run, not failed.
    response = await client.post(
        "/v1/tasks",
        json={"agent_name": PLAN_AGENT, "input": {"message": "hello"}, "session_id": sid},
    )
    assert response.status_code == 201, response.text
    task_id = response.json()["task_id"]
    await asyncio.sleep(POLL * 10)  # ten polls of the worker
    held = (await client.get(f"/v1/tasks/{task_id}")).json()["task"]
    assert (held["status"], held["attempt"]) == ("submitted", 0)
    assert agent.requests == []

    # Messages, queued actions and a PATCH of the status are refused while it waits.
    assert_problem(await send(client, sid, PLAN), 409)
    assert_problem(await client.post(f"/v1/sessions/{sid}/pending/next"), 409)
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"status": "active", "base_version": escalated["version"]}
    )
    assert assert_problem(patched, 409)["session_status"] == "escalated"
    assert agent.requests == []

    # Who may resolve, and with what.
    plain = await make_agent_client("Some_Agent")
    manager = await make_agent_client("Ops_Agent", roles=["coordination_manager"])
    async with plain, manager:
        assert_problem(await plain.post(f"/v1/sessions/{sid}/resolve", json={"note": "x"}), 403)
        assert_problem(await manager.post(f"/v1/sessions/{sid}/resolve", json={}), 422)
        assert_problem(await manager.post(f"/v1/sessions/{sid}/resolve", json={"note": "   "}), 422)
        assert_problem(
            await manager.post(f"/v1/sessions/{sid}/resolve", json={"note": "x", "y": 1}), 422
        )
        unknown = "01900000-0000-7000-8000-000000000000"
        assert_problem(
            await manager.post(f"/v1/sessions/{unknown}/resolve", json={"note": "x"}), 404
        )
        assert (await status_of(client, sid))["version"] == escalated["version"]

        resolved = await manager.post(
            f"/v1/sessions/{sid}/resolve", json={"note": "Educate agent fixed"}
        )
        assert resolved.status_code == 200, resolved.text
        body = resolved.json()
        assert body["status"] == "active"
        assert body["session_version"] == escalated["version"] + 1
        assert body["resolved_by"] == "Ops_Agent"
        assert body["note"] == "Educate agent fixed"

        assert_problem(await manager.post(f"/v1/sessions/{sid}/resolve", json={"note": "x"}), 409)

    current = await status_of(client, sid)
    assert (current["status"], current["version"]) == ("active", body["session_version"])

    async def ran() -> dict[str, Any] | None:
        task: dict[str, Any] = (await client.get(f"/v1/tasks/{task_id}")).json()["task"]
        return task if task["status"] == "completed" else None

    await eventually(ran)
    assert len(agent.requests) == 1

    log = await decisions(client, sid)
    assert [d["outcome"] for d in log][-2:] == ["escalated", "resolved"]
    resolution = log[-1]
    assert resolution["decision_id"] == body["decision_id"]
    assert resolution["message"] == "Educate agent fixed"
    assert resolution["response"]["output_data"]["decision_id"] == log[-2]["decision_id"]
    assert resolution["next_step"]["outcome"] == "continue"
    kinds = [e["event_type"] for e in await session_events(client, sid)]
    assert kinds[-2:] == ["session.escalated", "session.resolved"]

    # The counters start again after the resolution: one more fallback is within the limit.
    again = (await send(client, sid, QUESTION)).json()
    assert again["next_step"]["inputs"]["counters"]["consecutive_fallbacks"] == 1
    assert again["session_status"] == "active"


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 1}])
async def test_completing_an_escalated_session_cancels_the_tasks_it_held(
    client: httpx.AsyncClient, agent: AgentServer, limits: dict[str, Any]
) -> None:
    """A person may close an escalated session instead of resolving it: the tasks it held
    then have no session to answer, so they are canceled with it, never run."""
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    session = await create_session(client)
    sid = session["session_id"]
    await send(client, sid, QUESTION)
    assert (await send(client, sid, QUESTION)).json()["session_status"] == "escalated"
    response = await client.post(
        "/v1/tasks",
        json={"agent_name": PLAN_AGENT, "input": {"message": "hello"}, "session_id": sid},
    )
    assert response.status_code == 201, response.text
    task_id = response.json()["task_id"]
    version = (await status_of(client, sid))["version"]

    completed = await client.post(f"/v1/sessions/{sid}/complete", headers=if_match(version))
    assert completed.status_code == 200, completed.text
    assert completed.json()["status"] == "completed"
    read = (await client.get(f"/v1/tasks/{task_id}")).json()
    task = read["task"]
    assert (task["status"], task["attempt"]) == ("canceled", 0)
    last = read["transitions"][-1]
    assert (last["to_status"], last["actor"]) == ("canceled", "switchboard")
    assert last["reason"] == "its session was completed while escalated"
    await asyncio.sleep(POLL * 10)  # ten polls of the worker: it is not claimed
    assert agent.requests == []


async def test_the_next_step_rules_are_listed_in_order(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/next-step-rules")
    assert response.status_code == 200, response.text
    rules = response.json()
    assert [r["position"] for r in rules] == sorted(r["position"] for r in rules)
    assert rules[-1]["name"] == "wait_for_user"
    assert {r["outcome"] for r in rules} == {
        "continue",
        "hand_off",
        "ask_user",
        "finalize",
        "request_manual_intervention",
    }


async def test_an_escalated_session_does_not_lapse(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """Time does not idle, warn or expire a session that waits for a person."""
    import asyncpg

    session = await create_session(client)
    sid = session["session_id"]
    conn = await asyncpg.connect(database_url)
    try:
        lapse = "SELECT session_may_lapse(s) FROM session_coordination s WHERE session_id = $1"
        assert await conn.fetchval(lapse, session["session_id"]) is True
        await conn.execute(
            "UPDATE session_coordination SET status = 'escalated' WHERE session_id = $1", sid
        )
        assert await conn.fetchval(lapse, sid) is False
    finally:
        await conn.close()


@pytest.mark.parametrize("limits", [{"max_handoffs_without_progress": 2}])
async def test_handoffs_without_progress_escalate_just_past_the_limit(
    client: httpx.AsyncClient, agent: AgentServer, limits: dict[str, Any]
) -> None:
    """Handoffs (POST .../handoff here) count until the progress rises; the next event
    after one too many asks for a person."""
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    session = await create_session(client)
    sid = session["session_id"]

    async def hand_off(to: str) -> None:
        response = await client.post(
            f"/v1/sessions/{sid}/handoff",
            json={"to_agent": to, "reason": "test"},
            headers={"If-Match": "*"},
        )
        assert response.status_code == 200, response.text

    await hand_off(PLAN_AGENT)
    await hand_off(EDUCATE_AGENT)
    within = (await send(client, sid, PLAN)).json()
    assert within["next_step"]["inputs"]["counters"]["handoffs_without_progress"] == 2
    assert within["session_status"] == "active"

    # Progress rising starts the count again.
    agent.reply = {"success": True, "output_data": {"response": "ok", "progress_percentage": 30}}
    rose = (await send(client, sid, PLAN)).json()
    assert rose["next_step"]["inputs"]["counters"]["handoffs_without_progress"] == 0
    agent.reply = {"success": True, "output_data": {"response": "ok"}}

    for to in (PLAN_AGENT, EDUCATE_AGENT, PLAN_AGENT):
        await hand_off(to)
    past = (await send(client, sid, PLAN)).json()
    assert past["degraded"] is False  # answered, and then escalated
    assert past["next_step"]["rule"] == "handoffs_without_progress"
    assert past["next_step"]["inputs"]["counters"]["handoffs_without_progress"] == 3
    assert past["session_status"] == "escalated"


@pytest.mark.parametrize("limits", [{"max_age_without_progress": timedelta(seconds=1)}])
async def test_a_session_without_progress_for_too_long_escalates(
    client: httpx.AsyncClient, agent: AgentServer, limits: dict[str, Any]
) -> None:
    await configure(client, PLAN_AGENT, url=agent.url, fail_max=50)
    session = await create_session(client)
    sid = session["session_id"]
    first = (await send(client, sid, PLAN)).json()
    assert first["next_step"]["inputs"]["counters"]["seconds_without_progress"] <= 1
    assert first["session_status"] == "active"
    await asyncio.sleep(2.1)
    late = (await send(client, sid, PLAN)).json()
    assert late["next_step"]["inputs"]["counters"]["seconds_without_progress"] >= 2
    assert late["next_step"]["rule"] == "stalled"
    assert late["session_status"] == "escalated"


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 1, "max_step_retries": 100}])
async def test_a_resolution_names_only_the_escalation_it_ends(
    client: httpx.AsyncClient, limits: dict[str, Any]
) -> None:
    """Each resolution names the escalation it ends: the one a person resolved before is
    over, and naming it again told subscribers and the log the wrong story."""
    session = await create_session(client)
    sid = session["session_id"]
    await send(client, sid, QUESTION)
    assert (await send(client, sid, QUESTION)).json()["session_status"] == "escalated"
    [escalation] = [d for d in await decisions(client, sid) if d["outcome"] == "escalated"]
    first = await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "first"})
    assert first.status_code == 200, first.text
    assert first.json()["escalation_decision_id"] == escalation["decision_id"]

    version = (await status_of(client, sid))["version"]
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"status": "escalated", "base_version": version}
    )
    assert patched.status_code == 200, patched.text
    second = await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "second"})
    assert second.status_code == 200, second.text
    body = second.json()
    log = await decisions(client, sid)
    by_client = log[-2]
    assert (by_client["outcome"], by_client["classifier"]) == ("escalated", "client")
    assert body["escalation_decision_id"] == by_client["decision_id"]
    assert body["escalation_decision_id"] != escalation["decision_id"]
    resolution = log[-1]
    assert (resolution["outcome"], resolution["message"]) == ("resolved", "second")
    assert resolution["response"]["output_data"]["decision_id"] == by_client["decision_id"]


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 1, "max_step_retries": 100}])
async def test_a_restored_session_tells_no_old_escalation_again(
    client: httpx.AsyncClient, agent: AgentServer, database_url: str, limits: dict[str, Any]
) -> None:
    """A restore copies the archived history back, escalated versions included: those were
    told, and resolved, before; restoring must not call a person for them again."""
    await subscribe(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    await send(client, sid, QUESTION)
    assert (await send(client, sid, QUESTION)).json()["session_status"] == "escalated"
    assert (await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "one"})).is_success
    version = (await status_of(client, sid))["version"]
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"status": "escalated", "base_version": version}
    )
    assert patched.status_code == 200, patched.text
    assert (await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "two"})).is_success

    def escalations(events: list[dict[str, Any]]) -> list[int]:
        return [
            e["payload"]["session_version"]
            for e in events
            if e["event_type"] == "session.escalated"
        ]

    told = escalations(await session_events(client, sid))
    assert len(told) == 2
    conn = await asyncpg.connect(database_url)
    try:
        moved = await conn.fetchval(
            "SELECT session_archive_move(ARRAY(SELECT ctid FROM session_coordination"
            " WHERE session_id = $1 FOR UPDATE), 'expired', now(), now() + interval '1 day')",
            sid,
        )
    finally:
        await conn.close()
    assert moved == 1
    restored = await client.post(f"/v1/sessions/{sid}/restore")
    assert restored.status_code == 200, restored.text
    assert escalations(await session_events(client, sid)) == told
    assert [d for d in await decisions(client, sid) if d["outcome"] == "escalated"] == []


async def test_a_client_escalating_by_patch_is_recorded_and_announced(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """An agent or a workflow calls a person by setting the status: the same decision and
    session.escalated the server's own escalation writes, once; edits of the content while
    it waits, and the server's own escalation, add no second one."""
    await subscribe(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    patched = await client.patch(
        f"/v1/sessions/{sid}", json={"status": "escalated", "base_version": 1}
    )
    assert patched.status_code == 200, patched.text
    version = patched.json()["version"]
    edited = await client.patch(
        f"/v1/sessions/{sid}",
        json={"progress_percentage": 10, "base_version": version},
    )
    assert edited.status_code == 200, edited.text
    again = await client.patch(
        f"/v1/sessions/{sid}", json={"status": "escalated", "base_version": version + 1}
    )
    assert again.status_code == 200, again.text

    [decision] = [d for d in await decisions(client, sid) if d["outcome"] == "escalated"]
    assert decision["classifier"] == "client"
    assert decision["session_version"] == version
    assert decision["created_by"] == "admin"
    assert decision["message"].startswith("admin set the status to escalated")
    [told] = [
        e for e in await session_events(client, sid) if e["event_type"] == "session.escalated"
    ]
    assert told["payload"]["decision_id"] == decision["decision_id"]
    assert told["payload"]["session_version"] == version
    assert told["payload"]["escalated_by"] == "admin"

    resolved = await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "called back"})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["escalation_decision_id"] == decision["decision_id"]


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 1, "max_step_retries": 100}])
async def test_a_decision_counted_before_a_resolution_does_not_escalate_after_it(
    client: httpx.AsyncClient, database_url: str, settings: Settings, limits: dict[str, Any]
) -> None:
    """A turn's or a task's next step is decided from the counters, then written, then acted
    on: a person who resolves the session in between started the counters again, so the
    escalation decided with the old ones must not mark the session escalated again (it
    did, at once, for the fallbacks the person had just dealt with)."""
    session = await create_session(client)
    sid = session["session_id"]
    await send(client, sid, QUESTION)
    assert (await send(client, sid, QUESTION)).json()["session_status"] == "escalated"

    # A task's late fallback, decided while the session is still escalated...
    async with late_fallback(client, database_url, settings, sid, "fallback") as (
        escalation,
        decided,
    ):
        assert decided.escalates
        # ...a person resolves it...
        resolved = await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "fixed"})
        assert resolved.status_code == 200, resolved.text
        # ...then the old decision is acted on: nothing happens.
        assert await escalation.escalate(UUID(sid), "late-task", decided) is None
    current = await status_of(client, sid)
    assert (current["status"], current["version"]) == ("active", resolved.json()["session_version"])
    assert [d["outcome"] for d in await decisions(client, sid)][-1] == "resolved"
    # A decision counted after the resolution still escalates.
    await send(client, sid, QUESTION)
    assert (await send(client, sid, QUESTION)).json()["session_status"] == "escalated"


@pytest.mark.parametrize("limits", [{"max_consecutive_fallbacks": 1, "max_step_retries": 100}])
async def test_a_failure_while_escalated_is_recorded_and_told(
    client: httpx.AsyncClient,
    agent: AgentServer,
    database_url: str,
    settings: Settings,
    limits: dict[str, Any],
) -> None:
    """A task that was running when the session escalated fails too: the person sees it (a
    decision on the version the session is at, session.escalated marked already_escalated)
    instead of nothing, and the resolution still names the escalation it ends."""
    await subscribe(client, agent.url)
    session = await create_session(client)
    sid = session["session_id"]
    await send(client, sid, QUESTION)
    assert (await send(client, sid, QUESTION)).json()["session_status"] == "escalated"
    version = (await status_of(client, sid))["version"]
    [first] = [d for d in await decisions(client, sid) if d["outcome"] == "escalated"]

    async with late_fallback(
        client, database_url, settings, sid, "the late task's call failed"
    ) as (escalation, decided):
        assert decided.escalates
        again = await escalation.escalate(UUID(sid), "late-task", decided)

    assert again is not None
    current = await status_of(client, sid)
    assert (current["status"], current["version"]) == ("escalated", version)
    escalations = [d for d in await decisions(client, sid) if d["outcome"] == "escalated"]
    assert [d["decision_id"] for d in escalations] == [first["decision_id"], str(again)]
    assert escalations[1]["session_version"] == version
    assert escalations[1]["created_by"] == "late-task"
    assert escalations[1]["response"]["output_data"]["what_failed"]["error"] == (
        "the late task's call failed"
    )
    told = [e for e in await session_events(client, sid) if e["event_type"] == "session.escalated"]
    assert [e["payload"]["already_escalated"] for e in told] == [False, True]
    assert told[1]["payload"]["decision_id"] == str(again)
    assert told[1]["payload"]["session_version"] == version

    resolved = await client.post(f"/v1/sessions/{sid}/resolve", json={"note": "both seen"})
    assert resolved.status_code == 200, resolved.text
    assert resolved.json()["escalation_decision_id"] == first["decision_id"]
