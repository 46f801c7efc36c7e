"""What came of one coordinated turn, and the three records made of it: the decision that
is stored, the ``Turn`` that changes the session, and the answer the caller gets. Pure: the
service runs the agents, this module only writes down what they did."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from app.agents.schemas import Agent
from app.common.jsontypes import JsonValue
from app.coordination.answers import RepairKind
from app.coordination.dispatch import CallResult
from app.coordination.fallbacks import FallbackResult
from app.coordination.intents import DetectedIntent, IntentRules, Prioritization
from app.coordination.routing import Handoff, Route
from app.coordination.schemas import (
    AgentResponse,
    ClarificationView,
    DecidedIntent,
    DecisionRecord,
    DecisionResponse,
    IntentView,
    MemoryUpdateOutcome,
    MessageAccepted,
    MessageResult,
    RoutedTo,
)
from app.coordination.tasks import task_url
from app.coordination.turn import Turn, TurnStep
from app.sessions.schemas import PendingAction, Session
from app.sessions.state import evolve
from app.tasks.schemas import Task

# What the user reads when no agent, not even a fallback, could take the message.
NOBODY = "No agent is available for this request."
# What the user reads of a step answered 202 (Prefer: respond-async): its task works on.
ACCEPTED = "{agent} is working on it; the answer follows when it is ready."


def response_text(output: object) -> str:
    """The user-facing text in an agent's output_data."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        for key in ("response", "message", "text", "answer"):
            value = output.get(key)
            if isinstance(value, str) and value:
                return value
    return "Done."


