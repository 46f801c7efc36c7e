"""The coordinator: message -> intents -> priority -> agent -> breaker or fallback ->
memory updates -> session update and decision record. The API, the n8n webhooks and the
pending-action queue all come through here."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from uuid import UUID

from app.auth.principal import Principal
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.coordination import repository as repo
from app.coordination.breakers import BreakerRegistry
from app.coordination.dispatch import AgentClient, CallResult, agent_request, classifier_request
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
from app.coordination.pending import claim_next
from app.coordination.routing import Route, RoutingPolicy, intent_agents
from app.coordination.routing import route as route_intent
from app.coordination.schemas import (
    AgentResponse,
    Analysis,
    AnalyzeRequest,
    BreakerView,
    ClarificationView,
    DecisionPage,
    IntentModifier,
    IntentType,
    IntentTypeWrite,
    IntentView,
    MemoryUpdateOutcome,
    MessageRequest,
    MessageResult,
    ModifierWrite,
    RoutingAgent,
    RuleData,
)
from app.coordination.turn import Turn, TurnStep, apply_turn
from app.db.pool import Database
from app.errors import Conflict, NotFound, SwitchboardError
from app.memories.schemas import Memory, MemoryUpsert, MemoryWrite
from app.memories.service import MemoryService
from app.sessions.schemas import PendingAction, Session, SessionContent
from app.sessions.service import SessionService
from app.sessions.state import content_of, evolve
from app.settings import CoordinationSettings

_CRITICAL_PRIORITIES = frozenset({"high", "urgent"})
# Where fallbacks look for what the user told us about their finances, and how much of it.
PROFILE_CATEGORY = "user_profile"
PROFILE_READ_LIMIT = 50


def _view(intent: DetectedIntent, rules: IntentRules) -> IntentView:
    return IntentView(
        intent=intent.intent,
        clause=intent.clause,
        position=intent.position,
        matched=list(intent.matched),
        base_weight=intent.base_weight,
        modifiers=list(intent.modifiers),
        score=intent.score,
        agent=rules.intent_agents.get(intent.intent),
    )


def session_flags(session: Session) -> set[str]:
    """Context modifiers that follow from the session itself."""
    flags: set[str] = set()
    if session.session_state.get("active_process"):
        flags.add("session_in_progress")
        if session.progress_percentage < 100 and session.priority in _CRITICAL_PRIORITIES:
            flags.add("incomplete_critical_process")
    return flags


def response_text(output: Any) -> str:
    """The user-facing text in an agent's output_data."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        for key in ("response", "message", "text", "answer"):
            value = output.get(key)
            if isinstance(value, str) and value:
                return value
    return "Done."


