"""HTTP routes for coordination: analysis, messages, pending actions, decisions, intent
rules and breakers (Switchboard's own A2A agent card is app/a2a/controller.py)."""

from __future__ import annotations

import re
from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, get, post, put
from litestar.datastructures import ResponseHeader
from litestar.di import NamedDependency
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter

from app.auth.guards import admin_only, integration_key
from app.auth.principal import Principal
from app.common.pagination import DEFAULT_LIMIT, MAX_LIMIT
from app.coordination.breaker_admin import BreakerAdmin
from app.coordination.escalation import EscalationService
from app.coordination.next_step import NextStepRule
from app.coordination.prefer import WaitBudget, parse_prefer
from app.coordination.rules import RulesService
from app.coordination.schemas import (
    Analysis,
    AnalyzeRequest,
    BreakerCommand,
    BreakerView,
    DecisionPage,
    IntentModifier,
    IntentType,
    IntentTypeWrite,
    MessageAccepted,
    MessageRequest,
    MessageResult,
    ModifierWrite,
    Resolution,
    ResolveRequest,
)
from app.coordination.service import CoordinationService
from app.errors import BadRequest

AnyRequest = Request[Principal, Any, Any]
# Documented here; read from every Prefer header of the request (RFC 7240 allows several).
PreferHeader = Annotated[
    str | None,
    HeaderParameter(
        name="prefer",
        required=False,
        max_length=1024,
        description=(
            "RFC 7240: `wait=N` (seconds to wait for the agent, capped) and/or "
            "`respond-async` (202 with the task). Other preferences and malformed values "
            "are ignored."
        ),
    ),
]
WAIT_HEADERS = [
    ResponseHeader(
        name="Preference-Applied",
        required=False,
        description="The Prefer preferences honoured (RFC 7240), e.g. `wait=20`.",
        documentation_only=True,
    ),
]
ACCEPTED_RESPONSE = {
    202: ResponseSpec(
        data_container=MessageAccepted,
        description=(
            "Prefer: respond-async: the agent's task works on the message (Location: the "
            "task); its answer is applied to the session when it comes (event task.completed)."
        ),
    )
}


def waited_response(
    result: MessageResult | MessageAccepted, budget: WaitBudget
) -> Response[MessageResult | MessageAccepted]:
    """200 with the answer, or 202 with the task (Location), and Preference-Applied."""
    headers = {"Preference-Applied": budget.applied} if budget.applied else {}
    if isinstance(result, MessageAccepted):
        return Response(result, status_code=202, headers={**headers, "Location": result.task_url})
    return Response(result, status_code=200, headers=headers)


Coordinator = NamedDependency[CoordinationService]
Rules = NamedDependency[RulesService]
Breakers = NamedDependency[BreakerAdmin]
Escalations = NamedDependency[EscalationService]
_NAME_RULE = "lowercase letters, digits and underscores, starting with a letter"
_RULE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def _check_rule_name(name: str) -> None:
    if not _RULE_NAME.fullmatch(name):
        raise BadRequest(f"A rule name is {_NAME_RULE}.")


class IntentController(Controller):
    """Intent analysis and the rules behind it."""

    path = "/v1"
    tags = ["coordination"]

    @post("/intents/analyze", status_code=200, summary="Analyse a message (no side effects)")
    async def analyze(self, data: JSONBody[AnalyzeRequest], coordinator: Coordinator) -> Analysis:
        """Detected intents with scores and modifiers, the primary, the queued secondaries
        or a clarification question, and the agent it would go to."""
        return await coordinator.analyze(data)

    @get("/intents", summary="Intent types, weights and keywords")
    async def list_intents(self, rules: Rules) -> list[IntentType]:
        """The intent rules, heaviest first."""
        return await rules.list_intents()

    @put("/intents/{name:str}", guards=[admin_only], summary="Create or change an intent type")
    async def put_intent(
        self, name: FromPath[str], data: JSONBody[IntentTypeWrite], rules: Rules
    ) -> IntentType:
        """Set the base weight and replace the keyword phrases of an intent."""
        _check_rule_name(name)
        return await rules.put_intent(name, data)

    @get("/next-step-rules", summary="The next-step rules, in the order they are tried")
    async def list_next_step_rules(self, rules: Rules) -> list[NextStepRule]:
        """What happens after each agent result and failure: the first rule whose event
        and condition hold gives the outcome (continue, hand_off, ask_user, finalize,
        request_manual_intervention); the limits are settings."""
        return await rules.list_next_steps()

    @get("/intent-modifiers", summary="Context modifiers and their cues")
    async def list_modifiers(self, rules: Rules) -> list[IntentModifier]:
        """The context modifiers, their points and the phrases that reveal them."""
        return await rules.list_modifiers()

    @put("/intent-modifiers/{name:str}", guards=[admin_only], summary="Change a context modifier")
    async def put_modifier(
        self, name: FromPath[str], data: JSONBody[ModifierWrite], rules: Rules
    ) -> IntentModifier:
        """Set a modifier's points and replace its cue phrases."""
        _check_rule_name(name)
        return await rules.put_modifier(name, data)


