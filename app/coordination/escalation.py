"""Next step and manual intervention: the next-step decision made after each agent result
and each failure (its counters read from the session's durable record), the escalation it
may ask for, and a person's resolution.

Escalating is one SQL function, ``session_escalate`` (schema.sql): the session becomes
``escalated`` (a new version), the decision records why with the context (what failed, how
often, the last errors), and the event ``session.escalated`` is written with them. A task's
dead letter calls the same function. A failure that asks for a person while the session
already waits for one is recorded the same way (a decision on its current version, the
event with ``already_escalated``), so the person sees every failure, not only the first.
While a session is escalated nothing processes it: its messages and queued actions get 409
(CoordinationService), the task workers leave its tasks queued (``agent_task_held`` in the
claim), and time does not idle or expire it (``session_may_lapse``).
``POST /v1/sessions/{id}/resolve`` ends it: active again (a new version), the resolution in
the decision log, the event ``session.resolved``, and the workers woken to run the held
tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import msgspec

from app.auth.principal import INTEGRATION_ROLE, Principal
from app.clock import Clock
from app.coordination import repository as repo
from app.coordination.next_step import (
    MANUAL_INTERVENTION,
    Event,
    Facts,
    Limits,
    NextStep,
    NextStepRule,
    PriorCounts,
    count,
    decide,
)
from app.coordination.schemas import NextStepRecord, Resolution
from app.db.pool import Connection, Database
from app.errors import Conflict, Forbidden, NotFound
from app.sessions import repository as sessions_repo
from app.sessions.schemas import PendingAction, Session
from app.settings import CoordinationSettings, SessionSettings
from app.tracing import current_trace_id

logger = logging.getLogger("switchboard.coordination")

ESCALATED = "escalated"
RESOLVE_PATH = "/v1/sessions/{session_id}/resolve"


@dataclass(frozen=True, slots=True)
class StepEvent:
    """What just happened to a session, as the next-step decision reads it: the event,
    its step, and the session as the event leaves it."""

    event: Event
    intent: str | None
    agent: str | None
    # Why the step failed (a fallback's call error), None when it did not.
    error: str | None
    # The turn passed the request from one agent to another.
    handed_off: bool
    # The registered agent the answer suggested next, if another.
    suggested: str | None
    progress_before: int
    progress_after: int
    pending_actions: Sequence[PendingAction]


@dataclass(frozen=True, slots=True)
class Decided:
    """A next-step decision and what an escalation it asks for records."""

    step: NextStep
    prior: PriorCounts

    @property
    def record(self) -> NextStepRecord:
        """The decision as the log stores it."""
        return msgspec.convert(msgspec.to_builtins(self.step), NextStepRecord)

    @property
    def escalates(self) -> bool:
        """The decision asks for a person."""
        return self.step.outcome == MANUAL_INTERVENTION

    def context(self, *, task_id: UUID | None = None) -> dict[str, Any]:
        """Why a person is needed: what failed, how often, the last errors, the limits
        (the same keys as a dead letter's, written by SQL)."""
        inputs = self.step.inputs
        facts = inputs.facts
        errors = list(self.prior.last_errors)
        if facts.error is not None and (not errors or errors[0] != facts.error):
            errors.insert(0, facts.error)
        return {
            "event": inputs.event,
            "rule": self.step.rule,
            "what_failed": {
                "intent": facts.intent,
                "agent": facts.agent,
                "task_id": str(task_id) if task_id else None,
                "error": facts.error,
            },
            "how_often": msgspec.to_builtins(inputs.counters),
            "limits": msgspec.to_builtins(inputs.limits),
            "last_errors": errors[:5],
        }


class EscalationService:
    """Decides the next step, escalates, and resolves."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: CoordinationSettings,
        sessions: SessionSettings,
    ) -> None:
        self._db = database
        self._clock = clock
        self._limits = Limits(
            max_step_retries=settings.max_step_retries,
            max_consecutive_fallbacks=settings.max_consecutive_fallbacks,
            max_handoffs_without_progress=settings.max_handoffs_without_progress,
            max_seconds_without_progress=int(settings.max_age_without_progress.total_seconds()),
        )
        self._keep_alive = sessions.default_ttl

    async def decide(
        self, session_id: UUID, happened: StepEvent, rules: Sequence[NextStepRule]
    ) -> Decided:
        """The next step after ``happened``, its counters read from the session's record."""
        async with self._db.connection() as conn:
            prior = await repo.next_step_counters(
                conn, session_id, happened.intent, happened.agent, self._clock.now()
            )
        counters = count(
            prior,
            happened.event,
            handed_off=happened.handed_off,
            progressed=happened.progress_after > happened.progress_before,
        )
        facts = Facts(
            intent=happened.intent,
            agent=happened.agent,
            handoff_suggested=happened.suggested,
            queue_waiting=sum(1 for a in happened.pending_actions if a.status == "pending"),
            progress_percentage=happened.progress_after,
            error=happened.error,
        )
        return Decided(decide(rules, happened.event, counters, self._limits, facts), prior)

    async def escalate(
        self,
        session_id: UUID,
        actor: str,
        decided: Decided,
        *,
        task_id: UUID | None = None,
    ) -> UUID | None:
        """Mark the session escalated with why (session_escalate), or, when it already
        waits for a person, record this failure too (a decision and session.escalated on
        its current version); the decision's id, or None when the session was neither
        active, idle nor escalated, or a person resolved it after the decision's counters
        were read (they start again there)."""
        step = decided.step
        facts = step.inputs.facts
        why = f"{step.rule}: {step.reason}"
        if facts.intent or facts.agent:
            why += f" ({facts.intent or 'no intent'} -> {facts.agent or 'nobody'})"
        async with self._db.transaction() as conn:
            # The row lock orders this after a resolution that is committing, or before it.
            await sessions_repo.lock_session(conn, session_id)
            escalated = await repo.escalate_session(
                conn,
                session_id,
                actor,
                why,
                decided.context(task_id=task_id),
                msgspec.to_builtins(step),
                self._clock.now(),
                current_trace_id(),
                task_id,
                decided.prior.resolved_at,
            )
        if escalated is not None:
            logger.warning("session %s escalated: %s", session_id, why)
        return escalated

    async def resolve(self, session_id: UUID, note: str, principal: Principal) -> Resolution:
        """A person's resolution: the session active again, recorded, announced; its held
        tasks run. 403 unless admin or coordination_manager, 404 unknown, 409 not escalated."""
        if not principal.has_role(INTEGRATION_ROLE):
            raise Forbidden(
                "Resolving an escalation needs the admin key or a coordination_manager key."
            )
        now = self._clock.now()
        async with self._db.transaction() as conn:
            latest = await repo.latest_escalation(conn, session_id)
            escalation: dict[str, Any] = (
                {
                    "decision_id": str(latest.decision_id),
                    "reason": latest.message,
                    "escalated_at": latest.created_at.isoformat(),
                }
                if latest is not None
                else {}
            )
            resolved = await repo.resolve_session(
                conn,
                session_id,
                principal.name,
                note,
                now,
                escalation,
                current_trace_id(),
                self._keep_alive,
            )
            if resolved is None:
                await _not_escalated(conn, session_id)
            await repo.wake_workers(conn)
        assert resolved is not None
        version, decision_id = resolved
        return Resolution(
            session_id=session_id,
            session_version=version,
            status="active",
            decision_id=decision_id,
            escalation_decision_id=latest.decision_id if latest else None,
            escalation_reason=latest.message if latest else None,
            note=note,
            resolved_by=principal.name,
        )


async def _not_escalated(conn: Connection, session_id: UUID) -> None:
    """404 for an unknown session, else 409 naming its status."""
    session = await sessions_repo.get_session(conn, session_id)
    if session is None:
        raise NotFound(f"No session {session_id}.")
    raise Conflict(
        f"Session {session_id} is {session.status}, not escalated: there is nothing to resolve.",
        session_status=session.status,
    )


def refuse_if_escalated(session: Session) -> None:
    """409 for work sent to a session that waits for a person."""
    if session.status == ESCALATED:
        raise Conflict(
            f"Session {session.session_id} is escalated and waits for a person: nothing is "
            "processed until it is resolved (POST "
            f"{RESOLVE_PATH.format(session_id=session.session_id)}).",
            session_status=ESCALATED,
            resolve_url=RESOLVE_PATH.format(session_id=session.session_id),
        )