class CoordinationService:
    """Analyses messages, routes them, calls agents safely, and records every decision."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: CoordinationSettings,
        sessions: SessionService,
        memories: MemoryService,
        breakers: BreakerRegistry,
        agents: AgentClient,
    ) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings
        self._sessions = sessions
        self._memories = memories
        self._breakers = breakers
        self._agents = agents
        self._policy = RoutingPolicy(
            default_agent=settings.default_agent, classifier_agent=settings.classifier_agent
        )
        self._rules: IntentRules | None = None
        self._rule_data = RuleData(weights={}, keywords={}, modifiers={}, cues={})
        self._fallback_data = FallbackData(templates={}, lessons=())
        self._rules_loaded_at = 0.0

    # -- analysis ----------------------------------------------------------------------

    async def analyze(self, data: AnalyzeRequest) -> Analysis:
        """Intents, scores, modifiers and the routing decision; nothing is written."""
        flags = set(data.context_flags)
        if data.session_id is not None:
            flags |= session_flags(await self._sessions.get_session(data.session_id))
        rules, agents = await self._load()
        intents, classifier = await self._classify(data.message, sorted(flags), rules, agents, None)
        prio = self._prioritize(intents, rules, agents)
        found = self._route(prio.primary, agents) if prio.primary is not None else None
        agent = found.agent.name if found else None
        routed_by = found.routed_by if found else None
        snapshot = self._breakers.peek(agent) if agent else None
        return Analysis(
            classifier=classifier,
            context_flags=sorted(flags),
            intents=[_view(i, rules) for i in prio.intents],
            primary=_view(prio.primary, rules) if prio.primary else None,
            secondaries=[_view(i, rules) for i in prio.secondaries],
            clarification=self._clarification_view(prio),
            agent=agent,
            routed_by=routed_by,
            breaker_state=snapshot.state if snapshot else ("closed" if agent else None),
        )

    # -- messages ----------------------------------------------------------------------

    async def handle_message(
        self, session_id: UUID, data: MessageRequest, principal: Principal
    ) -> MessageResult:
        """Coordinate one user message end to end."""
        session = await self._open_session(session_id)
        return await self._coordinate(session, data.text, set(data.context_flags), principal, None)

    async def next_pending(self, session_id: UUID, principal: Principal) -> MessageResult:
        """Process the highest-priority pending action of the session. It is claimed first
        (a versioned write), so two callers never run the same action; the second gets 409."""
        session = await self._open_session(session_id)
        content_of(session)  # a session that cannot be written is refused before any work
        claimed: list[PendingAction] = []

        def claim(current: Session, now: datetime) -> tuple[SessionContent, str]:
            base = content_of(current)
            stale_before = now - self._settings.pending_claim_timeout
            found = claim_next(
                base.session_state.pending_actions, now, stale_before, lambda: str(uuid.uuid4())
            )
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
        return await self._coordinate(session, text, set(), principal, action)

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

    # -- rules and breakers administration ---------------------------------------------

    async def list_intents(self) -> list[IntentType]:
        """Intent types, weights and keywords."""
        async with self._db.connection() as conn:
            return await repo.list_intent_types(conn)

    async def put_intent(self, name: str, data: IntentTypeWrite) -> IntentType:
        """Create or change an intent type and replace its keywords."""
        keywords = sorted({" ".join(k.lower().split()) for k in data.keywords} - {""})
        async with self._db.transaction() as conn:
            await repo.put_intent_type(
                conn, name, data.base_weight, data.description, keywords, self._clock.now()
            )
            types = await repo.list_intent_types(conn)
        self._rules = None
        return next(t for t in types if t.name == name)

    async def list_modifiers(self) -> list[IntentModifier]:
        """Context modifiers, points and cues."""
        async with self._db.connection() as conn:
            return await repo.list_intent_modifiers(conn)

    async def put_modifier(self, name: str, data: ModifierWrite) -> IntentModifier:
        """Change a modifier's points and replace its cues."""
        cues = sorted({" ".join(c.lower().split()) for c in data.cues} - {""})
        async with self._db.transaction() as conn:
            if not await repo.put_intent_modifier(conn, name, data.points, data.description, cues):
                raise NotFound(f"No context modifier {name!r}.")
            modifiers = await repo.list_intent_modifiers(conn)
        self._rules = None
        return next(m for m in modifiers if m.name == name)

    async def breaker(self, name: str) -> BreakerView:
        """An agent's breaker as this replica sees it."""
        agent = await self._agent(name)
        snapshot = self._breakers.breaker_for(agent).snapshot()
        return BreakerView(
            agent=name,
            state=snapshot.state,
            failure_count=snapshot.failure_count,
            opened_at=snapshot.opened_at,
            fail_max=agent.fail_max,
            reset_timeout_ms=agent.reset_timeout_ms,
        )

    async def set_breaker(self, name: str, state: str) -> BreakerView:
        """Isolate an agent (open) or bring it back (closed), on every replica."""
        await self._breakers.isolate(await self._agent(name), state)
        return await self.breaker(name)

    # -- the pipeline ------------------------------------------------------------------

    async def _coordinate(
        self,
        session: Session,
        text: str,
        caller_flags: set[str],
        principal: Principal,
        pending: PendingAction | None,
    ) -> MessageResult:
        started = time.monotonic()
        content_of(session)  # a session that cannot be written is refused before any work
        rules, agents = await self._load()
        flags = sorted(caller_flags | session_flags(session))
        if pending is None:
            intents, classifier = await self._classify(text, flags, rules, agents, session)
            prio = self._prioritize(intents, rules, agents)
        else:
            forced = DetectedIntent(
                intent=pending.type,
                clause=text,
                position=0,
                matched=("pending_action",),
                base_weight=rules.weight(pending.type),
                modifiers=(),
                score=pending.priority_score,
            )
            classifier = "pending_action"
            prio = Prioritization(
                intents=(forced,), primary=forced, secondaries=(), clarification=None
            )

        primary = prio.primary
        route = self._route(primary, agents) if primary is not None else None
        steps: list[_AgentStep] = []
        if route is not None and primary is not None:
            first = await self._run_agent(
                route.agent, session, text, primary, prio.secondaries, flags, principal, agents
            )
            steps.append(first)
            if first.routed is not None:
                # The orchestrator's fallback passes the request on for real: the specialist
                # is called through its own breaker, and its answer (or its own fallback)
                # is what the user gets after the routing note.
                handoff = first.routed
                steps.append(
                    await self._run_agent(
                        handoff.agent, session, text, handoff.intent, (), flags, principal, agents
                    )
                )

        if prio.clarification is not None:
            reply = prio.clarification.question
        elif steps:
            reply = " ".join(step.reply for step in steps)
        else:
            reply = "No agent is available for this request."
        first_step = steps[0] if steps else None
        last_step = steps[-1] if steps else None
        fallback = first_step.fallback if first_step else None
        response = last_step.response if last_step else None
        output_data = (
            response.output_data
            if response
            else (last_step.fallback.data if last_step and last_step.fallback else None)
        )
        suggestions = response.next_agent_suggestions if response else []
        routed_to = steps[1].agent.name if len(steps) > 1 else None
        outcome = (
            "clarification" if prio.clarification else "agent" if fallback is None else "fallback"
        )
        decision: dict[str, Any] = {
            "session_id": session.session_id,
            "message": text,
            "context_flags": flags,
            "classifier": classifier,
            "intents": [_intent_json(i) for i in prio.intents],
            "primary_intent": primary.intent if primary else None,
            "chosen_agent": route.agent.name if route else None,
            "routed_by": route.routed_by if route else None,
            "breaker_state": first_step.breaker_state if first_step else None,
            "outcome": outcome,
            "fallback": fallback.strategy if fallback else None,
            "degraded": fallback is not None,
            "attempts": first_step.call.attempts if first_step else 0,
            "error": first_step.call.error if first_step else None,
            "response": {
                "text": reply,
                "output_data": output_data,
                "next_agent_suggestions": suggestions,
                "routed_to": _routed_json(steps[1]) if routed_to else None,
            },
            "execution_time_ms": int((time.monotonic() - started) * 1000),
            "created_by": principal.name,
        }

        known = {a.name for a in agents}
        # What the routing found besides the intent it passed on waits in the queue.
        secondaries = prio.secondaries + (
            first_step.routed.others if first_step and first_step.routed else ()
        )
        requeue = None
        if last_step is not None and last_step.fallback and last_step.fallback.pending_action:
            requeue = evolve(
                last_step.fallback.pending_action, priority_score=last_step.intent.score
            )
        turn = Turn(
            primary=primary,
            secondaries=secondaries,
            clarification=prio.clarification is not None,
            reply=reply,
            steps=tuple(
                step.as_turn_step(
                    next_agent=steps[index + 1].agent.name if index + 1 < len(steps) else None,
                    known=known,
                )
                for index, step in enumerate(steps)
            ),
            requeue=requeue,
            pending=pending,
        )

        def mutate(current: Session, now: datetime) -> tuple[SessionContent, str]:
            return apply_turn(content_of(current), now, turn)

        # The decision is stored by the statement that writes the session (same version).
        updated, decision_id = await self._sessions.apply_change(
            session.session_id, principal.name, mutate, read=session, decision=decision
        )
        if decision_id is None:  # the statement writes both or neither
            raise RuntimeError("The session was written without its decision.")
        memory_outcome = MemoryUpdateOutcome(
            applied=sum(step.memories.applied for step in steps),
            rejected=[rejected for step in steps for rejected in step.memories.rejected],
        )
        return MessageResult(
            decision_id=decision_id,
            session_id=updated.session_id,
            session_version=updated.version,
            response=reply,
            agent=route.agent.name if route else None,
            degraded=fallback is not None,
            fallback=fallback.strategy if fallback else None,
            routed_to=routed_to,
            intents=[_view(i, rules) for i in prio.intents],
            clarification=self._clarification_view(prio),
            pending_actions=updated.session_state.get("pending_actions", []),
            progress_percentage=updated.progress_percentage,
            output_data=output_data,
            next_agent_suggestions=suggestions,
            memory_updates=memory_outcome,
            execution_time_ms=int((time.monotonic() - started) * 1000),
        )

    async def _run_agent(
        self,
        agent: RoutingAgent,
        session: Session,
        text: str,
        intent: DetectedIntent,
        secondaries: tuple[DetectedIntent, ...],
        flags: list[str],
        principal: Principal,
        agents: list[RoutingAgent],
    ) -> _AgentStep:
        """Call one agent through its breaker; its memory updates if it answered, else its
        rule-based fallback (for ``direct_agent_routing``, with the agent it passes to)."""
        breaker = self._breakers.breaker_for(agent)
        request = agent_request(agent, session, text, intent, secondaries, flags, str(uuid.uuid4()))
        call = await self._agents.call(agent, breaker, request)
        state = breaker.snapshot().state
        if call.ok and call.response is not None:
            memories = await self._apply_memory_updates(agent, session, call.response)
            return _AgentStep(agent, intent, call, None, memories, state)
        routed = None
        if agent.fallback_strategy == "direct_agent_routing":
            routed = self._direct_route_target(agent, intent, secondaries, text, flags, agents)
        fallback = await self._fallback(agent, session, text, intent, principal, routed)
        return _AgentStep(agent, intent, call, fallback, MemoryUpdateOutcome(), state, routed)

    def _direct_route_target(
        self,
        failed: RoutingAgent,
        intent: DetectedIntent,
        secondaries: tuple[DetectedIntent, ...],
        text: str,
        flags: list[str],
        agents: list[RoutingAgent],
    ) -> _Handoff | None:
        """Where ``direct_agent_routing`` passes a request the failed agent (the
        orchestrator) could not route: the highest-priority intent the keyword rules find
        whose route is another agent, one that does not route onward itself (no chains).
        The other intents they find, not already queued, are queued. None: nobody to pass
        it to."""
        rules = self._rules
        if rules is None:  # _load ran before any agent call of this message
            return None
        found = self._prioritize(detect_intents(text, rules, flags), rules, agents).intents
        taken = {intent.intent, *(queued.intent for queued in secondaries)}
        for index, candidate in enumerate(found):
            target = self._route(candidate, agents)
            if (
                target is not None
                and target.agent.name != failed.name
                and target.agent.fallback_strategy != "direct_agent_routing"
            ):
                others = tuple(
                    other
                    for other in found[index + 1 :]
                    if other.intent not in taken and other.matched
                )
                return _Handoff(target.agent, candidate, others)
        return None

    async def _classify(
        self,
        text: str,
        flags: list[str],
        rules: IntentRules,
        agents: list[RoutingAgent],
        session: Session | None,
    ) -> tuple[list[DetectedIntent], str]:
        """The AI classifier when configured and healthy, else the keyword rules."""
        classifier = next(
            (
                a
                for a in agents
                if a.name == self._settings.classifier_agent and a.enabled and a.url
            ),
            None,
        )
        if classifier is None:
            return detect_intents(text, rules, flags), "rules"
        request = classifier_request(
            classifier, session, text, rules.base_weights, flags, str(uuid.uuid4())
        )
        call = await self._agents.call(classifier, self._breakers.breaker_for(classifier), request)
        output = call.response.output_data if call.ok and call.response else None
        detected = classifier_intents(output, text, rules, flags)
        if detected:
            return detected, f"agent:{classifier.name}"
        return detect_intents(
            text, rules, flags
        ), "rules (classifier unavailable: keyword_based_intent_detection)"

    def _route(self, intent: DetectedIntent, agents: list[RoutingAgent]) -> Route | None:
        return route_intent(intent, agents, self._policy)

    def _prioritize(
        self, intents: list[DetectedIntent], rules: IntentRules, agents: list[RoutingAgent]
    ) -> Prioritization:
        """The seed's ranking, availability included: an intent whose agent's breaker is
        refusing calls gets the agent_unavailable modifier, so another agent's intent can
        go first while it waits in the queue (the decision shows the modifier)."""
        down = set()
        for found in intents:
            target = self._route(found, agents)
            if target is not None and self._breakers.breaker_for(target.agent).refusing():
                down.add(found.intent)
        ranked = with_agent_availability(intents, rules, down)
        return prioritize(ranked, rules, self._settings.clarification_margin)

    async def _fallback(
        self,
        agent: RoutingAgent,
        session: Session,
        text: str,
        primary: DetectedIntent,
        principal: Principal,
        routed: _Handoff | None,
    ) -> FallbackResult:
        """The failed agent's rule-based answer. What it reads of the user's memories, it
        reads as ``principal`` (whoever sent the message and sees the answer)."""
        strategy = agent.fallback_strategy or ""

        async def read_profile() -> list[Memory]:
            async with self._db.connection() as conn:
                return await self._memories.read_user_category(
                    conn,
                    session.user_id,
                    PROFILE_CATEGORY,
                    principal,
                    purpose=f"fallback:{strategy}",
                    limit=PROFILE_READ_LIMIT,
                )

        ctx = FallbackContext(
            strategy=strategy,
            text=text,
            intent=primary.intent,
            failed_agent=agent.name,
            user_id=session.user_id,
            now=self._clock.now(),
            read_profile=read_profile,
            routed_agent=routed.agent.name if routed else None,
            routed_intent=routed.intent.intent if routed else None,
            lessons=self._fallback_data.lessons,
        )
        return await run_fallback(ctx, self._fallback_data.templates)

    async def _apply_memory_updates(
        self, agent: RoutingAgent, session: Session, response: AgentResponse
    ) -> MemoryUpdateOutcome:
        """Store what the agent asked to remember, under the agent's own access rules."""
        if not response.memory_updates:
            return MemoryUpdateOutcome()
        principal = Principal(kind="agent", name=agent.name, roles=frozenset(agent.roles))
        applied = 0
        rejected: list[dict[str, Any]] = []
        for index, update in enumerate(response.memory_updates):
            session_id = session.session_id if update.scope == "session" else None
            try:
                if update.key is not None and update.category is not None:
                    await self._memories.upsert_by_key(
                        MemoryUpsert(
                            user_id=session.user_id,
                            session_id=session_id,
                            category=update.category,
                            key=update.key,
                            memory_type=update.memory_type,
                            content=update.content,
                            access_level=update.access_level,
                        ),
                        None,
                        False,
                        principal,
                    )
                else:
                    await self._memories.write(
                        [
                            MemoryWrite(
                                user_id=session.user_id,
                                session_id=session_id,
                                memory_type=update.memory_type,
                                category=update.category,
                                key=update.key,
                                content=update.content,
                                access_level=update.access_level,
                            )
                        ],
                        principal,
                        batch=False,
                    )
                applied += 1
            except (SwitchboardError, ValueError) as exc:
                status = exc.status if isinstance(exc, SwitchboardError) else 422
                rejected.append({"index": index, "status": status, "detail": str(exc)})
        return MemoryUpdateOutcome(applied=applied, rejected=rejected)

    # -- helpers -----------------------------------------------------------------------

    async def _open_session(self, session_id: UUID) -> Session:
        session = await self._sessions.get_session(session_id)
        if session.status in ("completed", "expired"):
            raise Conflict(
                f"Session {session_id} is {session.status}.", session_status=session.status
            )
        return session

    async def _agent(self, name: str) -> RoutingAgent:
        async with self._db.connection() as conn:
            agents = await repo.routing_agents(conn)
        agent = next((a for a in agents if a.name == name), None)
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return agent

    async def _load(self) -> tuple[IntentRules, list[RoutingAgent]]:
        """The routing agents (always fresh) and the intent rules (cached briefly, with the
        fallbacks' wording: reference data both)."""
        async with self._db.connection() as conn:
            agents = await repo.routing_agents(conn)
            fresh = time.monotonic() - self._rules_loaded_at < self._settings.rules_cache_seconds
            if self._rules is None or not fresh:
                self._rule_data = await repo.intent_rule_data(conn)
                self._fallback_data = await repo.fallback_data(conn)
                self._rules_loaded_at = time.monotonic()
        serving = intent_agents(agents)
        if self._rules is None or not fresh or self._rules.intent_agents != serving:
            self._rules = self._rule_data.rules(serving)
        return self._rules, agents

    @staticmethod
    def _clarification_view(prio: Prioritization) -> ClarificationView | None:
        if prio.clarification is None:
            return None
        return ClarificationView(
            question=prio.clarification.question,
            options=[i.intent for i in prio.clarification.options],
        )


