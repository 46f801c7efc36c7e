"""The coordination entry point with real HTTP agents on 127.0.0.1."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.settings import CoordinationSettings, DatabaseSettings, Settings
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED, app_client, lifespan_of
from tests.integration.helpers import assert_problem, create_session, create_user, if_match


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        coordination=CoordinationSettings(breaker_sync_seconds=0.2, rules_cache_seconds=0),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


async def configure(client: httpx.AsyncClient, name: str, **settings: Any) -> dict[str, Any]:
    response = await client.patch(f"/v1/agents/{name}", json=settings)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def send(
    client: httpx.AsyncClient, session_id: str, text: str, **extra: Any
) -> dict[str, Any]:
    response = await client.post(
        f"/v1/sessions/{session_id}/messages", json={"text": text, **extra}
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_analyze_splits_scores_and_routes_without_side_effects(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client, session_state={"active_process": "budget"})
    response = await client.post(
        "/v1/intents/analyze",
        json={
            "message": "I lost my job and need help urgently. Also can you make a plan? "
            "What is compound interest?",
            "session_id": session["session_id"],
        },
    )
    assert response.status_code == 200, response.text
    body = response.json()
    names = [i["intent"] for i in body["intents"]]
    assert names[0] == "emergency_financial"
    assert body["primary"]["intent"] == "emergency_financial"
    assert body["primary"]["score"] == 100  # 100 + urgency + in-progress, capped
    assert "session_in_progress" in body["context_flags"]
    assert [i["intent"] for i in body["secondaries"]] == names[1:]
    assert {"request_plan", "ask_question"} <= set(names)
    plan = next(i for i in body["intents"] if i["intent"] == "request_plan")
    assert plan["score"] == 50 + 20
    assert plan["agent"] == "Make_Plan_Agent"
    assert body["agent"] == "Consult_Customer_Agent"
    assert body["routed_by"] == "intent"
    assert body["classifier"] == "rules"
    after = (await client.get(f"/v1/sessions/{session['session_id']}")).json()
    assert after["version"] == session["version"]


async def test_message_goes_to_the_agent_in_the_protocol_format(
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
                "access_level": "authorized_agents",
            },
            # agent_outputs default to coordination_manager: a level this agent cannot read,
            # but writes there and reads back as the owner
            {"memory_type": "planning", "content": {"x": 1}},
        ],
        "next_agent_suggestions": ["Educate_Customer_Agent"],
        "execution_time_ms": 12,
    }
    session = await create_session(client)
    sid = session["session_id"]
    result = await send(client, sid, "Please make a plan for my savings")

    assert result["response"] == "Here is your plan"
    assert result["agent"] == "Make_Plan_Agent"
    assert result["degraded"] is False
    assert result["fallback"] is None
    assert result["progress_percentage"] == 40
    assert result["next_agent_suggestions"] == ["Educate_Customer_Agent"]
    assert result["memory_updates"] == {"applied": 2, "rejected": []}

    sent = agent.requests[-1]
    assert sent["agent_name"] == "Make_Plan_Agent"
    assert sent["session_id"] == sid
    assert sent["user_id"] == session["user_id"]
    assert sent["input_data"]["intent"] == "request_plan"
    assert sent["timeout_ms"] == 60000
    assert sent["priority"] == 50
    assert sent["request_id"]
    assert "session_state" in sent["context"]

    current = (await client.get(f"/v1/sessions/{sid}")).json()
    assert current["version"] == 2
    assert current["current_agent"] == "Make_Plan_Agent"
    assert current["agent_sequence"][-1]["status"] == "completed"
    assert current["agent_sequence"][-1]["next_agent"] == "Educate_Customer_Agent"
    assert current["session_state"]["agent_outputs"]["Make_Plan_Agent"]["progress_percentage"] == 40
    assert current["session_state"]["conversation_context"]["last_intent"] == "request_plan"
    memories = (await client.get("/v1/memories", params={"session_id": sid})).json()["items"]
    assert sorted((m["agent_name"], m["access_level"], str(m["content"])) for m in memories) == [
        ("Make_Plan_Agent", "authorized_agents", "{'plan': 'v1'}"),
        ("Make_Plan_Agent", "coordination_manager", "{'x': 1}"),
    ]

    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert len(decisions) == 1
    decision = decisions[0]
    assert decision["decision_id"] == result["decision_id"]
    assert decision["chosen_agent"] == "Make_Plan_Agent"
    assert decision["outcome"] == "agent"
    assert decision["breaker_state"] == "closed"
    assert decision["session_version"] == 2
    assert decision["intents"][0]["intent"] == "request_plan"


async def test_secondary_intents_are_queued_and_processed_in_order(
    client: httpx.AsyncClient,
) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    first = await send(client, sid, "I need to change my address urgently. Also what is a budget?")
    assert first["intents"][0]["intent"] == "urgent_changes"
    pending = first["pending_actions"]
    # the change agent has no url: its fallback queues the change for later, too
    assert [p["type"] for p in pending] == ["request_plan", "ask_question", "urgent_changes"]
    for action in pending:
        assert action["status"] == "pending"

    processed = []
    while True:
        response = await client.post(f"/v1/sessions/{sid}/pending/next")
        if response.status_code == 409:
            break
        assert response.status_code == 200, response.text
        processed.append(response.json()["intents"][0]["intent"])
    # highest score first; the change its agent (no url) could not do fails at once: the
    # retries of a queued action are its task's, and an agent without a url gets none
    assert processed == ["urgent_changes", "request_plan", "ask_question"]
    final = (await client.get(f"/v1/sessions/{sid}")).json()["session_state"]["pending_actions"]
    assert [(a["type"], a["status"], a["attempts"]) for a in final] == [
        ("urgent_changes", "failed", 1)
    ]


async def test_clarification_when_top_intents_tie_across_agents(client: httpx.AsyncClient) -> None:
    await client.put(
        "/v1/intents/request_plan",
        json={"base_weight": 60, "keywords": ["plan", "budget"]},
    )
    session = await create_session(client)
    result = await send(client, session["session_id"], "I want a plan and also some advice")
    assert result["clarification"] is not None
    assert set(result["clarification"]["options"]) == {"request_plan", "request_consultation"}
    assert result["agent"] is None
    assert "?" in result["response"]
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    assert decision["outcome"] == "clarification"


@pytest.mark.parametrize(
    ("agent_name", "text", "strategy", "expect"),
    [
        (
            "Consult_Customer_Agent",
            "I need advice on my loans",
            "generic_financial_advice_disclaimer",
            "not personal financial advice",
        ),
        (
            "Collect_Create_Data_Agent",
            "my income is 3000",
            "manual_data_entry_prompt",
            "monthly income",
        ),
        (
            "Educate_Customer_Agent",
            "what is compound interest",
            "static_educational_content",
            "Compound interest",
        ),
        (
            "Add_Changes_Agent",
            "please cancel my gym savings goal",
            "change_confirmation_without_analysis",
            "cancel my gym savings goal",
        ),
        ("Make_Plan_Agent", "make a plan for me", "basic_budget_template", "50/30/20"),
        # Nothing to pass "hello" on to: the fallback says so instead of claiming to route.
        (
            "Orchestrator_Agent",
            "hello there",
            "direct_agent_routing",
            "could not tell which specialist",
        ),
    ],
)
async def test_unconfigured_agents_answer_with_their_rule_based_fallback(
    client: httpx.AsyncClient, agent_name: str, text: str, strategy: str, expect: str
) -> None:
    session = await create_session(client)
    result = await send(client, session["session_id"], text)
    assert result["agent"] == agent_name
    assert result["degraded"] is True
    assert result["fallback"] == strategy
    assert expect in result["response"]
    current = (await client.get(f"/v1/sessions/{session['session_id']}")).json()
    assert current["agent_sequence"][-1]["status"] == "failed"


async def test_budget_fallback_uses_the_profile_income(client: httpx.AsyncClient) -> None:
    user_id = await create_user(client)
    await client.put(
        "/v1/memories/by-key",
        json={
            "user_id": user_id,
            "category": "user_profile",
            "key": "finances",
            "memory_type": "data_collection",
            "content": {"monthly_income": 4000},
        },
    )
    session = await create_session(client, user_id=user_id)
    result = await send(client, session["session_id"], "make me a budget")
    assert result["fallback"] == "basic_budget_template"
    assert "2,000.00" in result["response"]
    assert result["output_data"]["amounts"] == {"needs": 2000.0, "wants": 1200.0, "savings": 800.0}


async def test_budget_fallback_reads_the_profile_under_the_callers_access_rules(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    income = {
        "user_id": user_id,
        "category": "user_profile",
        "key": "finances",
        "memory_type": "data_collection",
        "content": {"monthly_income": 4000},
    }  # user_profile defaults to authorized_agents: the financial role reads it
    assert (await client.put("/v1/memories/by-key", json=income)).status_code == 201
    session = await create_session(client, user_id=user_id)
    sid = session["session_id"]

    outsider = await make_agent_client("Chat_Frontend", ["analytics"])
    async with outsider:
        result = await send(outsider, sid, "make me a budget")
    assert result["fallback"] == "basic_budget_template"
    assert result["output_data"]["monthly_income"] is None
    assert result["output_data"]["amounts"] is None
    assert "4,000" not in result["response"]
    assert "2,000" not in result["response"]
    assert "50%" in result["response"]

    insider = await make_agent_client("Advisor_Frontend", ["authorized"])
    async with insider:
        result = await send(insider, sid, "make me a budget")
    assert result["output_data"]["monthly_income"] == 4000.0

    # Both reads are in the audit trail, under the caller, with what each got back.
    for agent_name, rows in (("Chat_Frontend", 0), ("Advisor_Frontend", 1)):
        log = (await client.get("/v1/audit/memory", params={"agent": agent_name})).json()
        reads = [e for e in log["items"] if e["action"] == "list"]
        assert len(reads) == 1, log
        assert reads[0]["allowed"] is True
        assert reads[0]["rows"] == rows
        assert reads[0]["query"]["user_id"] == user_id
        assert reads[0]["query"]["category"] == "user_profile"


async def test_change_fallback_queues_the_analysis(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    result = await send(client, session["session_id"], "change my savings rate to 15%")
    assert result["fallback"] == "change_confirmation_without_analysis"
    assert any(
        a["type"] == "urgent_changes" and "15%" in a["description"]
        for a in result["pending_actions"]
    )


async def test_breaker_opens_after_fail_max_and_stops_calling(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(
        client,
        "Educate_Customer_Agent",
        url=agent.url,
        fail_max=3,
        retry_attempts=0,
        reset_timeout_ms=60000,
    )
    agent.behaviour = "fail"
    session = await create_session(client)
    for _ in range(3):
        result = await send(client, session["session_id"], "what is compound interest")
        assert result["degraded"] is True
    assert len(agent.requests) == 3
    breaker = (await client.get("/v1/agents/Educate_Customer_Agent/breaker")).json()
    assert breaker["state"] == "open"

    result = await send(client, session["session_id"], "what is compound interest")
    assert result["fallback"] == "static_educational_content"
    assert len(agent.requests) == 3  # the open circuit did not call the agent
    items = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()["items"]
    # The fourth failure of the same step in a row also escalated the session (three
    # retries, SWITCHBOARD_COORDINATION_MAX_STEP_RETRIES): that decision came after it.
    assert items[0]["outcome"] == "escalated"
    assert result["next_step"]["rule"] == "step_retries"
    decision = items[1]
    assert decision["breaker_state"] == "open"
    assert decision["error"] == "circuit open"
    assert decision["attempts"] == 0


async def test_half_open_probe_then_recovery(client: httpx.AsyncClient, agent: AgentServer) -> None:
    await configure(
        client,
        "Educate_Customer_Agent",
        url=agent.url,
        fail_max=1,
        retry_attempts=0,
        reset_timeout_ms=200,
    )
    agent.behaviour = "fail"
    session = await create_session(client)
    await send(client, session["session_id"], "explain interest")
    assert (await client.get("/v1/agents/Educate_Customer_Agent/breaker")).json()["state"] == "open"
    agent.behaviour = "ok"
    await asyncio.sleep(0.3)
    result = await send(client, session["session_id"], "explain interest")
    assert result["degraded"] is False
    assert result["response"] == "Hello from the agent"
    assert (await client.get("/v1/agents/Educate_Customer_Agent/breaker")).json()[
        "state"
    ] == "closed"


async def test_a_transient_failure_gets_the_fallback_now_and_the_task_retries(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """The retries are the task's (backoff of seconds, app/tasks): the caller is answered
    by the fallback as soon as the first attempt failed, with the task that retries
    (its late answer: tests/integration/test_coordination_tasks.py)."""
    await configure(client, "Educate_Customer_Agent", url=agent.url, retry_attempts=2, fail_max=5)
    agent.behaviour = "close"  # the first attempt loses its connection
    session = await create_session(client)

    agent.heal_after = 1  # the second attempt would be answered
    started = time.monotonic()
    result = await send(client, session["session_id"], "explain budgets")
    assert time.monotonic() - started < 2.0
    assert result["degraded"] is True
    assert len(agent.requests) == 1  # one HTTP attempt: no in-call retry
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    assert decision["attempts"] == 1
    assert decision["task_id"] == result["task_id"]
    task = (await client.get(f"/v1/tasks/{result['task_id']}")).json()
    task = task.get("task", task)
    assert (task["status"], task["attempt"], task["detached"]) == ("working", 1, True)
    assert task["last_error"].startswith("transport error")


@pytest.mark.parametrize("behaviour", ["hang", "garbage", "close", "fail"])
async def test_a_misbehaving_agent_gets_a_fallback_never_a_500(
    client: httpx.AsyncClient, agent: AgentServer, behaviour: str
) -> None:
    timeout_ms = 300
    await configure(
        client, "Educate_Customer_Agent", url=agent.url, timeout_ms=timeout_ms, retry_attempts=1
    )
    agent.behaviour = behaviour  # type: ignore[assignment]
    session = await create_session(client)
    started = time.monotonic()
    result = await send(client, session["session_id"], "what is compound interest")
    elapsed = time.monotonic() - started
    assert result["degraded"] is True
    assert result["fallback"] == "static_educational_content"
    assert elapsed < timeout_ms / 1000 + 1.0
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    assert decision["error"]


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"success": true, "output_data": {"response": "hi\\u0000"}}', "output_data.response"),
        (b'{"success": true, "output_data": {"n": 18446744073709551616}}', "output_data.n"),
    ],
    ids=["nul", "integer-past-64-bits"],
)
async def test_an_answer_the_service_cannot_store_gets_a_fallback(
    client: httpx.AsyncClient, agent: AgentServer, raw: bytes, field: str
) -> None:
    """A NUL in an agent's answer used to reach PostgreSQL and turn the user's message into
    422 "The database rejected a value"; a huge integer became a float on the way."""
    await configure(client, "Educate_Customer_Agent", url=agent.url, retry_attempts=0)
    agent.raw_reply = raw
    session = await create_session(client)
    result = await send(client, session["session_id"], "what is compound interest")
    assert result["degraded"] is True
    assert result["fallback"] == "static_educational_content"
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    assert field in decision["error"]


async def test_agent_reporting_failure_falls_back(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, "Educate_Customer_Agent", url=agent.url, retry_attempts=0)
    agent.reply = {"success": False, "error_details": {"code": "E1", "message": "model overloaded"}}
    session = await create_session(client)
    result = await send(client, session["session_id"], "what is compound interest")
    assert result["degraded"] is True
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    assert "model overloaded" in decision["error"]


async def test_manual_isolation(
    client: httpx.AsyncClient, agent: AgentServer, make_agent_client: Any
) -> None:
    await configure(client, "Educate_Customer_Agent", url=agent.url)
    isolated = await client.post(
        "/v1/agents/Educate_Customer_Agent/breaker", json={"state": "open"}
    )
    assert isolated.status_code == 200
    assert isolated.json()["state"] == "forced_open"
    session = await create_session(client)
    result = await send(client, session["session_id"], "what is compound interest")
    assert result["degraded"] is True
    assert agent.requests == []
    closed = await client.post(
        "/v1/agents/Educate_Customer_Agent/breaker", json={"state": "closed"}
    )
    assert closed.json()["state"] == "closed"
    result = await send(client, session["session_id"], "what is compound interest")
    assert result["degraded"] is False
    assert len(agent.requests) == 1

    assert_problem(await client.post("/v1/agents/Nobody/breaker", json={"state": "open"}), 404)
    assert_problem(
        await client.post("/v1/agents/Educate_Customer_Agent/breaker", json={"state": "ajar"}), 422
    )
    other = await make_agent_client("Someone", [])
    async with other:
        assert_problem(
            await other.post("/v1/agents/Educate_Customer_Agent/breaker", json={"state": "open"}),
            403,
        )
        assert (await other.get("/v1/agents/Educate_Customer_Agent/breaker")).status_code == 200


async def test_breaker_state_reaches_a_second_instance(
    client: httpx.AsyncClient, settings: Settings, database_url: str, agent: AgentServer
) -> None:
    await configure(client, "Educate_Customer_Agent", url=agent.url, fail_max=1, retry_attempts=0)
    second_app = create_app(
        settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False
    )
    async with (
        lifespan_of(second_app),
        app_client(second_app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as second,
    ):
        assert (await second.get("/v1/agents/Educate_Customer_Agent/breaker")).json()[
            "state"
        ] == "closed"
        agent.behaviour = "fail"
        session = await create_session(client)
        await send(client, session["session_id"], "what is compound interest")
        deadline = time.monotonic() + 3
        state = None
        while time.monotonic() < deadline:
            state = (await second.get("/v1/agents/Educate_Customer_Agent/breaker")).json()["state"]
            if state == "open":
                break
            await asyncio.sleep(0.05)
        assert state == "open"
        calls = len(agent.requests)
        result = await send(second, session["session_id"], "what is compound interest")
        assert result["degraded"] is True
        assert len(agent.requests) == calls  # the second instance did not call either


async def test_a_breaker_state_reaches_another_instance_by_its_notification_alone(
    client: httpx.AsyncClient, settings: Settings, database_url: str
) -> None:
    """No periodic re-read within the test: the second instance adopts what the NOTIFY
    carries (state, failure count, the time it opened)."""
    slow_sync = settings.model_copy(
        update={
            "coordination": CoordinationSettings(breaker_sync_seconds=60, rules_cache_seconds=0)
        }
    )
    second_app = create_app(
        slow_sync, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False
    )
    path = "/v1/agents/Educate_Customer_Agent/breaker"
    async with (
        lifespan_of(second_app),
        app_client(second_app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as second,
    ):
        assert (await second.get(path)).json()["state"] == "closed"
        deadline = time.monotonic() + 3
        seen: dict[str, Any] = {}
        here: dict[str, Any] = {}
        while time.monotonic() < deadline:
            # Published again each round, in case the first came before its LISTEN.
            await client.post(path, json={"state": "open"})
            await asyncio.sleep(0.1)
            here, seen = (await client.get(path)).json(), (await second.get(path)).json()
            if seen == here:
                break
        assert seen["state"] == "forced_open"
        assert seen["opened_at"] is not None
        assert seen == here


async def test_ai_classifier_is_asked_first_and_its_failure_falls_back_to_rules(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, "Intent_Session_Agent", url=agent.url, retry_attempts=0)
    agent.reply = {
        "success": True,
        "output_data": {"intents": [{"intent": "ask_question", "clause": "tell me about money"}]},
    }
    analysis = (
        await client.post("/v1/intents/analyze", json={"message": "tell me about money"})
    ).json()
    assert analysis["classifier"] == "agent:Intent_Session_Agent"
    assert analysis["primary"]["intent"] == "ask_question"
    assert agent.requests[-1]["agent_name"] == "Intent_Session_Agent"

    agent.behaviour = "garbage"
    analysis = (await client.post("/v1/intents/analyze", json={"message": "make a plan"})).json()
    assert analysis["classifier"].startswith("rules")
    assert analysis["primary"]["intent"] == "request_plan"


async def test_intent_rules_are_editable_data(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    intents = (await client.get("/v1/intents")).json()
    weights = {i["name"]: i["base_weight"] for i in intents}
    assert weights == {
        "emergency_financial": 100,
        "urgent_changes": 80,
        "request_consultation": 60,
        "request_plan": 50,
        "provide_info": 40,
        "ask_question": 30,
        "general_inquiry": 20,
    }
    modifiers = {m["name"]: m["points"] for m in (await client.get("/v1/intent-modifiers")).json()}
    assert modifiers == {
        "incomplete_critical_process": 30,
        "user_expressed_urgency": 25,
        "session_in_progress": 20,
        "time_sensitive_deadline": 15,
        "agent_unavailable": -25,
    }
    changed = await client.put(
        "/v1/intents/request_plan", json={"base_weight": 90, "keywords": ["Blueprint", "plan"]}
    )
    assert changed.status_code == 200, changed.text
    assert changed.json()["keywords"] == ["blueprint", "plan"]
    analysis = (
        await client.post("/v1/intents/analyze", json={"message": "a blueprint please"})
    ).json()
    assert analysis["primary"]["intent"] == "request_plan"
    assert analysis["primary"]["score"] == 90
    cue = await client.put(
        "/v1/intent-modifiers/user_expressed_urgency", json={"points": 5, "cues": ["pronto"]}
    )
    assert cue.status_code == 200
    analysis = (await client.post("/v1/intents/analyze", json={"message": "plan pronto"})).json()
    assert analysis["primary"]["score"] == 95
    assert_problem(await client.put("/v1/intent-modifiers/nope", json={"points": 1}), 404)
    assert_problem(await client.put("/v1/intents/Bad-Name", json={"base_weight": 1}), 400)
    assert_problem(await client.put("/v1/intents/x", json={"base_weight": 101}), 422)
    other = await make_agent_client("Reader", [])
    async with other:
        assert_problem(await other.put("/v1/intents/x", json={"base_weight": 1}), 403)


async def test_message_errors(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    assert_problem(await client.post(f"/v1/sessions/{sid}/messages", json={"text": ""}), 422)
    assert_problem(await client.post(f"/v1/sessions/{sid}/messages", json={}), 422)
    assert_problem(
        await client.post(
            f"/v1/sessions/{sid}/messages", json={"text": "x", "context_flags": ["Bad"]}
        ),
        422,
    )
    assert_problem(
        await client.post(
            "/v1/sessions/01900000-0000-7000-8000-000000000000/messages", json={"text": "hi"}
        ),
        404,
    )
    assert_problem(await client.post(f"/v1/sessions/{sid}/pending/next"), 409)
    await client.post(f"/v1/sessions/{sid}/complete", headers=if_match(1))
    assert_problem(await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}), 409)
    assert_problem(await client.post("/v1/intents/analyze", json={"message": "x" * 10001}), 422)


async def test_cards_skills_and_our_own_card(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, make_agent_client: Any
) -> None:
    skills = {s["skill_id"]: s["agents"] for s in (await client.get("/v1/skills")).json()}
    assert skills["budget_planning"] == ["Make_Plan_Agent"]
    planner = await make_agent_client("Make_Plan_Agent", ["authorized"])
    card = {
        "name": "Planner",
        "description": "Plans budgets",
        "url": "http://127.0.0.1:9/a2a",
        "version": "2.0.0",
        "capabilities": {"streaming": False},
        "skills": [
            {"id": "retirement", "name": "Retirement planning", "tags": ["retirement", "pension"]}
        ],
        "defaultInputModes": ["text/plain"],
    }
    async with planner:
        published = await planner.post("/v1/agents/Make_Plan_Agent/card", json=card)
        assert published.status_code == 200, published.text
        assert published.json()["url"] == "http://127.0.0.1:9/a2a"
        assert_problem(await planner.post("/v1/agents/Educate_Customer_Agent/card", json=card), 403)
    stored = (await client.get("/v1/agents/Make_Plan_Agent/card")).json()
    assert stored["defaultInputModes"] == ["text/plain"]
    skills = {s["skill_id"]: s["agents"] for s in (await client.get("/v1/skills")).json()}
    assert skills["retirement"] == ["Make_Plan_Agent"]
    assert "budget_planning" not in skills
    assert_problem(await client.post("/v1/agents/Make_Plan_Agent/card", json={"name": "x"}), 422)

    # routing by skill: no intent rule mentions "pension", a skill tag does
    await client.patch("/v1/agents/Make_Plan_Agent", json={"url": None})
    analysis = (await client.post("/v1/intents/analyze", json={"message": "pension"})).json()
    assert analysis["primary"]["intent"] == "general_inquiry"

    for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
        own = await anon.get(path)
        assert own.status_code == 200
        assert own.json()["name"] == "Switchboard"
        assert own.json()["skills"]


async def test_a_disabled_agent_is_never_routed_to(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await configure(client, "Make_Plan_Agent", url=agent.url)
    assert (await client.delete("/v1/agents/Make_Plan_Agent")).status_code == 204

    analysis = (await client.post("/v1/intents/analyze", json={"message": "make a plan"})).json()
    assert analysis["primary"]["intent"] == "request_plan"
    assert analysis["agent"] != "Make_Plan_Agent"
    session = await create_session(client)
    result = await send(client, session["session_id"], "make a plan for my budget")
    assert result["agent"] != "Make_Plan_Agent"
    assert agent.requests == []
    skills = {s["skill_id"]: s["agents"] for s in (await client.get("/v1/skills")).json()}
    assert "budget_planning" not in skills

    # A new key re-enables it, and routing follows.
    assert (await client.post("/v1/agents/Make_Plan_Agent/key")).status_code == 201
    result = await send(client, session["session_id"], "make a plan for my budget")
    assert result["agent"] == "Make_Plan_Agent"
    assert len(agent.requests) == 1


async def test_two_messages_at_once_both_land(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    first, second = await asyncio.gather(
        client.post(f"/v1/sessions/{sid}/messages", json={"text": "what is a budget"}),
        client.post(f"/v1/sessions/{sid}/messages", json={"text": "make a plan"}),
    )
    assert first.status_code == second.status_code == 200
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    assert current["version"] == 3
    assert current["session_state"]["conversation_context"]["turn_count"] == 2
    assert len(current["agent_sequence"]) == 2


async def test_a_session_changed_while_the_agent_works_keeps_both_changes(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """The message's write starts from the session it read before calling the agent; when
    that is stale, it re-reads and reapplies rather than overwriting the other change."""
    await configure(client, "Make_Plan_Agent", url=agent.url)
    session = await create_session(client)
    sid = session["session_id"]

    async def someone_else_writes() -> None:
        agent.before_reply = None
        patched = await client.patch(
            f"/v1/sessions/{sid}",
            json={"session_state": {"user_preferences": {"tone": "brief"}}},
            headers={"If-Match": '"1"'},
        )
        assert patched.status_code == 200

    agent.before_reply = someone_else_writes
    result = await send(client, sid, "make a plan for my budget")
    assert result["agent"] == "Make_Plan_Agent"
    assert result["session_version"] == 3
    current = (await client.get(f"/v1/sessions/{sid}")).json()
    assert current["version"] == 3
    assert current["session_state"]["user_preferences"]["tone"] == "brief"
    assert current["session_state"]["conversation_context"]["turn_count"] == 1
    assert current["current_agent"] == "Make_Plan_Agent"
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert [(d["decision_id"], d["session_version"]) for d in decisions] == [
        (result["decision_id"], 3)
    ]
    versions = (await client.get(f"/v1/sessions/{sid}/versions")).json()["items"]
    assert [v["version"] for v in versions][:2] == [3, 2]


async def test_session_scoped_clients(running_app: Litestar) -> None:
    """Agents (not only the admin) may send messages."""
    async with app_client(running_app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        created = await admin.post(
            "/v1/agents", json={"name": "Orchestrator_Agent", "roles": ["coordination_manager"]}
        )
        key = created.json()["api_key"]
        session = await create_session(admin)
    async with app_client(running_app, {"X-API-Key": key}) as orchestrator:
        result = await send(orchestrator, session["session_id"], "hello")
    assert result["agent"] == "Orchestrator_Agent"


async def test_direct_agent_routing_really_passes_the_request_on(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """The orchestrator is down (no url) and the classifier calls the message a general
    inquiry; the keyword rules see a plan request, so the fallback hands the session to
    Make_Plan_Agent and calls it through its breaker: its answer is the user's."""
    classifier = await AgentServer().start()
    try:
        classifier.reply = {
            "success": True,
            "output_data": {"intents": [{"intent": "general_inquiry"}]},
        }
        await configure(client, "Intent_Session_Agent", url=classifier.url)
        await configure(client, "Make_Plan_Agent", url=agent.url)
        agent.reply = {"success": True, "output_data": {"response": "Here is your plan"}}
        session = await create_session(client)
        sid = session["session_id"]
        result = await send(client, sid, "hi, make a plan for my savings")
    finally:
        await classifier.stop()

    assert result["agent"] == "Orchestrator_Agent"
    assert result["fallback"] == "direct_agent_routing"
    assert result["routed_to"] == "Make_Plan_Agent"
    assert result["degraded"] is True
    assert result["response"] == (
        "I am passing your request about request plan straight to Make Plan Agent. "
        "Here is your plan"
    )
    sent = agent.requests[-1]
    assert (sent["agent_name"], sent["input_data"]["intent"]) == ("Make_Plan_Agent", "request_plan")

    current = (await client.get(f"/v1/sessions/{sid}")).json()
    assert current["current_agent"] == "Make_Plan_Agent"
    assert [
        (s["agent_name"], s["status"], s.get("next_agent")) for s in current["agent_sequence"]
    ] == [
        ("Orchestrator_Agent", "failed", "Make_Plan_Agent"),
        ("Make_Plan_Agent", "completed", None),
    ]
    decision = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"][0]
    assert decision["chosen_agent"] == "Orchestrator_Agent"
    assert decision["response"]["routed_to"]["agent"] == "Make_Plan_Agent"
    assert decision["response"]["routed_to"]["outcome"] == "agent"
    versions = (await client.get(f"/v1/sessions/{sid}/versions")).json()["items"]
    assert versions[0]["change_reason"] == (
        "message: general_inquiry -> Orchestrator_Agent (fallback direct_agent_routing) -> "
        "Make_Plan_Agent (agent)"
    )


