"""How one coordinated turn changes the session: pure and typed.

Whatever agents and users send, the content built here is content a client PATCH accepts:
text is clipped to the model's bounds, the pending-action queue stays within its limit,
and every model is built through validation (``evolve`` or a constructor). The service
decides what happened (the ``Turn``); this module only writes it down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from uuid import uuid4

from app.common.jsontypes import JsonValue
from app.coordination.intents import DetectedIntent
from app.coordination.pending import NewId, bind_claim, enqueue, settle_claim, settle_task
from app.sessions.schemas import SHORT_TEXT_MAX, ExecutionStatus, PendingAction, SessionContent
from app.sessions.state import append_execution, clip, close_current_execution, evolve

# How much of the reply an agent-sequence step keeps as its summary.
OUTPUT_SUMMARY_CHARS = 500


@dataclass(frozen=True, slots=True)
class TurnStep:
    """One agent's part in a turn: it answered, or its fallback did."""

    agent: str
    answered: bool
    # What the user reads of this step (the agent's answer or the fallback's text).
    reply: str
    output_data: JsonValue = None
    # The agent this step passed the turn to, or a registered one its answer suggested.
    next_agent: str | None = None
    fallback: str | None = None
    # The agent's task, when it is still working (the caller stopped waiting): the step
    # stays ``executing`` until the task ends (apply_task_end).
    waiting_task: str | None = None


@dataclass(frozen=True, slots=True)
class Turn:
    """What the coordinator decided and what came of it, for one message or queued action."""

    primary: DetectedIntent | None
    secondaries: tuple[DetectedIntent, ...]
    clarification: bool
    reply: str
    # The agents that took the turn, in order: none (nobody, or a clarification), one, or
    # the orchestrator whose fallback passed the request on and the agent it passed it to.
    steps: tuple[TurnStep, ...] = ()
    # Work a fallback could not do, for when its agent is back: queued as new work, or,
    # when the turn processed a queued action, the reason that action failed.
    requeue: PendingAction | None = None
    # The queued action this turn processed (POST .../pending/next), as it was claimed.
    pending: PendingAction | None = None


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """An agent task ended after its turn was answered without it: its agent's answer
    (``answered``) or its failure, to be written where the turn left its step."""

    task_id: str
    agent: str
    answered: bool
    reply: str
    output_data: JsonValue = None
    next_agent: str | None = None
    # The queued action the task worked on (kind pending_action).
    pending_action_id: str | None = None


def apply_turn(
    base: SessionContent, now: datetime, turn: Turn, new_id: NewId = lambda: str(uuid4())
) -> tuple[SessionContent, str]:
    """The session content after ``turn``, and the reason recorded with its version;
    ``new_id`` names the actions the turn queues."""
    state = base.session_state
    # Tasks whose end was written before this turn (a fast agent's task can end, and its
    # hook write the session, between the turn's detaching it and the turn's own write):
    # their steps stand, and the turn neither reopens them nor binds an action to them.
    ended = base.agent_sequence.ended_tasks()
    actions = _queue(list(state.pending_actions), now, turn, new_id, ended)
    context = state.conversation_context
    context_changes: dict[str, object] = {"turn_count": context.turn_count + 1}
    if turn.primary is not None:
        context_changes["last_intent"] = turn.primary.intent

    outputs = state.agent_outputs
    sequence = base.agent_sequence
    current_agent = base.current_agent
    progress = base.progress_percentage
    for step in turn.steps:
        if step.answered:
            outputs = {**outputs, step.agent: step.output_data}
            progress = _reported_progress(step.output_data, progress)
        sequence = close_current_execution(
            sequence, now=now, outcome="completed", output_summary=None, next_agent=step.agent
        )
        waiting = step.waiting_task is not None
        current_agent = step.agent
        if step.waiting_task in ended:
            continue
        sequence = append_execution(
            sequence,
            step.agent,
            status="executing" if waiting else "completed" if step.answered else "failed",
            start_time=now,
            completion_time=None if waiting else now,
            output_summary=clip(step.reply, OUTPUT_SUMMARY_CHARS),
            next_agent=step.next_agent,
            task_id=step.waiting_task,
        )

    content = replace(
        base,
        session_state=evolve(
            state,
            pending_actions=actions,
            conversation_context=evolve(context, **context_changes),
            agent_outputs=outputs,
        ),
        agent_sequence=sequence,
        current_agent=current_agent,
        progress_percentage=progress,
        status="active" if base.status == "idle" else base.status,
    )
    return content, _reason(turn)


