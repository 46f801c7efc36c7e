"""The coordinator: message -> intents -> priority -> agent (a durable task, waited for up
to the wait budget) or fallback -> memory updates -> session update and decision record.
The API, the n8n webhooks and the pending-action queue all come through here.

The service orchestrates; the rules live in modules of their own: ``rules`` (the intent
rules and fallback wording, as stored and cached), ``intents`` (detection, scoring,
ranking), ``context`` (the session's own flags), ``routing`` (which agent, and
where a failed orchestrator passes a request), ``dispatch`` (calling an agent),
``fallbacks`` (answering without it), ``memory_updates``, ``outcome`` (the decision, the
session turn and the answer, made of what happened), ``turn`` (the session update),
``pending`` (the queue), ``prefer`` (the wait budget), ``tasks`` (an agent step as a task,
and the wait), ``completion`` (a task's late answer, applied to the session), ``next_step``
(what the session does next, by rules as data), ``escalation`` (the next step's
counters, manual intervention and its resolution) and ``target`` (where a turn is read
and written: the session itself or one of its branches).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

import msgspec

from app.agents.directory import AgentDirectory
from app.agents.schemas import Agent
from app.auth.principal import Principal
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.coordination import repository as repo
from app.coordination.breaker import AsyncCircuitBreaker
from app.coordination.breakers import BreakerRegistry
from app.coordination.context import session_flags
from app.coordination.dispatch import AgentClient, CallResult, agent_request, classifier_request
from app.coordination.escalation import EscalationService, StepEvent, refuse_if_escalated
from app.coordination.fallbacks import (
    FallbackContext,
    FallbackData,
    FallbackResult,
    run_fallback,
)
from app.coordination.intents import (
    DetectedIntent,
    IntentRules,
    Prioritization,
    classifier_intents,
    detect_intents,
    prioritize,
    with_agent_availability,
)
from app.coordination.outcome import (
    AgentStep,
    TurnOutcome,
    clarification_view,
    decided_intent,
    intent_view,
)
from app.coordination.pending import as_prioritization, claim_next
from app.coordination.prefer import WaitBudget, WaitPreference, wait_budget
from app.coordination.routing import (
    Handoff,
    Route,
    RoutingPolicy,
    classifier_agent,
    handoff,
    intent_agents,
    route,
)
from app.coordination.rules import Rules, RulesService
from app.coordination.schemas import (
    AgentRequest,
    Analysis,
    AnalyzeRequest,
    DecisionPage,
    MemoryUpdateOutcome,
    MessageAccepted,
    MessageRequest,
    MessageResult,
)
from app.coordination.target import TurnTarget, TurnTargets
from app.coordination.tasks import (
    AgentTasks,
    TaskTurn,
    Waited,
    continuation_of,
    read_input,
    task_input,
    task_priority,
)
from app.coordination.turn import Turn, apply_turn
from app.db.pool import BeforeCommit, Connection, Database
from app.errors import Conflict
from app.memories.schemas import Memory
from app.sessions.schemas import PendingAction, Session, SessionContent
from app.sessions.service import SessionService, require_open
from app.sessions.state import content_of, evolve
from app.settings import CoordinationSettings
from app.tasks.schemas import NewTask, Task
from app.tracing import current_trace_id

# Where fallbacks look for what the user told us about their finances, and how much of it.
PROFILE_CATEGORY = "user_profile"
PROFILE_READ_LIMIT = 50


@dataclass(frozen=True, slots=True)
class _Message:
    """One message (or queued action) being coordinated: what each step of it reads."""

    # Where the turn is written: the session itself or a branch (``session`` shows it).
    target: TurnTarget
    session: Session
    text: str
    flags: list[str]
    principal: Principal
    rules: IntentRules
    fallbacks: FallbackData
    agents: list[Agent]
    classifier: str
    budget: WaitBudget
    # time.monotonic() when the wait budget ends: shared by the routed agent's step and
    # the handoff's.
    deadline: float
    # The queued action the turn processes (POST .../pending/next).
    pending: PendingAction | None = None
    # The session's task that waits for the user's input, which this message answers.
    resume: Task | None = None

    def remaining(self) -> float:
        """Seconds left of the wait budget."""
        return max(0.0, self.deadline - time.monotonic())


class CoordinationService:
    """Analyses messages, routes them, calls agents safely, and records every decision."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: CoordinationSettings,
        sessions: SessionService,
        targets: TurnTargets,
        rules: RulesService,
        breakers: BreakerRegistry,
        agents: AgentClient,
        agent_tasks: AgentTasks,
        escalation: EscalationService,
        directory: AgentDirectory,
    ) -> None:
        self._db = database
        self._directory = directory
        self._clock = clock
        self._settings = settings
        self._sessions = sessions
        self._targets = targets
        self._rules = rules
        self._breakers = breakers
        self._agents = agents
        self._agent_tasks = agent_tasks
        self._escalation = escalation
        self._policy = RoutingPolicy(
            default_agent=settings.default_agent, classifier_agent=settings.classifier_agent
        )

    # -- analysis ----------------------------------------------------------------------

    async def analyze(self, data: AnalyzeRequest) -> Analysis:
        """Intents, scores, modifiers and the routing decision; nothing is written."""
        flags = set(data.context_flags)
        if data.session_id is not None:
            flags |= session_flags(await self._sessions.get_session(data.session_id))
        loaded, agents = await self._load()
        rules = loaded.intents
        intents, classifier = await self._classify(data.message, sorted(flags), rules, agents, None)
        prio = self._prioritize(intents, rules, agents)
        found = route(prio.primary, agents, self._policy) if prio.primary is not None else None
        agent = found.agent.name if found else None
        routed_by = found.routed_by if found else None
        snapshot = self._breakers.peek(agent) if agent else None
        return Analysis(
            classifier=classifier,
            context_flags=sorted(flags),
            intents=[intent_view(i, rules) for i in prio.intents],
            primary=intent_view(prio.primary, rules) if prio.primary else None,
            secondaries=[intent_view(i, rules) for i in prio.secondaries],
            clarification=clarification_view(prio),
            agent=agent,
            routed_by=routed_by,
            breaker_state=snapshot.state if snapshot else ("closed" if agent else None),
        )

    # -- messages ----------------------------------------------------------------------

    def budget(self, prefer: WaitPreference | None = None) -> WaitBudget:
        """How long a message waits for its agent: the caller's ``Prefer`` (capped), else
        the configured default."""
        settings = self._settings
        return wait_budget(
            prefer or WaitPreference(),
            min(settings.wait_default_seconds, settings.wait_max_seconds),
            settings.wait_max_seconds,
        )

    async def handle_message(
        self,
        session_id: UUID,
        data: MessageRequest,
        principal: Principal,
        budget: WaitBudget | None = None,
        branch: str | None = None,
        before_commit: BeforeCommit[MessageResult | MessageAccepted] | None = None,
    ) -> MessageResult | MessageAccepted:
        """Coordinate one user message end to end, waiting for its agent's task up to
        ``budget`` (default: the configured wait); MessageAccepted when the budget says
        respond-async and the task still works. On ``branch``: read from and written to
        that branch of the session (404 unknown, 409 merged), main untouched.
        ``before_commit`` gets the answer inside the transaction that writes the turn (a
        resend's key is sealed so: both commit or neither); an escalation the turn starts
        is written after it, so that answer's ``session_status`` does not show it."""
        target = self._targets.of(session_id, branch)
        session = await target.document()
        refuse_if_escalated(session)  # it waits for a person: nothing is processed
        flags = set(data.context_flags)
        return await self._coordinate(
            target,
            session,
            data.text,
            flags,
            principal,
            None,
            budget or self.budget(),
            before_commit,
        )

    async def next_pending(
        self, session_id: UUID, principal: Principal, budget: WaitBudget | None = None
    ) -> MessageResult | MessageAccepted:
        """Process the highest-priority pending action of the session. It is claimed first
        (a versioned write), so two callers never run the same action; the second gets 409.
        Its agent is called by a task (kind pending_action), waited for like a message's."""
        session = await self._open_session(session_id)
        content_of(session)  # a session that cannot be written is refused before any work
        claimed: list[PendingAction] = []

        def claim(current: Session, now: datetime) -> tuple[SessionContent, str]:
            base = content_of(current)
            stale_before = now - self._settings.pending_claim_timeout
            found = claim_next(base.session_state.pending_actions, now, stale_before, _new_id)
            if found is None:
                raise Conflict(f"Session {session_id} has no pending actions waiting.")
            queue, action = found
            claimed[:] = [action]
            state = evolve(base.session_state, pending_actions=queue)
            return replace(base, session_state=state), f"pending action {action.id} claimed"

        session, _ = await self._sessions.apply_change(
            session_id, principal.name, claim, read=session
        )
        action = claimed[0]
        text = action.description or action.type
        target = self._targets.of(session_id)
        return await self._coordinate(
            target, session, text, set(), principal, action, budget or self.budget()
        )

    async def list_decisions(
        self, session_id: UUID, limit: int, cursor: str | None
    ) -> DecisionPage:
        """A session's decisions, newest first."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            items = await repo.list_decisions(conn, session_id, before, limit + 1)
        if not items:
            await self._sessions.get_session(session_id)  # 404 for an unknown session
        page, next_cursor = cut_page(items, limit, lambda d: (d.created_at, d.decision_id))
        return DecisionPage(items=page, next_cursor=next_cursor)

    # -- the pipeline ------------------------------------------------------------------

    async def _coordinate(
        self,
        target: TurnTarget,
        session: Session,
        text: str,
        caller_flags: set[str],
        principal: Principal,
        pending: PendingAction | None,
        budget: WaitBudget,
        before_commit: BeforeCommit[MessageResult | MessageAccepted] | None = None,
    ) -> MessageResult | MessageAccepted:
        """Classify and rank (or take the claimed action), route, run the agent's task
        and wait for it (or answer with its fallback), then write the session change and
        its decision with one statement (to ``target``: the session or a branch), in one
        transaction with ``before_commit`` when there is one."""
        started = time.monotonic()
        # A session that cannot be written is refused before any work; its typed content
        # (validated once here) is the base the turn is decided and written on.
        base = content_of(session)
        loaded, agents = await self._load()
        rules = loaded.intents
        flags = sorted(caller_flags | session_flags(session))
        resume = None if pending is not None else await self._awaiting_input(session, agents)
        found: Route | None
        if resume is not None:
            # An A2A agent asked the user a question: this message is the answer, and goes
            # to the same agent's task (and the same remote task), not through routing.
            waiting, waiting_agent = resume
            prio, classifier = _answering(waiting, text), "input_required"
            found = Route(waiting_agent, f"input_required:{waiting.task_id}")
        elif pending is None:
            intents, classifier = await self._classify(text, flags, rules, agents, session)
            prio = self._prioritize(intents, rules, agents)
            found = route(prio.primary, agents, self._policy) if prio.primary else None
        else:
            prio, classifier = as_prioritization(pending, text, rules), "pending_action"
            found = route(prio.primary, agents, self._policy) if prio.primary else None
        outcome = TurnOutcome(flags, classifier, prio, found)
        if found is not None:
            msg = _Message(
                target,
                session,
                text,
                flags,
                principal,
                rules,
                loaded.fallbacks,
                agents,
                classifier,
                budget,
                time.monotonic() + budget.seconds,
                pending,
                resume[0] if resume is not None else None,
            )
            outcome = replace(outcome, steps=await self._run(found, prio, msg))
        decision = outcome.decision(
            session.session_id, text, principal.name, _ms_since(started), current_trace_id()
        )
        turn = outcome.turn(pending, {a.name for a in agents})
        # The turn applied once: what the next-step decision reads is what is written
        # when the session is still as read (the common case); a newer one (a race) is
        # validated and the turn applied to it at the write's time.
        applied = apply_turn(base, self._clock.now(), turn)
        # What the session does next, decided on the turn as it will be written; stored
        # with the turn's decision.
        decided = await self._escalation.decide(
            session.session_id,
            self._step_event(session, applied[0], outcome, turn),
            loaded.next_steps,
        )
        next_step = decided.record
        decision = msgspec.structs.replace(decision, next_step=next_step)

        def mutate(current: Session, now: datetime) -> tuple[SessionContent, str]:
            return applied if current is session else apply_turn(content_of(current), now, turn)

        def answer(written: tuple[Session, UUID | None]) -> MessageResult | MessageAccepted:
            updated, decision_id = written
            if decision_id is None:  # the statement writes both or neither
                raise RuntimeError("The session was written without its decision.")
            if outcome.accepted:
                accepted = outcome.accepted_result(updated, decision_id, rules, target.branch)
                return replace(accepted, next_step=next_step)
            result = outcome.result(updated, decision_id, rules, _ms_since(started), target.branch)
            return replace(result, next_step=next_step, session_status=updated.status)

        answered: list[MessageResult | MessageAccepted] = []

        async def commit_with(conn: Connection, written: tuple[Session, UUID | None]) -> None:
            answered[:] = [answer(written)]
            if before_commit is not None:
                await before_commit(conn, answered[0])

        # The decision is stored by the statement that writes the session (same version);
        # what must commit with the turn (a resend's stored answer) runs in its transaction.
        written = await target.write(
            principal.name,
            mutate,
            read=session,
            decision=decision,
            before_commit=commit_with if before_commit is not None else None,
        )
        reply = answered[0] if answered else answer(written)
        if decided.escalates:
            task = outcome.task
            escalated = await self._escalation.escalate(
                session.session_id,
                principal.name,
                decided,
                task_id=task.task_id if task else None,
            )
            if escalated is not None and isinstance(reply, MessageResult):
                reply = replace(reply, session_status="escalated")
        return reply

    def _step_event(
        self, session: Session, after: SessionContent, outcome: TurnOutcome, turn: Turn
    ) -> StepEvent:
        """The turn as the next-step decision reads it (``after``: the session's content
        with the turn applied)."""
        first = outcome.steps[0] if outcome.steps else None
        last = turn.steps[-1] if turn.steps else None
        kind = outcome.kind
        return StepEvent(
            event="answered" if kind == "agent" else kind,
            intent=outcome.prio.primary.intent if outcome.prio.primary else None,
            agent=outcome.route.agent.name if outcome.route else None,
            error=(first.call.error or "fallback") if kind == "fallback" and first else None,
            handed_off=len(outcome.steps) > 1,
            suggested=last.next_agent if last and last.next_agent != last.agent else None,
            progress_before=session.progress_percentage,
            progress_after=after.progress_percentage,
            pending_actions=after.session_state.pending_actions,
        )

    async def _run(
        self, found: Route, prio: Prioritization, msg: _Message
    ) -> tuple[AgentStep, ...]:
        """The routed agent's step and, when its fallback passes the request on, the step
        of the agent it passes it to: called for real, through its own breaker, and its
        answer (or its own fallback's) is what the user gets after the routing note."""
        if prio.primary is None:
            return ()
        kind = "message" if msg.pending is None else "pending_action"
        first = await self._run_agent(
            found.agent, prio.primary, prio.secondaries, msg, kind, found.routed_by
        )
        if first.routed is None:
            return (first,)
        handed = first.routed
        routed_by = f"direct_agent_routing:{found.agent.name}"
        return (
            first,
            await self._run_agent(handed.agent, handed.intent, (), msg, "handoff", routed_by),
        )

    async def _run_agent(
        self,
        agent: Agent,
        intent: DetectedIntent,
        secondaries: tuple[DetectedIntent, ...],
        msg: _Message,
        kind: str,
        routed_by: str | None,
    ) -> AgentStep:
        """Call one agent by a task, waited for within the budget; its memory updates if
        it answered in time, else its rule-based fallback (for ``direct_agent_routing``,
        with the agent it passes to), or nothing yet when the caller asked for a 202."""
        breaker = self._breakers.breaker_for(agent)
        branch, memories = await msg.target.agent_memories(agent)
        request = agent_request(
            agent,
            msg.session,
            msg.text,
            intent,
            secondaries,
            msg.flags,
            _new_id(),
            branch,
            memories,
        )
        waited = None
        if not agent.url and not agent.a2a_url:
            call = CallResult(None, 0, "agent has no url configured", 0)
        elif breaker.refusing() is not None and kind != "pending_action":
            # The fallback answers now, as it would have; what it cannot do waits in the
            # queue, where it becomes a task (kind pending_action) when taken.
            call = CallResult(None, 0, "circuit open", 0)
        else:
            waited = await self._submit(agent, intent, request, msg, kind, routed_by, breaker)
            call = waited.call
        task = waited.task if waited else None
        detached = waited.detached if waited else False
        state = breaker.snapshot().state
        if call.ok and call.response is not None:
            stored = await msg.target.remember(agent, msg.session, call.response)
            return AgentStep(agent, intent, call, None, stored, state, task=task)
        if detached and msg.budget.respond_async:
            # 202: the task's answer is the answer, applied when it comes; no fallback.
            return AgentStep(
                agent, intent, call, None, MemoryUpdateOutcome(), state, task=task, waiting=True
            )
        routed = None
        if agent.fallback_strategy == "direct_agent_routing":
            # What the keyword rules find, ranked, for the orchestrator that could not route.
            found = detect_intents(msg.text, msg.rules, msg.flags)
            ranked = self._prioritize(found, msg.rules, msg.agents).intents
            taken = [intent.intent, *(queued.intent for queued in secondaries)]
            routed = handoff(agent, taken, ranked, msg.agents, self._policy)
        fallback = await self._fallback(agent, intent, routed, msg)
        return AgentStep(
            agent,
            intent,
            call,
            fallback,
            MemoryUpdateOutcome(),
            state,
            routed,
            task=task,
            waiting=detached,
        )

    async def _submit(
        self,
        agent: Agent,
        intent: DetectedIntent,
        request: AgentRequest,
        msg: _Message,
        kind: str,
        routed_by: str | None,
        breaker: AsyncCircuitBreaker,
    ) -> Waited:
        """The agent's task, submitted to run here and waited for within what is left of
        the budget (none while its breaker refuses: the task waits for the breaker)."""
        turn = TaskTurn(
            message=msg.text,
            context_flags=msg.flags,
            classifier=msg.classifier,
            intent=decided_intent(intent),
            routed_by=routed_by,
            pending_action_id=msg.pending.id if msg.pending and kind == "pending_action" else None,
            branch=msg.target.branch,
        )
        new = NewTask(
            agent_name=agent.name,
            kind=kind,
            input=task_input(request, turn),
            session_id=msg.session.session_id,
            user_id=str(msg.session.user_id),
            priority=task_priority(intent.score),
        )
        resume = None
        waiting = msg.resume
        if waiting is not None and waiting.agent_name == agent.name and kind == "message":
            # The same task works again, sending the same remote task and context.
            resume = (waiting, task_input(request, turn, continuation_of(waiting)))
        budget = 0.0 if breaker.refusing() is not None else msg.remaining()
        return await self._agent_tasks.run(
            new, msg.principal.name, request.request_id, budget, agent, resume
        )

    async def _classify(
        self,
        text: str,
        flags: list[str],
        rules: IntentRules,
        agents: list[Agent],
        session: Session | None,
    ) -> tuple[list[DetectedIntent], str]:
        """The AI classifier when configured and healthy, else the keyword rules."""
        classifier = classifier_agent(agents, self._policy)
        if classifier is None:
            return detect_intents(text, rules, flags), "rules"
        request = classifier_request(
            classifier, session, text, rules.base_weights, flags, _new_id()
        )
        call = await self._agents.call(classifier, self._breakers.breaker_for(classifier), request)
        output = call.response.output_data if call.ok and call.response else None
        detected = classifier_intents(output, text, rules, flags)
        if detected:
            return detected, f"agent:{classifier.name}"
        return detect_intents(
            text, rules, flags
        ), "rules (classifier unavailable: keyword_based_intent_detection)"

    def _prioritize(
        self, intents: list[DetectedIntent], rules: IntentRules, agents: list[Agent]
    ) -> Prioritization:
        """The seed's ranking, availability included: an intent whose agent's breaker is
        refusing calls gets the agent_unavailable modifier, so another agent's intent can
        go first while it waits in the queue (the decision shows the modifier)."""
        down = set()
        for found in intents:
            target = route(found, agents, self._policy)
            if target is not None and self._breakers.breaker_for(target.agent).refusing():
                down.add(found.intent)
        ranked = with_agent_availability(intents, rules, down)
        return prioritize(ranked, rules, self._settings.clarification_margin)

    async def _fallback(
        self, agent: Agent, intent: DetectedIntent, routed: Handoff | None, msg: _Message
    ) -> FallbackResult:
        """The failed agent's rule-based answer. What it reads of the user's memories, it
        reads as the message's principal (whoever sent it and sees the answer)."""
        strategy = agent.fallback_strategy or ""

        async def read_profile() -> list[Memory]:
            return await msg.target.read_category(
                msg.session,
                PROFILE_CATEGORY,
                msg.principal,
                f"fallback:{strategy}",
                PROFILE_READ_LIMIT,
            )

        ctx = FallbackContext(
            strategy=strategy,
            text=msg.text,
            intent=intent.intent,
            failed_agent=agent.name,
            user_id=msg.session.user_id,
            now=self._clock.now(),
            read_profile=read_profile,
            routed_agent=routed.agent.name if routed else None,
            routed_intent=routed.intent.intent if routed else None,
            lessons=msg.fallbacks.lessons,
        )
        return await run_fallback(ctx, msg.fallbacks.templates)

    # -- helpers -----------------------------------------------------------------------

    async def _awaiting_input(
        self, session: Session, agents: list[Agent]
    ) -> tuple[Task, Agent] | None:
        """The session's task that waits for the user's input, and its agent, when the
        agent can still be called and the remote task continued; else None (the message is
        routed as any other)."""
        if not any(a.enabled and a.a2a_url for a in agents):
            # Only an enabled A2A agent's task is continued (below): without one, no task
            # can be, and the message costs no query for it.
            return None
        task = await self._agent_tasks.awaiting_input(session.session_id)
        if task is None or task.kind not in ("message", "handoff"):
            return None
        agent = next((a for a in agents if a.name == task.agent_name), None)
        if agent is None or not agent.enabled or not agent.a2a_url:
            return None
        if continuation_of(task) is None:
            return None
        return task, agent

    async def _open_session(self, session_id: UUID) -> Session:
        session = await self._sessions.get_session(session_id)
        require_open(session)
        refuse_if_escalated(session)  # it waits for a person: nothing is processed
        return session

    async def _load(self) -> tuple[Rules, list[Agent]]:
        """The agents (as the table is: ``AgentDirectory`` keeps them until told of a change)
        and the rules (cached briefly by ``RulesService``)."""
        kept = self._directory.kept()
        if kept is not None:
            rules = self._rules.kept(intent_agents(kept))
            if rules is not None:  # both in hand: no connection taken
                return rules, kept
        async with self._db.connection() as conn:
            agents = await self._directory.agents(conn)
            rules = await self._rules.current(conn, intent_agents(agents))
        return rules, agents


def _answering(task: Task, text: str) -> Prioritization:
    """A message answering a task's question, as the turn's only intent: the intent the
    task was asked to handle, with its score (not scored again)."""
    asked = read_input(task).turn.intent
    answer = DetectedIntent(
        intent=asked.intent,
        clause=text,
        position=0,
        matched=("input_required",),
        base_weight=asked.base_weight,
        modifiers=(),
        score=asked.score,
    )
    return Prioritization(intents=(answer,), primary=answer, secondaries=(), clarification=None)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)


def _new_id() -> str:
    return str(uuid.uuid4())
