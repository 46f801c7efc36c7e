"""The coordinator's pure steps, without a database or an agent: which agent takes an
intent, where a failed orchestrator passes a request, what a queued action or a session
contributes, and the decision, session turn and answer made of what the agents did."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

import msgspec
import pytest

from app.agents.schemas import Agent
from app.coordination.answers import RepairKind
from app.coordination.context import session_flags
from app.coordination.dispatch import CallResult
from app.coordination.fallbacks import FallbackResult
from app.coordination.intents import DetectedIntent, IntentRules, prioritize
from app.coordination.outcome import NOBODY, AgentStep, TurnOutcome
from app.coordination.pending import as_prioritization
from app.coordination.routing import (
    Handoff,
    Route,
    RoutingPolicy,
    classifier_agent,
    handoff,
    route,
)
from app.coordination.schemas import (
    AgentResponse,
    Decision,
    DecisionRecord,
    MemoryUpdateOutcome,
    RejectedMemoryUpdate,
)
from app.sessions.schemas import PendingAction, Session

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
AGENT_TIME = datetime(2026, 10, 1, tzinfo=UTC)
SESSION_ID = UUID("01900000-0000-7000-8000-000000000001")
POLICY = RoutingPolicy(default_agent="Orchestrator_Agent", classifier_agent="Intent_Agent")
RULES = IntentRules(
    base_weights={"request_plan": 50, "ask_question": 30, "general_inquiry": 20},
    keywords={"request_plan": ["plan"], "ask_question": ["what is"], "general_inquiry": ["hi"]},
    modifiers={"session_in_progress": 20},
    cues={},
    intent_agents={"request_plan": "Planner", "ask_question": "Educator"},
)


def agent(
    name: str,
    intents: Sequence[str] = (),
    *,
    url: str | None = "http://agent.example/a",
    enabled: bool = True,
    fallback: str | None = None,
    tags: Sequence[str] = (),
) -> Agent:
    return Agent(
        agent_id=uuid4(),
        name=name,
        roles=[],
        created_at=AGENT_TIME,
        disabled_at=None,
        description="",
        url=url,
        timeout_ms=1000,
        retry_attempts=0,
        fallback_strategy=fallback,
        intents=list(intents),
        skills=[{"id": name.lower(), "tags": list(tags)}] if tags else [],
        enabled=enabled,
        fail_max=5,
        reset_timeout_ms=1000,
        has_key=True,
        updated_at=AGENT_TIME,
    )


def intent(name: str, score: int, clause: str = "", *, matched: bool = True) -> DetectedIntent:
    return DetectedIntent(
        intent=name,
        clause=clause or name,
        position=0,
        matched=(name,) if matched else (),
        base_weight=score,
        modifiers=(),
        score=score,
    )


ORCHESTRATOR = agent(
    "Orchestrator_Agent", ["general_inquiry"], url=None, fallback="direct_agent_routing"
)
PLANNER = agent("Planner", ["request_plan"], tags=["budget"])
EDUCATOR = agent("Educator", ["ask_question"], url=None, fallback="static_educational_content")
AGENTS = [EDUCATOR, ORCHESTRATOR, PLANNER, agent("Intent_Agent", tags=["budget", "plan"])]


# -- routing ------------------------------------------------------------------------------


def test_an_intent_goes_to_its_agent_else_by_skill_else_to_the_default() -> None:
    assert route(intent("request_plan", 50), AGENTS, POLICY) == Route(PLANNER, "intent")
    # Nobody serves it; a skill tag matches its clause (never the classifier's skills).
    found = route(intent("provide_info", 40, "my budget"), AGENTS, POLICY)
    assert found == Route(PLANNER, "skill")
    assert route(intent("provide_info", 40, "x"), AGENTS, POLICY) == Route(ORCHESTRATOR, "default")
    # An intent nobody named is matched by skill before the agent serving it.
    unclaimed = intent("general_inquiry", 20, "a budget", matched=False)
    assert route(unclaimed, AGENTS, POLICY) == Route(PLANNER, "skill")
    assert route(intent("x", 1), [agent("Orchestrator_Agent", enabled=False)], POLICY) is None


def test_the_classifier_is_asked_only_when_enabled_and_reachable() -> None:
    assert classifier_agent(AGENTS, POLICY) == AGENTS[3]
    assert classifier_agent([agent("Intent_Agent", url=None)], POLICY) is None
    assert classifier_agent([agent("Intent_Agent", enabled=False)], POLICY) is None


def test_a_failed_orchestrator_passes_the_request_to_the_first_other_route() -> None:
    ranked = [
        intent("general_inquiry", 60),  # routes back to the orchestrator itself: skipped
        intent("request_plan", 50),
        intent("ask_question", 30),
        intent("general_inquiry_2", 25, matched=False),  # no keyword: not queued
        intent("taken", 10),  # the failed turn's own: not queued again
    ]
    passed = handoff(ORCHESTRATOR, ["taken"], ranked, AGENTS, POLICY)
    assert passed == Handoff(PLANNER, ranked[1], (ranked[2],))


def test_no_handoff_to_an_agent_that_routes_onward_or_to_nobody() -> None:
    relay = agent("Relay", ["request_plan"], fallback="direct_agent_routing")
    orchestrator = agent("Orchestrator_Agent", ["general_inquiry"], url=None)
    assert handoff(orchestrator, [], [intent("request_plan", 50)], [relay], POLICY) is None
    assert handoff(ORCHESTRATOR, [], [intent("general_inquiry", 20)], AGENTS, POLICY) is None


# -- what a queued action and a session contribute ------------------------------------------


def test_a_queued_action_keeps_the_priority_it_was_queued_with() -> None:
    action = PendingAction(type="request_plan", description="a plan", priority_score=77)
    prio = as_prioritization(action, "a plan", RULES)
    assert prio.primary == DetectedIntent(
        "request_plan", "a plan", 0, ("pending_action",), 50, (), 77
    )
    assert (prio.intents, prio.secondaries, prio.clarification) == ((prio.primary,), (), None)
    unknown = as_prioritization(PendingAction(type="mystery"), "mystery", RULES).primary
    assert unknown is not None
    assert unknown.base_weight == RULES.default_weight


def session(**changes: Any) -> Session:
    fields: dict[str, Any] = {
        "session_id": SESSION_ID,
        "user_id": SESSION_ID,
        "session_type": "multi_agent_chat",
        "status": "active",
        "priority": "normal",
        "current_agent": None,
        "agent_sequence": [],
        "session_state": {"pending_actions": [{"type": "ask_question"}]},
        "coordination_metadata": {},
        "progress_percentage": 40,
        "preserve": False,
        "version": 3,
        "created_at": NOW,
        "updated_at": NOW,
        "last_activity_at": NOW,
        "expires_at": NOW,
        "completed_at": None,
    }
    return Session(**(fields | changes))


@pytest.mark.parametrize(
    ("state", "priority", "progress", "flags"),
    [
        ({}, "urgent", 0, set()),
        ({"active_process": "budget"}, "normal", 0, {"session_in_progress"}),
        (
            {"active_process": "budget"},
            "high",
            99,
            {"session_in_progress", "incomplete_critical_process"},
        ),
        ({"active_process": "budget"}, "urgent", 100, {"session_in_progress"}),
    ],
)
def test_a_running_process_flags_the_session(
    state: dict[str, Any], priority: str, progress: int, flags: set[str]
) -> None:
    found = session(session_state=state, priority=priority, progress_percentage=progress)
    assert session_flags(found) == flags


# -- the records made of a turn -------------------------------------------------------------


def answered(
    output: Any, suggestions: Sequence[str] = (), repaired: RepairKind | None = None
) -> CallResult:
    response = AgentResponse(
        success=True, output_data=output, next_agent_suggestions=list(suggestions)
    )
    return CallResult(response=response, attempts=1, error=None, elapsed_ms=3, repaired=repaired)


FAILED = CallResult(response=None, attempts=0, error="agent has no url configured", elapsed_ms=0)


def record(outcome: TurnOutcome) -> dict[str, Any]:
    decision = outcome.decision(SESSION_ID, "the message", "admin", 7)
    built: dict[str, Any] = msgspec.to_builtins(decision)
    return built


def test_an_answering_agent() -> None:
    plan, question = intent("request_plan", 50), intent("ask_question", 30)
    prio = prioritize([plan, question], RULES, 0)
    memories = MemoryUpdateOutcome(
        applied=1, rejected=[RejectedMemoryUpdate(index=1, status=422, detail="unknown level")]
    )
    step = AgentStep(
        PLANNER,
        plan,
        answered({"response": "Here", "progress_percentage": 40}, ["Educator", "X"], "truncated"),
        None,
        memories,
        "closed",
    )
    outcome = TurnOutcome(["session_in_progress"], "rules", prio, Route(PLANNER, "intent"), (step,))
    assert (outcome.reply, outcome.kind, outcome.fallback, outcome.handed_to) == (
        "Here",
        "agent",
        None,
        None,
    )
    assert record(outcome) == {
        "session_id": str(SESSION_ID),
        "message": "the message",
        "context_flags": ["session_in_progress"],
        "classifier": "rules",
        "intents": [
            {
                "intent": "request_plan",
                "clause": "request_plan",
                "position": 0,
                "matched": ["request_plan"],
                "base_weight": 50,
                "modifiers": [],
                "score": 50,
            },
            {
                "intent": "ask_question",
                "clause": "ask_question",
                "position": 0,
                "matched": ["ask_question"],
                "base_weight": 30,
                "modifiers": [],
                "score": 30,
            },
        ],
        "primary_intent": "request_plan",
        "chosen_agent": "Planner",
        "routed_by": "intent",
        "breaker_state": "closed",
        "outcome": "agent",
        "fallback": None,
        "degraded": False,
        "attempts": 1,
        "error": None,
        "response": {
            "text": "Here",
            "output_data": {"response": "Here", "progress_percentage": 40},
            "next_agent_suggestions": ["Educator", "X"],
            "routed_to": None,
            "repaired": True,
            "repaired_from": "truncated",
        },
        "execution_time_ms": 7,
        "created_by": "admin",
    }
    turn = outcome.turn(None, {"Planner", "Educator"})
    assert (turn.primary, turn.secondaries, turn.clarification) == (plan, (question,), False)
    (recorded,) = turn.steps
    assert (recorded.agent, recorded.answered, recorded.next_agent) == ("Planner", True, "Educator")
    assert turn.requeue is None

    result = outcome.result(session(), UUID(int=9), RULES, 11)
    assert (result.decision_id, result.session_version, result.agent) == (UUID(int=9), 3, "Planner")
    assert result.pending_actions == [{"type": "ask_question"}]
    assert (result.progress_percentage, result.memory_updates) == (40, memories)
    assert result.repaired is True
    assert [(i.intent, i.agent) for i in result.intents] == [
        ("request_plan", "Planner"),
        ("ask_question", "Educator"),
    ]


def test_a_fallback_that_passes_the_request_on_and_queues_what_it_found() -> None:
    general, plan, question = (
        intent("general_inquiry", 20),
        intent("request_plan", 50),
        intent("ask_question", 30),
    )
    prio = prioritize([general], RULES, 0)
    passed = Handoff(PLANNER, plan, (question,))
    note = FallbackResult("direct_agent_routing", "Passing it on.", {"routed_to": "Planner"})
    deferred = PendingAction(type="request_plan", description="a plan", priority_score=5)
    busy = FallbackResult("basic_budget_template", "A budget.", {"split": 1}, deferred)
    first = AgentStep(ORCHESTRATOR, general, FAILED, note, MemoryUpdateOutcome(), "closed", passed)
    failed = CallResult(response=None, attempts=2, error="agent answered HTTP 500", elapsed_ms=1)
    second = AgentStep(PLANNER, plan, failed, busy, MemoryUpdateOutcome(), "open")
    outcome = TurnOutcome([], "rules", prio, Route(ORCHESTRATOR, "intent"), (first, second))

    assert outcome.reply == "Passing it on. A budget."
    built = record(outcome)
    assert (built["outcome"], built["fallback"], built["degraded"]) == (
        "fallback",
        "direct_agent_routing",
        True,
    )
    assert (built["attempts"], built["error"]) == (0, "agent has no url configured")
    assert built["response"] == {
        "text": "Passing it on. A budget.",
        "output_data": {"split": 1},
        "next_agent_suggestions": [],
        "routed_to": {
            "agent": "Planner",
            "intent": "request_plan",
            "outcome": "fallback",
            "fallback": "basic_budget_template",
            "attempts": 2,
            "error": "agent answered HTTP 500",
            "breaker_state": "open",
        },
        "repaired": False,
        "repaired_from": None,
    }
    turn = outcome.turn(None, set())
    assert turn.secondaries == (question,)
    assert [(s.agent, s.answered, s.next_agent, s.fallback) for s in turn.steps] == [
        ("Orchestrator_Agent", False, "Planner", "direct_agent_routing"),
        ("Planner", False, None, "basic_budget_template"),
    ]
    assert turn.requeue is not None
    assert (turn.requeue.type, turn.requeue.priority_score) == ("request_plan", 50)
    assert outcome.result(session(), UUID(int=1), RULES, 0).routed_to == "Planner"


def test_a_clarification_and_a_message_nobody_takes() -> None:
    asked = prioritize([intent("request_plan", 50), intent("ask_question", 45)], RULES, 10)
    assert asked.clarification is not None
    outcome = TurnOutcome([], "rules", asked, None)
    assert (outcome.reply, outcome.kind) == (asked.clarification.question, "clarification")
    built = record(outcome)
    assert (built["primary_intent"], built["chosen_agent"], built["attempts"]) == (None, None, 0)
    assert outcome.turn(None, set()).clarification is True

    nobody = TurnOutcome([], "rules", prioritize([intent("x", 1)], RULES, 0), None)
    assert (nobody.reply, nobody.kind, nobody.output_data, nobody.suggestions) == (
        NOBODY,
        "agent",
        None,
        [],
    )


def test_a_stored_decision_is_the_record_with_what_the_database_gave_it() -> None:
    outcome = TurnOutcome([], "rules", prioritize([intent("x", 1)], RULES, 0), None)
    trace_id = "0af7651916cd43dd8448eb211c80319c"
    written = msgspec.to_builtins(outcome.decision(SESSION_ID, "m", "admin", 1, trace_id))
    assert written["trace_id"] == trace_id
    # The database fills these in; the record it is sent does not carry them.
    assert {"decision_id", "session_version", "created_at", "branch"}.isdisjoint(written)
    row = written | {"decision_id": UUID(int=5), "session_version": 2, "created_at": NOW}
    stored = msgspec.convert(row, Decision, strict=False)
    assert isinstance(stored, DecisionRecord)
    assert list(msgspec.to_builtins(stored))[:3] == ["decision_id", "session_id", "session_version"]
    # In the table's order: trace_id (revision 0016), task_id (revision 0021), next_step
    # (revision 0022), then branch (revision 0025) came last.
    assert list(msgspec.to_builtins(stored))[-5:] == [
        "created_at",
        "trace_id",
        "task_id",
        "next_step",
        "branch",
    ]
    assert stored.trace_id == trace_id