def _queue(
    actions: list[PendingAction],
    now: datetime,
    turn: Turn,
    new_id: NewId,
    ended: dict[str, ExecutionStatus],
) -> list[PendingAction]:
    """The pending-action queue after the turn: the claimed action settled, the secondary
    intents and the fallback's deferred work added once each, within the queue's bound."""
    if turn.pending is not None:
        waiting = next((s.waiting_task for s in turn.steps if s.waiting_task), None)
        if waiting is not None and waiting in ended:
            failure = None if ended[waiting] == "completed" else f"task {waiting} failed"
            actions = settle_claim(actions, turn.pending, failure)
        elif waiting is not None:
            actions = bind_claim(actions, turn.pending, waiting)
        else:
            failure = None
            if turn.requeue is not None:
                failure = turn.requeue.reason or "its agent was unavailable"
            actions = settle_claim(actions, turn.pending, failure)
    new: list[PendingAction] = [
        PendingAction(
            type=intent.intent,
            description=clip(intent.clause, SHORT_TEXT_MAX),
            priority_score=intent.score,
            status="pending",
            created_at=now,
        )
        for intent in turn.secondaries
    ]
    if turn.requeue is not None and turn.pending is None:
        new.append(turn.requeue)
    return enqueue(actions, new, new_id)


def apply_task_end(base: SessionContent, now: datetime, end: TaskEnd) -> tuple[SessionContent, str]:
    """The session content once an agent task whose turn did not wait for it ended: its
    step closed (or, if the sequence no longer holds it, a step added), the agent's output
    and progress recorded when it answered, its queued action settled; and the reason
    recorded with the version."""
    state = base.session_state
    summary = clip(end.reply, OUTPUT_SUMMARY_CHARS)
    status: ExecutionStatus = "completed" if end.answered else "failed"
    sequence = base.agent_sequence
    index = sequence.index_of_task(end.task_id)
    if index is not None:
        step = sequence[index]  # the one stored step this write types
        closed = evolve(
            step,
            status=status,
            completion_time=now,
            output_summary=summary,
            next_agent=end.next_agent or step.next_agent,
        )
        sequence = sequence.replaced(index, closed)
    else:
        sequence = append_execution(
            sequence,
            end.agent,
            status=status,
            start_time=now,
            completion_time=now,
            output_summary=summary,
            next_agent=end.next_agent,
            task_id=end.task_id,
        )
    outputs = state.agent_outputs
    progress = base.progress_percentage
    current_agent = base.current_agent
    if end.answered:
        outputs = {**outputs, end.agent: end.output_data}
        progress = _reported_progress(end.output_data, progress)
        current_agent = end.agent
    actions = list(state.pending_actions)
    if end.pending_action_id is not None:
        failure = None if end.answered else clip(f"task {end.task_id} failed: {end.reply}", 500)
        actions = settle_task(actions, end.pending_action_id, end.task_id, failure)
    content = replace(
        base,
        session_state=evolve(state, pending_actions=actions, agent_outputs=outputs),
        agent_sequence=sequence,
        current_agent=current_agent,
        progress_percentage=progress,
        status="active" if base.status == "idle" else base.status,
    )
    outcome = "answered" if end.answered else "failed"
    return content, f"task {end.task_id}: {end.agent} {outcome}"


def _reported_progress(output: object, current: int) -> int:
    """The progress an agent reported in its output, if it is a valid percentage."""
    reported = output.get("progress_percentage") if isinstance(output, dict) else None
    if isinstance(reported, int) and not isinstance(reported, bool) and 0 <= reported <= 100:
        return reported
    return current


def _reason(turn: Turn) -> str:
    if turn.clarification:
        return "message: clarification requested"
    intent = turn.primary.intent if turn.primary else "none"
    route = " -> ".join(f"{step.agent} ({_step_outcome(step)})" for step in turn.steps)
    return f"message: {intent} -> {route or 'nobody'}"


def _step_outcome(step: TurnStep) -> str:
    if step.answered:
        return "agent"
    if step.waiting_task is not None and step.fallback is None:
        return f"task {step.waiting_task}"
    return f"fallback {step.fallback}"
