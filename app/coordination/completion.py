"""A coordinator task that ended after its caller stopped waiting (detached): its answer
applied to the session, and the user told.

The seed's "partial response compilation and user notification": the fallback answered
at once (degraded, with the task id) or the caller got a 202; when the agent's answer
arrives it becomes a new version of the session (its step closed, its output and progress
recorded, its memory updates applied, its queued action settled) with a decision naming
the task, and the event ``task.completed`` goes to subscribers, written by the same
statement as the version. A task that failed for good closes its step as failed and emits
``task.failed`` (the task queue's dead letter has already escalated the session). A task
whose caller got its answer in time (not detached) is the turn's, and nothing happens here.
A task of a turn on a branch ends on that branch (its version, its memories, a decision
naming it); if the branch was merged or deleted meanwhile, only the event goes out
(``applied: false``).
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import msgspec

from app.agents import repository as agents_repo
from app.clock import Clock
from app.coordination.answers import RepairKind
from app.coordination.breakers import BreakerRegistry
from app.coordination.escalation import EscalationService, StepEvent
from app.coordination.outcome import response_text
from app.coordination.rules import RulesService
from app.coordination.schemas import (
    AgentResponse,
    DecisionRecord,
    DecisionResponse,
    MemoryUpdateOutcome,
)
from app.coordination.target import TurnTarget, TurnTargets
from app.coordination.tasks import TaskInput, answer_of, read_input, task_url
from app.coordination.turn import TaskEnd, apply_task_end
from app.db.pool import Database
from app.errors import Conflict, NotFound
from app.events.schemas import NewEvent
from app.events.service import EventService
from app.sessions.schemas import Session, SessionContent
from app.sessions.state import content_of
from app.tasks.schemas import Task

logger = logging.getLogger("switchboard.coordination")

# How much of an answer an event carries: the session holds all of it.
EVENT_TEXT_CHARS = 2000


class TaskCompletion:
    """The on_finished hook of the coordinator's task kinds."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        targets: TurnTargets,
        breakers: BreakerRegistry,
        events: EventService,
        rules: RulesService,
        escalation: EscalationService,
    ) -> None:
        self._db = database
        self._clock = clock
        self._targets = targets
        self._breakers = breakers
        self._events = events
        self._rules = rules
        self._escalation = escalation

    async def finished(self, task: Task) -> None:
        """Apply a detached task's end to its session and tell subscribers. A dead letter's
        requeue (``requeue_of``) is detached from birth: nobody waits for it."""
        if task.session_id is None or not (task.detached or task.requeue_of is not None):
            return
        data = read_input(task)
        answered = answer_of(task)
        if answered is not None:
            await self._answered(task, data, *answered)
        elif task.status in ("failed", "canceled", "rejected"):
            await self._failed(task, data)

    async def _answered(
        self,
        task: Task,
        data: TaskInput,
        response: AgentResponse,
        repaired_from: RepairKind | None,
    ) -> None:
        assert task.session_id is not None
        target = self._targets.of(task.session_id, data.turn.branch)
        reply = response_text(response.output_data)
        event = NewEvent("task.completed", _payload(task, target, reply=_clip(reply)))
        session = await self._read(target, event)
        if session is None:
            return
        memories = MemoryUpdateOutcome()
        async with self._db.connection() as conn:
            agent = await agents_repo.get_agent_by_name(conn, task.agent_name)
        if agent is not None:
            memories = await target.remember(agent, session, response)
        breaker = self._breakers.peek(task.agent_name)
        end = TaskEnd(
            task_id=str(task.task_id),
            agent=task.agent_name,
            answered=True,
            reply=reply,
            output_data=response.output_data,
            next_agent=next(iter(response.next_agent_suggestions), None),
            pending_action_id=data.turn.pending_action_id,
        )
        turn = data.turn
        decision = DecisionRecord(
            session_id=task.session_id,
            message=turn.message,
            context_flags=turn.context_flags,
            classifier=turn.classifier,
            intents=[turn.intent],
            primary_intent=turn.intent.intent,
            chosen_agent=task.agent_name,
            routed_by=turn.routed_by,
            breaker_state=breaker.state if breaker else "closed",
            outcome="agent",
            fallback=None,
            degraded=False,
            attempts=task.attempt,
            error=None,
            response=DecisionResponse(
                text=reply,
                output_data=response.output_data,
                next_agent_suggestions=response.next_agent_suggestions,
                repaired=repaired_from is not None,
                repaired_from=repaired_from,
            ),
            execution_time_ms=_ms_between(task.created_at, task.finished_at),
            created_by=task.created_by,
            trace_id=task.trace_id,
            task_id=task.task_id,
        )
        # The next step after the late answer, like a turn's (app/coordination/escalation.py).
        after, _ = apply_task_end(content_of(session), self._clock.now(), end)
        async with self._db.connection() as conn:
            next_steps = await self._rules.next_steps(conn)
        decided = await self._escalation.decide(
            task.session_id,
            StepEvent(
                event="answered",
                intent=turn.intent.intent,
                agent=task.agent_name,
                error=None,
                handed_off=False,
                suggested=end.next_agent if end.next_agent != task.agent_name else None,
                progress_before=session.progress_percentage,
                progress_after=after.progress_percentage,
                pending_actions=after.session_state.pending_actions,
            ),
            next_steps,
        )
        decision = msgspec.structs.replace(decision, next_step=decided.record)
        if memories.rejected:
            logger.warning(
                "task %s: %d memory updates rejected", task.task_id, len(memories.rejected)
            )
        await self._apply(task, target, session, end, event, decision)
        if decided.escalates:
            await self._escalation.escalate(
                task.session_id, task.created_by, decided, task_id=task.task_id
            )

    async def _failed(self, task: Task, data: TaskInput) -> None:
        assert task.session_id is not None
        target = self._targets.of(task.session_id, data.turn.branch)
        error = task.last_error or f"task {task.status}"
        event = NewEvent("task.failed", _payload(task, target, error=_clip(error)))
        # A canceled task is someone's decision, not news for subscribers.
        told = event if task.status == "failed" else None
        session = await self._read(target, told)
        if session is None:
            return
        end = TaskEnd(
            task_id=str(task.task_id),
            agent=task.agent_name,
            answered=False,
            reply=error,
            pending_action_id=data.turn.pending_action_id,
        )
        await self._apply(task, target, session, end, told, None)

    async def _read(self, target: TurnTarget, event: NewEvent | None) -> Session | None:
        """The document the task's turn was written to. Gone: None, and for a branch (its
        session lives on) the event alone goes out; a session that is gone (and so its
        task) has nobody to tell."""
        try:
            return await target.current()
        except NotFound:
            if target.branch is not None:
                await self._not_applied(event)
            return None

    async def _not_applied(self, event: NewEvent | None) -> None:
        if event is not None:
            payload = {**event.payload, "applied": False}
            await self._events.emit(NewEvent(event.event_type, payload))

    async def _apply(
        self,
        task: Task,
        target: TurnTarget,
        session: Session,
        end: TaskEnd,
        event: NewEvent | None,
        decision: DecisionRecord | None,
    ) -> None:
        """The new version (with its decision and event), or, for a session that takes no
        changes any more, the event alone (``applied: false``)."""

        def mutate(current: Session, now: datetime) -> tuple[SessionContent, str]:
            return apply_task_end(content_of(current), now, end)

        try:
            await target.write(
                task.created_by, mutate, read=session, decision=decision, event=event
            )
        except (Conflict, NotFound) as refused:
            logger.info("task %s: not applied to its session: %s", task.task_id, refused)
            await self._not_applied(event)


def _payload(task: Task, target: TurnTarget, **extra: Any) -> dict[str, Any]:
    """What a task.completed / task.failed event says (the statement that writes it adds
    the session_version, or on a branch the branch_version, and the decision_id)."""
    where = {} if target.branch is None else {"branch": target.branch}
    return {
        "task_id": str(task.task_id),
        "task_url": task_url(task.task_id),
        "session_id": str(task.session_id),
        "user_id": task.user_id,
        "agent": task.agent_name,
        "kind": task.kind,
        "status": task.status,
        "attempts": task.attempt,
        "applied": True,
        **where,
        **extra,
    }


def _clip(text: str) -> str:
    return text if len(text) <= EVENT_TEXT_CHARS else text[: EVENT_TEXT_CHARS - 1] + "\u2026"


def _ms_between(start: datetime, end: datetime | None) -> int:
    if end is None:
        return 0
    return max(0, int((end - start).total_seconds() * 1000))