@dataclass(frozen=True, slots=True)
class _Handoff:
    """Where a direct_agent_routing fallback passes a message: the agent, the intent it
    takes, and the other intents found on the way (queued)."""

    agent: RoutingAgent
    intent: DetectedIntent
    others: tuple[DetectedIntent, ...]


@dataclass(frozen=True, slots=True)
class _AgentStep:
    """One agent call of a turn and what came of it."""

    agent: RoutingAgent
    intent: DetectedIntent
    call: CallResult
    fallback: FallbackResult | None
    memories: MemoryUpdateOutcome
    breaker_state: str
    # Where a direct_agent_routing fallback passes the request.
    routed: _Handoff | None = None

    @property
    def response(self) -> AgentResponse | None:
        """The agent's answer, if it gave one."""
        return self.call.response if self.call.ok else None

    @property
    def reply(self) -> str:
        """What the user reads of this step."""
        if self.response is not None:
            return response_text(self.response.output_data)
        return self.fallback.text if self.fallback else ""

    def as_turn_step(self, *, next_agent: str | None, known: set[str]) -> TurnStep:
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
        )


def _routed_json(step: _AgentStep) -> dict[str, Any]:
    """The decision's record of where direct_agent_routing passed a message."""
    return {
        "agent": step.agent.name,
        "intent": step.intent.intent,
        "outcome": "agent" if step.response is not None else "fallback",
        "fallback": step.fallback.strategy if step.fallback else None,
        "attempts": step.call.attempts,
        "error": step.call.error,
        "breaker_state": step.breaker_state,
    }


def _intent_json(intent: DetectedIntent) -> dict[str, Any]:
    return {
        "intent": intent.intent,
        "clause": intent.clause,
        "position": intent.position,
        "matched": list(intent.matched),
        "base_weight": intent.base_weight,
        "modifiers": list(intent.modifiers),
        "score": intent.score,
    }