@dataclass(frozen=True, slots=True)
class AgentStep:
    """One agent call of a turn and what came of it."""

    agent: Agent
    intent: DetectedIntent
    call: CallResult
    fallback: FallbackResult | None
    memories: MemoryUpdateOutcome
    breaker_state: str
    # Where a direct_agent_routing fallback passes the request.
    routed: Handoff | None = None
    # The agent's task (None: no task was run, e.g. the agent has no url or its breaker
    # refused) and whether it is still working, detached from the turn.
    task: Task | None = None
    waiting: bool = False

    @property
    def response(self) -> AgentResponse | None:
        """The agent's answer, if it gave one."""
        return self.call.response if self.call.ok else None

    @property
    def reply(self) -> str:
        """What the user reads of this step."""
        if self.response is not None:
            return response_text(self.response.output_data)
        if self.fallback is not None:
            return self.fallback.text
        return ACCEPTED.format(agent=self.agent.name) if self.waiting else ""

    @property
    def accepted(self) -> bool:
        """The step was answered 202: its task works on, and no fallback answered."""
        return self.waiting and self.fallback is None and self.response is None

    def turn_step(self, *, next_agent: str | None, known: set[str]) -> TurnStep:
        """This step as the session records it. The next agent is the one the turn passed
        to, else the first registered agent the answer suggested (the answer itself shows
        every suggestion)."""
        response = self.response
        if next_agent is None and response is not None:
            next_agent = next((n for n in response.next_agent_suggestions if n in known), None)
        return TurnStep(
            agent=self.agent.name,
            answered=response is not None,
            reply=self.reply,
            output_data=response.output_data if response else None,
            next_agent=next_agent,
            fallback=self.fallback.strategy if self.fallback else None,
            waiting_task=str(self.task.task_id) if self.waiting and self.task else None,
        )

    def routed_to(self) -> RoutedTo:
        """This step as the decision records the agent a message was passed to."""
        return RoutedTo(
            agent=self.agent.name,
            intent=self.intent.intent,
            outcome="agent" if self.response is not None else "fallback",
            fallback=self.fallback.strategy if self.fallback else None,
            attempts=self.call.attempts,
            error=self.call.error,
            breaker_state=self.breaker_state,
        )


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """One message (or queued action): its context flags, how it was classified and
    ranked, where it was routed, and the agents that took it, in order: none (nobody, or a
    clarification), one, or the orchestrator whose fallback passed the request on and the
    agent it passed it to."""

    flags: list[str]
    classifier: str
    prio: Prioritization
    route: Route | None
    steps: tuple[AgentStep, ...] = ()

    @property
    def reply(self) -> str:
        """What the user reads: the clarification question, or every step's reply."""
        if self.prio.clarification is not None:
            return self.prio.clarification.question
        return " ".join(step.reply for step in self.steps) if self.steps else NOBODY

    @property
    def fallback(self) -> FallbackResult | None:
        """The fallback of the routed agent, when it did not answer."""
        return self.steps[0].fallback if self.steps else None

    @property
    def response(self) -> AgentResponse | None:
        """The last agent's answer, if it gave one."""
        return self.steps[-1].response if self.steps else None

    @property
    def output_data(self) -> JsonValue:
        """The last agent's output, or its fallback's data."""
        if self.response is not None:
            return self.response.output_data
        last = self.steps[-1] if self.steps else None
        return last.fallback.data if last and last.fallback else None

    @property
    def repaired_from(self) -> RepairKind | None:
        """What was wrong with the JSON of the answer the user got, if it was repaired."""
        return self.steps[-1].call.repaired if self.response is not None else None

    @property
    def suggestions(self) -> list[str]:
        """The agents the last answer suggests next."""
        return self.response.next_agent_suggestions if self.response else []

    @property
    def handed_to(self) -> AgentStep | None:
        """The step of the agent a direct_agent_routing fallback passed the message to."""
        return self.steps[1] if len(self.steps) > 1 else None

    @property
    def task(self) -> Task | None:
        """The task the caller is pointed to: the first one still working (its answer
        comes later), else the routed agent's."""
        waiting = next((step.task for step in self.steps if step.waiting and step.task), None)
        return waiting or (self.steps[0].task if self.steps else None)

    @property
    def accepted(self) -> bool:
        """The turn was answered 202 (Prefer: respond-async): its agent's task works on."""
        return bool(self.steps) and self.steps[0].accepted

    @property
    def kind(self) -> Literal["clarification", "agent", "fallback", "accepted"]:
        """The decision's outcome."""
        if self.prio.clarification is not None:
            return "clarification"
        if self.accepted:
            return "accepted"
        return "agent" if self.fallback is None else "fallback"

    def decision(
        self,
        session_id: UUID,
        message: str,
        created_by: str,
        execution_time_ms: int,
        trace_id: str | None = None,
    ) -> DecisionRecord:
        """The decision record of this turn (``trace_id``: the trace it was made in)."""
        first = self.steps[0] if self.steps else None
        fallback, handed_to, primary = self.fallback, self.handed_to, self.prio.primary
        return DecisionRecord(
            session_id=session_id,
            message=message,
            context_flags=self.flags,
            classifier=self.classifier,
            intents=[decided_intent(i) for i in self.prio.intents],
            primary_intent=primary.intent if primary else None,
            chosen_agent=self.route.agent.name if self.route else None,
            routed_by=self.route.routed_by if self.route else None,
            breaker_state=first.breaker_state if first else None,
            outcome=self.kind,
            fallback=fallback.strategy if fallback else None,
            degraded=fallback is not None,
            attempts=first.call.attempts if first else 0,
            error=first.call.error if first else None,
            response=DecisionResponse(
                text=self.reply,
                output_data=self.output_data,
                next_agent_suggestions=self.suggestions,
                routed_to=handed_to.routed_to() if handed_to else None,
                repaired=self.repaired_from is not None,
                repaired_from=self.repaired_from,
            ),
            execution_time_ms=execution_time_ms,
            created_by=created_by,
            trace_id=trace_id,
            task_id=self.task.task_id if self.task else None,
        )

    def turn(self, pending: PendingAction | None, known_agents: set[str]) -> Turn:
        """What the session records of this turn (``pending``: the claimed action it
        processed). The intents the routing found besides the one it passed on, and the
        work a fallback deferred, wait in the queue."""
        steps = self.steps
        routed = steps[0].routed if steps else None
        last = steps[-1] if steps else None
        # A step whose task still works has its deferred work in that task.
        deferred = (
            last.fallback.pending_action if last and last.fallback and not last.waiting else None
        )
        return Turn(
            primary=self.prio.primary,
            secondaries=self.prio.secondaries + (routed.others if routed else ()),
            clarification=self.prio.clarification is not None,
            reply=self.reply,
            steps=tuple(
                step.turn_step(
                    next_agent=steps[index + 1].agent.name if index + 1 < len(steps) else None,
                    known=known_agents,
                )
                for index, step in enumerate(steps)
            ),
            requeue=(
                evolve(deferred, priority_score=steps[-1].intent.score)
                if deferred is not None
                else None
            ),
            pending=pending,
        )

    def result(
        self,
        session: Session,
        decision_id: UUID,
        rules: IntentRules,
        execution_time_ms: int,
        branch: str | None = None,
    ) -> MessageResult:
        """The caller's answer, with ``session`` as the turn left it (the ``branch``'s
        content and version when the turn was written to a branch)."""
        fallback, handed_to = self.fallback, self.handed_to
        return MessageResult(
            decision_id=decision_id,
            session_id=session.session_id,
            session_version=session.version,
            response=self.reply,
            agent=self.route.agent.name if self.route else None,
            degraded=fallback is not None,
            fallback=fallback.strategy if fallback else None,
            routed_to=handed_to.agent.name if handed_to else None,
            intents=[intent_view(i, rules) for i in self.prio.intents],
            clarification=clarification_view(self.prio),
            pending_actions=session.session_state.get("pending_actions", []),
            progress_percentage=session.progress_percentage,
            output_data=self.output_data,
            next_agent_suggestions=self.suggestions,
            memory_updates=MemoryUpdateOutcome(
                applied=sum(step.memories.applied for step in self.steps),
                rejected=[rejected for step in self.steps for rejected in step.memories.rejected],
            ),
            execution_time_ms=execution_time_ms,
            repaired=self.repaired_from is not None,
            task_id=self.task.task_id if self.task else None,
            task_url=task_url(self.task.task_id) if self.task else None,
            branch=branch,
        )

    def accepted_result(
        self, session: Session, decision_id: UUID, rules: IntentRules, branch: str | None = None
    ) -> MessageAccepted:
        """The caller's 202 (Prefer: respond-async): the task working on the message."""
        task = self.task
        if task is None:  # an accepted turn has its task
            raise RuntimeError("An accepted turn without its task.")
        return MessageAccepted(
            task_id=task.task_id,
            task_url=task_url(task.task_id),
            task_status=task.status,
            decision_id=decision_id,
            session_id=session.session_id,
            session_version=session.version,
            agent=self.route.agent.name if self.route else None,
            intents=[intent_view(i, rules) for i in self.prio.intents],
            pending_actions=session.session_state.get("pending_actions", []),
            branch=branch,
        )


def intent_view(intent: DetectedIntent, rules: IntentRules) -> IntentView:
    """A detected intent as the API shows it, with the agent that serves it."""
    return IntentView(*_fields(intent), agent=rules.intent_agents.get(intent.intent))


def clarification_view(prio: Prioritization) -> ClarificationView | None:
    """The question asked instead of guessing, if one was."""
    if prio.clarification is None:
        return None
    return ClarificationView(
        question=prio.clarification.question,
        options=[i.intent for i in prio.clarification.options],
    )


def decided_intent(intent: DetectedIntent) -> DecidedIntent:
    """A detected intent as a decision (and a task's turn) records it."""
    return DecidedIntent(*_fields(intent))


def _fields(intent: DetectedIntent) -> tuple[str, str, int, list[str], int, list[str], int]:
    """A detected intent's fields in the order DecidedIntent (and IntentView) take them."""
    return (
        intent.intent,
        intent.clause,
        intent.position,
        list(intent.matched),
        intent.base_weight,
        list(intent.modifiers),
        intent.score,
    )
