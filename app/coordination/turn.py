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
from app.coordination.pending import NewId, enqueue, settle_claim
from app.sessions.schemas import SHORT_TEXT_MAX, PendingAction, SessionContent
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
    # when the turn processed a queued action, the reason that action waits again.
    requeue: PendingAction | None = None
    # The queued action this turn processed (POST .../pending/next), as it was claimed.
    pending: PendingAction | None = None


def apply_turn(
    base: SessionContent, now: datetime, turn: Turn, new_id: NewId = lambda: str(uuid4())
) -> tuple[SessionContent, str]:
    """The session content after ``turn``, and the reason recorded with its version;
    ``new_id`` names the actions the turn queues."""
    state = base.session_state
    actions = _queue(list(state.pending_actions), now, turn, new_id)
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
        sequence = append_execution(
            sequence,
            step.agent,
            status="completed" if step.answered else "failed",
            start_time=now,
            completion_time=now,
            output_summary=clip(step.reply, OUTPUT_SUMMARY_CHARS),
            next_agent=step.next_agent,
        )
        current_agent = step.agent

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
    actions: list[PendingAction], now: datetime, turn: Turn, new_id: NewId
) -> list[PendingAction]:
    """The pending-action queue after the turn: the claimed action settled, the secondary
    intents and the fallback's deferred work added once each, within the queue's bound."""
    if turn.pending is not None:
        actions = settle_claim(actions, turn.pending, turn.requeue)
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
    route = " -> ".join(
        f"{step.agent} ({'agent' if step.answered else f'fallback {step.fallback}'})"
        for step in turn.steps
    )
    return f"message: {intent} -> {route or 'nobody'}"
