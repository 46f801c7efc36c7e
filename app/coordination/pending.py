"""The pending-action queue of a session (``session_state.pending_actions``): pure rules.

Actions are named by ``id``, never matched by value: a client may edit an action while an
agent works on it, and two callers may ask for the next action at once. Processing one is
a claim (``in_progress`` with ``claimed_at``, a versioned write, so exactly one caller wins
it), then the action's agent task (kind pending_action, app/coordination/tasks.py), then the
settlement of the claim: by the turn, when the task ended while its caller waited, else by
the task's end (app/coordination/completion.py), the action bound to the task meanwhile
(``task_id``). The task's retries (backoff, dead letter) are the action's: there is no
retry loop of its own. A claim whose process died before it bound a task is taken over once
it is older than the claim timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from app.coordination.intents import DetectedIntent, IntentRules, Prioritization
from app.sessions.schemas import MAX_PENDING_ACTIONS, PendingAction
from app.sessions.state import clip, evolve

# Statuses of actions nobody will work on again: trimmed first when the queue is full.
_FINISHED = frozenset({"done", "cancelled", "failed"})

NewId = Callable[[], str]


def claim_next(
    actions: Sequence[PendingAction], now: datetime, stale_before: datetime, new_id: NewId
) -> tuple[list[PendingAction], PendingAction] | None:
    """The queue with its highest-priority waiting action claimed (the earliest on a tie),
    and that action; None when nothing waits. A claim older than ``stale_before`` is
    waiting again (its worker is gone)."""
    waiting = [
        (index, action)
        for index, action in enumerate(actions)
        if action.status == "pending"
        or (
            action.status == "in_progress"
            and action.task_id is None  # a task's action is settled when the task ends
            and action.claimed_at is not None
            and action.claimed_at < stale_before
        )
    ]
    if not waiting:
        return None
    index, action = max(waiting, key=lambda item: (item[1].priority_score, -item[0]))
    claimed = evolve(action, id=action.id or new_id(), status="in_progress", claimed_at=now)
    return [*actions[:index], claimed, *actions[index + 1 :]], claimed


def as_prioritization(action: PendingAction, text: str, rules: IntentRules) -> Prioritization:
    """A claimed action as the turn's only intent: its type, with the priority it was
    queued with (not scored again), routed like any message's primary intent."""
    queued = DetectedIntent(
        intent=action.type,
        clause=text,
        position=0,
        matched=("pending_action",),
        base_weight=rules.weight(action.type),
        modifiers=(),
        score=action.priority_score,
    )
    return Prioritization(intents=(queued,), primary=queued, secondaries=(), clarification=None)


def settle_claim(
    actions: list[PendingAction], claimed: PendingAction, failure: str | None
) -> list[PendingAction]:
    """The queue after the claimed action's turn: gone when it was handled; ``failed`` with
    ``failure`` as its reason when its agent could not do it (its task failed for good, or
    its fallback could not do the work either). If the claim is no longer ours (a client
    changed or removed the action meanwhile, or a later claim took it over), the queue
    stays as it is now."""
    index = _claimed_index(actions, claimed)
    if index is None:
        return actions
    return _settled(actions, index, failure)


def bind_claim(
    actions: list[PendingAction], claimed: PendingAction, task_id: str
) -> list[PendingAction]:
    """The queue with the claimed action bound to the agent task still working on it (its
    caller stopped waiting); unchanged if the claim is no longer ours."""
    index = _claimed_index(actions, claimed)
    if index is None:
        return actions
    bound = evolve(actions[index], task_id=task_id)
    return [*actions[:index], bound, *actions[index + 1 :]]


def settle_task(
    actions: list[PendingAction], action_id: str, task_id: str, failure: str | None
) -> list[PendingAction]:
    """The queue after the task bound to action ``action_id`` ended: the action gone, or
    failed with ``failure``; unchanged if the action is no longer that task's."""
    index = next(
        (
            i
            for i, a in enumerate(actions)
            if a.id == action_id and a.task_id == task_id and a.status == "in_progress"
        ),
        None,
    )
    if index is None:
        return actions
    return _settled(actions, index, failure)


def _claimed_index(actions: list[PendingAction], claimed: PendingAction) -> int | None:
    index = next((i for i, a in enumerate(actions) if a.id == claimed.id), None)
    if index is None:
        return None
    current = actions[index]
    if current.status != "in_progress" or current.claimed_at != claimed.claimed_at:
        return None
    return index


def _settled(actions: list[PendingAction], index: int, failure: str | None) -> list[PendingAction]:
    if failure is None:
        return [*actions[:index], *actions[index + 1 :]]
    current = actions[index]
    failed = evolve(
        current,
        attempts=current.attempts + 1,
        status="failed",
        claimed_at=None,
        reason=clip(failure, 500),
    )
    return [*actions[:index], failed, *actions[index + 1 :]]


def enqueue(
    actions: list[PendingAction], new: Sequence[PendingAction], new_id: NewId
) -> list[PendingAction]:
    """``actions`` with each new action added once (by type and description), each given an
    id, the whole kept within MAX_PENDING_ACTIONS: the oldest finished actions go first,
    then the newest additions."""
    known = {(a.type, a.description) for a in actions}
    for action in new:
        if (action.type, action.description) not in known:
            actions = [*actions, action if action.id else evolve(action, id=new_id())]
            known.add((action.type, action.description))
    excess = len(actions) - MAX_PENDING_ACTIONS
    if excess <= 0:
        return actions
    finished = set([i for i, a in enumerate(actions) if a.status in _FINISHED][:excess])
    return [a for i, a in enumerate(actions) if i not in finished][:MAX_PENDING_ACTIONS]