class SessionMessageController(Controller):
    """The coordination entry point of a session."""

    path = "/v1/sessions/{session_id:uuid}"
    tags = ["coordination", "sessions"]

    @post(
        "/messages",
        status_code=200,
        summary="Send a user message through the coordinator",
        response_headers=WAIT_HEADERS,
        responses=ACCEPTED_RESPONSE,
    )
    async def message(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        data: JSONBody[MessageRequest],
        coordinator: Coordinator,
        prefer: PreferHeader = None,
    ) -> Response[MessageResult | MessageAccepted]:
        """Analyse, prioritise, route, run the agent's task and wait for it up to the wait
        budget (``Prefer: wait=N``; default SWITCHBOARD_COORDINATION_WAIT_DEFAULT_SECONDS):
        its answer, else the fallback's (degraded, with the task id; the real answer is
        applied to the session later, event task.completed). ``Prefer: respond-async``:
        202 with the task."""
        budget = coordinator.budget(parse_prefer(request.headers.getall("prefer", [])))
        result = await coordinator.handle_message(session_id, data, request.user, budget)
        return waited_response(result, budget)

    @post(
        "/branches/{name:str}/messages",
        status_code=200,
        summary="Send a user message through the coordinator, on a branch",
        response_headers=WAIT_HEADERS,
        responses=ACCEPTED_RESPONSE,
        tags=["branches"],
    )
    async def branch_message(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        data: JSONBody[MessageRequest],
        coordinator: Coordinator,
        prefer: PreferHeader = None,
    ) -> Response[MessageResult | MessageAccepted]:
        """As a message to the session, coordinated on the branch: the agent is sent the
        branch's content and the memories it sees on the branch, the turn is written as the
        branch's next version (``session_version`` is the branch's, ``branch`` names it),
        its memory updates are the branch's, its decision names the branch, and a late
        answer lands on the branch. Main changes when the branch is merged. 404 for an
        unknown branch, 409 for a merged one."""
        budget = coordinator.budget(parse_prefer(request.headers.getall("prefer", [])))
        result = await coordinator.handle_message(
            session_id, data, request.user, budget, branch=name
        )
        return waited_response(result, budget)

    @post(
        "/pending/next",
        status_code=200,
        summary="Process the next pending action",
        response_headers=WAIT_HEADERS,
        responses=ACCEPTED_RESPONSE,
    )
    async def next_pending(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        coordinator: Coordinator,
        prefer: PreferHeader = None,
    ) -> Response[MessageResult | MessageAccepted]:
        """Take the highest-priority queued action (a secondary intent, a deferred change)
        and coordinate it like a message, its agent called by a task (kind pending_action)
        waited for the same way; 409 when nothing is pending."""
        budget = coordinator.budget(parse_prefer(request.headers.getall("prefer", [])))
        result = await coordinator.next_pending(session_id, request.user, budget)
        return waited_response(result, budget)

    @post(
        "/resolve",
        status_code=200,
        guards=[integration_key],
        summary="Resolve an escalated session (manual intervention done)",
    )
    async def resolve(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        data: JSONBody[ResolveRequest],
        escalation: Escalations,
    ) -> Resolution:
        """A person's answer to an escalation (the admin key or a coordination_manager
        agent): the note is recorded in the decision log and a new version, the session is
        active again (event session.resolved) and its held tasks run. 409 when the session
        is not escalated."""
        return await escalation.resolve(session_id, data.note, request.user)

    @get("/decisions", summary="The session's coordination decisions")
    async def decisions(
        self,
        session_id: FromPath[UUID],
        coordinator: Coordinator,
        limit: Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
        cursor: Annotated[str | None, QueryParameter(max_length=512)] = None,
    ) -> DecisionPage:
        """Every decision (intents, scores, agent, breaker state, fallback), newest first."""
        return await coordinator.list_decisions(session_id, limit, cursor)


class BreakerController(Controller):
    """Per-agent circuit breakers."""

    path = "/v1/agents/{name:str}/breaker"
    tags = ["coordination", "agents"]

    @get("/", summary="An agent's circuit breaker")
    async def get_breaker(self, name: FromPath[str], breaker_admin: Breakers) -> BreakerView:
        """State, failure count and settings, as this replica sees them."""
        return await breaker_admin.breaker(name)

    @post("/", status_code=200, guards=[admin_only], summary="Isolate an agent or bring it back")
    async def set_breaker(
        self, name: FromPath[str], data: JSONBody[BreakerCommand], breaker_admin: Breakers
    ) -> BreakerView:
        """``open`` isolates the agent (fallbacks only, on every replica) until ``closed``."""
        return await breaker_admin.set_breaker(name, data.state)
