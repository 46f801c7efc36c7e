"""The coordinator: message -> intents -> priority -> agent -> breaker or fallback ->
memory updates -> session update and decision record. The API, the n8n webhooks and the
pending-action queue all come through here."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from typing import Any
from uuid import UUID

from app.auth.principal import Principal
from app.clock import Clock
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.coordination import repository as repo
from app.coordination.breakers import BreakerRegistry
from app.coordination.dispatch import AgentClient, CallResult
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
    detect_intents,
    prioritize,
)
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
)
from app.coordination.turn import Turn, apply_turn
from app.db.pool import Database
from app.errors import Conflict, NotFound, SwitchboardError
from app.memories.schemas import Memory, MemoryUpsert, MemoryWrite
from app.memories.service import MemoryService
from app.sessions.schemas import PendingAction, Session, SessionContent
from app.sessions.service import SessionService
from app.sessions.state import content_of
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
        self._rules: IntentRules | None = None
        self._rules_data: dict[str, Any] = {}
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
        prio = prioritize(intents, rules, self._settings.clarification_margin)
        agent, routed_by = (None, None)
        if prio.primary is not None:
            chosen, routed_by = self._route(prio.primary.intent, data.message, agents)
            agent = chosen.name if chosen else None
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
        """Process the highest-priority pending action of the session."""
        session = await self._open_session(session_id)
        pending = [
            (index, action)
            for index, action in enumerate(content_of(session).session_state.pending_actions)
            if action.status == "pending"
        ]
        if not pending:
            raise Conflict(f"Session {session_id} has no pending actions.")
        _, action = max(pending, key=lambda item: (item[1].priority_score, -item[0]))
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
        rules, agents = await self._load()
        flags = sorted(caller_flags | session_flags(session))
        if pending is None:
            intents, classifier = await self._classify(text, flags, rules, agents, session)
            prio = prioritize(intents, rules, self._settings.clarification_margin)
        else:
            forced = DetectedIntent(
                intent=pending.type,
                clause=text,
                position=0,
                matched=("pending_action",),
                base_weight=rules.base_weights.get(pending.type, rules.default_weight),
                modifiers=(),
                score=pending.priority_score,
            )
            classifier = "pending_action"
            prio = Prioritization(
                intents=(forced,), primary=forced, secondaries=(), clarification=None
            )

        chosen: RoutingAgent | None = None
        routed_by: str | None = None
        call: CallResult | None = None
        fallback: FallbackResult | None = None
        memory_outcome = MemoryUpdateOutcome()
        breaker_state: str | None = None
        if prio.primary is not None:
            chosen, routed_by = self._route(prio.primary.intent, text, agents)
        if chosen is not None and prio.primary is not None:
            breaker = self._breakers.breaker_for(chosen)
            call = await self._agents.call(
                chosen,
                breaker,
                self._request(chosen, session, text, prio, flags),
            )
            breaker_state = breaker.snapshot().state
            if call.ok and call.response is not None:
                memory_outcome = await self._apply_memory_updates(chosen, session, call.response)
            else:
                fallback = await self._fallback(
                    chosen, session, text, prio.primary, rules, agents, principal
                )

        if prio.clarification is not None:
            reply = prio.clarification.question
        elif call is not None and call.ok and call.response is not None:
            reply = response_text(call.response.output_data)
        elif fallback is not None:
            reply = fallback.text
        else:
            reply = "No agent is available for this request."
        outcome = (
            "clarification" if prio.clarification else "agent" if fallback is None else "fallback"
        )
        degraded = fallback is not None
        response = call.response if call is not None and call.ok else None
        elapsed_ms = int((time.monotonic() - started) * 1000)

        decision: dict[str, Any] = {
            "session_id": session.session_id,
            "message": text,
            "context_flags": flags,
            "classifier": classifier,
            "intents": [_intent_json(i) for i in prio.intents],
            "primary_intent": prio.primary.intent if prio.primary else None,
            "chosen_agent": chosen.name if chosen else None,
            "routed_by": routed_by,
            "breaker_state": breaker_state,
            "outcome": outcome,
            "fallback": fallback.strategy if fallback else None,
            "degraded": degraded,
            "attempts": call.attempts if call else 0,
            "error": call.error if call else None,
            "response": {
                "text": reply,
                "output_data": response.output_data
                if response
                else (fallback.data if fallback else None),
                "next_agent_suggestions": response.next_agent_suggestions if response else [],
            },
            "execution_time_ms": elapsed_ms,
            "created_by": principal.name,
        }

        suggested = response.next_agent_suggestions if response else []
        known = {a.name for a in agents}
        turn = Turn(
            primary=prio.primary,
            secondaries=prio.secondaries,
            clarification=prio.clarification is not None,
            reply=reply,
            agent=chosen.name if chosen else None,
            answered=response is not None,
            output_data=response.output_data if response else None,
            # Only a registered agent is a next step; the answer shows every suggestion.
            next_agent=next((name for name in suggested if name in known), None),
            fallback=fallback.strategy if fallback else None,
            requeue=fallback.pending_action if fallback else None,
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
        return MessageResult(
            decision_id=decision_id,
            session_id=updated.session_id,
            session_version=updated.version,
            response=reply,
            agent=chosen.name if chosen else None,
            degraded=degraded,
            fallback=fallback.strategy if fallback else None,
            intents=[_view(i, rules) for i in prio.intents],
            clarification=self._clarification_view(prio),
            pending_actions=updated.session_state.get("pending_actions", []),
            progress_percentage=updated.progress_percentage,
            output_data=decision["response"]["output_data"],
            next_agent_suggestions=decision["response"]["next_agent_suggestions"],
            memory_updates=memory_outcome,
            execution_time_ms=int((time.monotonic() - started) * 1000),
        )

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
        request = {
            "agent_name": classifier.name,
            "request_id": str(uuid.uuid4()),
            "user_id": str(session.user_id) if session else None,
            "session_id": str(session.session_id) if session else None,
            "input_data": {"message": text, "intents": sorted(rules.base_weights)},
            "context": {"context_flags": flags},
            "priority": 0,
            "timeout_ms": classifier.timeout_ms,
        }
        call = await self._agents.call(classifier, self._breakers.breaker_for(classifier), request)
        detected = _classifier_intents(call, text, flags, rules) if call.ok else None
        if detected:
            return detected, f"agent:{classifier.name}"
        return detect_intents(
            text, rules, flags
        ), "rules (classifier unavailable: keyword_based_intent_detection)"

    def _route(
        self, intent: str, text: str, agents: list[RoutingAgent]
    ) -> tuple[RoutingAgent | None, str | None]:
        """The agent for an intent; else the best skill match; else the default agent."""
        serving = [a for a in agents if a.enabled and intent in a.intents]
        if serving:
            serving.sort(key=lambda a: (a.url is None, a.name))
            return serving[0], "intent"
        words = set(text.lower().split())
        best, best_hits = None, 0
        for agent in agents:
            if not agent.enabled or agent.name == self._settings.classifier_agent:
                continue
            tags = {str(tag).lower() for skill in agent.skills for tag in skill.get("tags", [])}
            hits = len(tags & words)
            if hits > best_hits:
                best, best_hits = agent, hits
        if best is not None:
            return best, "skill"
        default = next(
            (a for a in agents if a.name == self._settings.default_agent and a.enabled), None
        )
        return (default, "default") if default else (None, None)

    def _request(
        self,
        agent: RoutingAgent,
        session: Session,
        text: str,
        prio: Prioritization,
        flags: list[str],
    ) -> dict[str, Any]:
        primary = prio.primary
        return {
            "agent_name": agent.name,
            "request_id": str(uuid.uuid4()),
            "user_id": str(session.user_id),
            "session_id": str(session.session_id),
            "input_data": {
                "message": text,
                "intent": primary.intent if primary else None,
                "clause": primary.clause if primary else text,
                "secondary_intents": [i.intent for i in prio.secondaries],
            },
            "context": {
                "session_type": session.session_type,
                "session_state": session.session_state,
                "current_agent": session.current_agent,
                "progress_percentage": session.progress_percentage,
                "context_flags": flags,
            },
            "priority": primary.score if primary else 0,
            "timeout_ms": agent.timeout_ms,
        }

    async def _fallback(
        self,
        agent: RoutingAgent,
        session: Session,
        text: str,
        primary: DetectedIntent,
        rules: IntentRules,
        agents: list[RoutingAgent],
        principal: Principal,
    ) -> FallbackResult:
        """The failed agent's rule-based answer. What it reads of the user's memories, it
        reads as ``principal`` (whoever sent the message and sees the answer)."""
        routed_agent = routed_intent = None
        if agent.fallback_strategy == "direct_agent_routing":
            for candidate in detect_intents(text, rules, []):
                target, _ = self._route(candidate.intent, text, agents)
                if target is not None and target.name != agent.name:
                    routed_agent, routed_intent = target.name, candidate.intent
                    break
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
            routed_agent=routed_agent,
            routed_intent=routed_intent,
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
                data = await repo.intent_rule_data(conn)
                self._rules_data = data
                self._fallback_data = await repo.fallback_data(conn)
                self._rules_loaded_at = time.monotonic()
            else:
                data = self._rules_data
        intent_agents: dict[str, str] = {}
        for agent in sorted(agents, key=lambda a: (a.url is None, a.name)):
            if agent.enabled:
                for intent in agent.intents:
                    intent_agents.setdefault(intent, agent.name)
        if self._rules is None or not fresh or self._rules.intent_agents != intent_agents:
            self._rules = IntentRules(
                base_weights=data["weights"],
                keywords=data["keywords"],
                modifiers=data["modifiers"],
                cues=data["cues"],
                intent_agents=intent_agents,
            )
        return self._rules, agents

    @staticmethod
    def _clarification_view(prio: Prioritization) -> ClarificationView | None:
        if prio.clarification is None:
            return None
        return ClarificationView(
            question=prio.clarification.question,
            options=[i.intent for i in prio.clarification.options],
        )


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


def _classifier_intents(
    call: CallResult, text: str, flags: list[str], rules: IntentRules
) -> list[DetectedIntent] | None:
    """Intents an AI classifier returned, scored by our rules; None if unusable."""
    output = call.response.output_data if call.response else None
    raw = output.get("intents") if isinstance(output, dict) else None
    if not isinstance(raw, list) or not raw:
        return None
    detected: list[DetectedIntent] = []
    for position, item in enumerate(raw):
        name = item.get("intent") if isinstance(item, dict) else item
        if not isinstance(name, str) or name not in rules.base_weights:
            continue
        clause = item.get("clause") if isinstance(item, dict) else None
        clause = clause if isinstance(clause, str) and clause.strip() else text
        cues = {m for found in detect_intents(clause, rules, flags) for m in found.modifiers}
        base = rules.base_weights[name]
        points = sum(rules.modifiers.get(m, 0) for m in cues)
        detected.append(
            DetectedIntent(
                intent=name,
                clause=clause.strip(),
                position=position,
                matched=("classifier",),
                base_weight=base,
                modifiers=tuple(sorted(cues)),
                score=min(base + points, rules.score_cap),
            )
        )
    unique: dict[str, DetectedIntent] = {}
    for found in detected:
        unique.setdefault(found.intent, found)
    return list(unique.values()) or None