async def test_a_routed_specialist_that_is_down_answers_with_its_own_fallback(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    classifier = await AgentServer().start()
    try:
        classifier.reply = {"success": True, "output_data": {"intents": ["general_inquiry"]}}
        await configure(client, "Intent_Session_Agent", url=classifier.url)
        session = await create_session(client)
        result = await send(client, session["session_id"], "make me a budget")
    finally:
        await classifier.stop()
    assert result["routed_to"] == "Make_Plan_Agent"
    assert result["response"].startswith("I am passing your request about request plan")
    assert "50/30/20" in result["response"]  # Make_Plan_Agent's basic_budget_template


async def test_an_intent_whose_agent_is_down_waits_behind_one_that_can_answer(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    """The seed ranks by agent availability too: with the advisor isolated, the plan goes
    first and the consultation is queued; the decision shows why."""
    await configure(client, "Make_Plan_Agent", url=agent.url)
    message = "I need advice from an advisor. Also make a plan for me"
    before = (await client.post("/v1/intents/analyze", json={"message": message})).json()
    assert before["primary"]["intent"] == "request_consultation"
    isolated = await client.post(
        "/v1/agents/Consult_Customer_Agent/breaker", json={"state": "open"}
    )
    assert isolated.status_code == 200, isolated.text
    after = (await client.post("/v1/intents/analyze", json={"message": message})).json()
    assert after["primary"]["intent"] == "request_plan"
    consult = next(i for i in after["intents"] if i["intent"] == "request_consultation")
    assert consult["modifiers"] == ["agent_unavailable"]
    assert consult["score"] == 60 - 25

    session = await create_session(client)
    result = await send(client, session["session_id"], message)
    assert result["agent"] == "Make_Plan_Agent"
    assert result["degraded"] is False
    assert [a["type"] for a in result["pending_actions"]] == ["request_consultation"]
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    recorded = {i["intent"]: i["modifiers"] for i in decision["intents"]}
    assert recorded["request_consultation"] == ["agent_unavailable"]


async def test_an_emergency_at_the_cap_is_not_held_for_a_clarification(
    client: httpx.AsyncClient,
) -> None:
    analysis = (
        await client.post(
            "/v1/intents/analyze",
            json={"message": "I lost my job and I need to cancel my plan urgently"},
        )
    ).json()
    scores = {i["intent"]: i["score"] for i in analysis["intents"]}
    assert scores["emergency_financial"] == scores["urgent_changes"] == 100
    assert analysis["clarification"] is None
    assert analysis["primary"]["intent"] == "emergency_financial"


async def test_a_message_no_keyword_claims_is_routed_by_the_agents_skills(
    client: httpx.AsyncClient,
) -> None:
    """With the seeded registry: "risk" is a tag of Consult_Customer_Agent's skill and no
    keyword rule's; the orchestrator's general_inquiry no longer swallows it."""
    analysis = (
        await client.post("/v1/intents/analyze", json={"message": "Tell me about risk?"})
    ).json()
    assert analysis["primary"]["intent"] == "general_inquiry"
    assert (analysis["agent"], analysis["routed_by"]) == ("Consult_Customer_Agent", "skill")
    greeting = (await client.post("/v1/intents/analyze", json={"message": "hello"})).json()
    assert (greeting["agent"], greeting["routed_by"]) == ("Orchestrator_Agent", "intent")
    unknown = (await client.post("/v1/intents/analyze", json={"message": "qwerty"})).json()
    assert (unknown["agent"], unknown["routed_by"]) == ("Orchestrator_Agent", "intent")


async def test_direct_routing_takes_the_highest_priority_intent_and_queues_the_rest(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    classifier = await AgentServer().start()
    try:
        classifier.reply = {"success": True, "output_data": {"intents": ["general_inquiry"]}}
        await configure(client, "Intent_Session_Agent", url=classifier.url)
        session = await create_session(client)
        result = await send(
            client,
            session["session_id"],
            "Explain what a budget is. I lost my job, this is an emergency",
        )
    finally:
        await classifier.stop()
    assert result["routed_to"] == "Consult_Customer_Agent"  # the emergency, not the lesson
    queued = {(a["type"], a["status"]) for a in result["pending_actions"]}
    assert ("ask_question", "pending") in queued


async def test_only_the_server_says_an_agent_is_unavailable(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    for path, body in (
        (
            f"/v1/sessions/{session['session_id']}/messages",
            {"text": "I lost my job", "context_flags": ["agent_unavailable"]},
        ),
        (
            "/v1/intents/analyze",
            {"message": "I lost my job", "context_flags": ["agent_unavailable"]},
        ),
    ):
        problem = assert_problem(await client.post(path, json=body), 422)
        assert problem["errors"][0]["field"] == "context_flags.0"
    # Nor can a text cue stand in for it.
    cue = await client.put(
        "/v1/intent-modifiers/agent_unavailable", json={"points": -25, "cues": ["down"]}
    )
    assert cue.status_code == 200, cue.text
    analysis = (
        await client.post("/v1/intents/analyze", json={"message": "the site is down, explain why"})
    ).json()
    assert all("agent_unavailable" not in i["modifiers"] for i in analysis["intents"])
