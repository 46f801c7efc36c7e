"""The coordinator's session update (app/coordination/turn.py) as a property: whatever
sequence of turns runs, with whatever agents and users send, the session it leaves is one a
client PATCH accepts, and the queue keeps its bounds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path
from typing import Any
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.coordination.intents import DetectedIntent
from app.coordination.pending import claim_next
from app.coordination.schemas import AgentResponse
from app.coordination.turn import TaskEnd, Turn, TurnStep, apply_task_end, apply_turn
from app.sessions.schemas import (
    MAX_PENDING_ACTIONS,
    CoordinationMetadata,
    PendingAction,
    PendingStatus,
    Session,
    SessionContent,
    SessionEditable,
    SessionState,
)
from app.sessions.sequence import EMPTY, sequence_of
from app.sessions.state import (
    content_of,
    evolve,
    merge_patch,
    show_mirrors,
    storage_json,
)

NOW = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
# Past any claim timeout.
LATER = timedelta(days=1)
AGENTS = ["Make_Plan_Agent", "Add_Changes_Agent", "Educate_Customer_Agent"]

names = st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True)
# Up to the longest message the API takes (a single clause may be all of it).
texts = st.text(max_size=10_000) | st.sampled_from(["", "x" * 10_000, "change my plan"])


def json_values(max_leaves: int = 10) -> st.SearchStrategy[Any]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=max_leaves,
    )


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"n": value}
    return value


# What an agent may answer with, as the dispatcher lets it through (AgentResponse).
outputs = (
    json_values()
    | st.builds(lambda p: {"response": "ok", "progress_percentage": p}, st.integers(-5, 105))
    | st.integers(0, 80).map(nested)
).filter(lambda value: _is_valid_output(value))


def _is_valid_output(value: Any) -> bool:
    try:
        AgentResponse.model_validate({"success": True, "output_data": value})
    except ValueError:
        return False
    return True


intents = st.builds(
    DetectedIntent,
    intent=names,
    clause=texts,
    position=st.integers(0, 5),
    matched=st.just(("test",)),
    base_weight=st.integers(0, 100),
    modifiers=st.just(()),
    score=st.integers(0, 100),
)
actions = st.builds(
    PendingAction,
    type=names,
    description=st.none() | st.text(max_size=200),
    priority_score=st.integers(0, 100),
    status=st.sampled_from(["pending", "in_progress", "done", "cancelled", "failed"]),
    attempts=st.integers(0, 5),
)


@st.composite
def steps_of_a_turn(draw: st.DrawFn) -> TurnStep:
    answered = draw(st.booleans())
    return TurnStep(
        agent=draw(st.sampled_from(AGENTS)),
        answered=answered,
        reply=draw(texts),
        output_data=draw(outputs) if answered else None,
        next_agent=draw(st.none() | st.sampled_from(AGENTS)),
        fallback=None if answered else "change_confirmation_without_analysis",
    )


@st.composite
def turns(draw: st.DrawFn, pending: PendingAction | None = None) -> Turn:
    clarification = pending is None and draw(st.booleans())
    steps = () if clarification else tuple(draw(st.lists(steps_of_a_turn(), max_size=2)))
    failed = bool(steps) and not steps[-1].answered
    return Turn(
        primary=draw(st.none() | intents),
        secondaries=tuple(draw(st.lists(intents, max_size=4))),
        clarification=clarification,
        reply=draw(texts),
        steps=steps,
        requeue=draw(st.none() | actions) if failed else None,
        pending=pending,
    )


def ids() -> Callable[[], str]:
    numbers = count(1)
    return lambda: f"a{next(numbers)}"


def claimed_turn(
    data: st.DataObject, content: SessionContent, now: datetime, new_id: Callable[[], str]
) -> tuple[SessionContent, Turn] | None:
    """POST .../pending/next: claim the next action (a write of its own), then maybe a
    client edits the queue while the agent works, then the turn settles the claim."""
    found = claim_next(content.session_state.pending_actions, now, now, new_id)
    if found is None:
        return None
    queue, claimed = found
    meddling = data.draw(st.sampled_from(["none", "none", "cancel", "remove", "reclaim"]))
    index = queue.index(claimed)
    if meddling == "cancel":
        queue[index] = evolve(claimed, status="cancelled")
    elif meddling == "remove":
        del queue[index]
    elif meddling == "reclaim":  # a later caller took the claim over
        queue[index] = evolve(claimed, claimed_at=now + timedelta(minutes=30))
    claimed_content = replace(
        content, session_state=evolve(content.session_state, pending_actions=queue)
    )
    return claimed_content, data.draw(turns(pending=claimed))


def fresh_content() -> SessionContent:
    return SessionContent(
        session_state=SessionState(),
        agent_sequence=EMPTY,
        coordination_metadata=CoordinationMetadata(),
        current_agent=None,
        progress_percentage=0,
        status="active",
        priority="normal",
        preserve=False,
        completed_at=None,
    )


def assert_a_client_patch_is_accepted(content: SessionContent) -> None:
    """What PATCH {"progress_percentage": 20} validates, built from the stored JSON."""
    state, sequence, metadata = storage_json(content)
    shown_state, shown_metadata = show_mirrors(
        state, metadata, content.progress_percentage, content.priority
    )
    view = {
        "session_state": shown_state,
        "coordination_metadata": shown_metadata,
        "progress_percentage": content.progress_percentage,
        "priority": content.priority,
        "current_agent": content.current_agent,
        "preserve": content.preserve,
        "status": content.status,
    }
    patched = merge_patch(view, {"progress_percentage": 20})
    patched["session_state"]["progress_percentage"] = 20
    SessionEditable.model_validate(patched)
    sequence_of(sequence)
    assert len(content.session_state.pending_actions) <= MAX_PENDING_ACTIONS


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_sequence_of_turns_leaves_a_session_a_client_patch_accepts(data: st.DataObject) -> None:
    content = fresh_content()
    new_id = ids()
    for step in range(data.draw(st.integers(1, 8))):
        now = NOW + timedelta(seconds=step)
        claimed = claimed_turn(data, content, now, new_id) if data.draw(st.booleans()) else None
        if claimed is None:
            turn = data.draw(turns())
        else:
            content, turn = claimed
            assert_a_client_patch_is_accepted(content)
        before = content.session_state.pending_actions
        content, reason = apply_turn(content, now, turn, new_id)
        after = content.session_state.pending_actions
        assert reason.startswith("message: ")
        assert_a_client_patch_is_accepted(content)
        orders = [execution.execution_order for execution in content.agent_sequence]
        assert len(orders) == len(set(orders))
        queued = [a.id for a in after]
        assert None not in queued
        assert len(queued) == len(set(queued))
        if turn.pending is not None and not turn.secondaries and turn.requeue is None:
            # Settling a claim never adds an action, whatever happened to it meanwhile.
            assert len(after) <= len(before)


def action(index: int, status: PendingStatus = "pending") -> PendingAction:
    return PendingAction(type="urgent_changes", description=f"change {index}", status=status)


def content_with(queue: list[PendingAction]) -> SessionContent:
    return replace(fresh_content(), session_state=SessionState(pending_actions=queue))


def secondary(clause: str) -> DetectedIntent:
    return DetectedIntent("ask_question", clause, 1, ("what is",), 30, (), 30)


UNAVAILABLE = "Add_Changes_Agent was unavailable"


def claim(content: SessionContent) -> tuple[SessionContent, PendingAction]:
    found = claim_next(content.session_state.pending_actions, NOW, NOW, ids())
    assert found is not None
    queue, claimed = found
    return replace(content, session_state=SessionState(pending_actions=queue)), claimed


def test_an_action_whose_agent_could_not_do_it_fails_at_once() -> None:
    """The bricking case: the coordinator's "failed" is a status the model declares. The
    retries were the action's task's (app/tasks): its turn does not queue it again."""
    content = content_with([action(0)])
    content, current = claim(content)
    turn = Turn(
        primary=None,
        secondaries=(),
        clarification=False,
        reply="recorded",
        steps=(
            TurnStep(
                agent="Add_Changes_Agent",
                answered=False,
                reply="recorded",
                fallback="change_confirmation_without_analysis",
            ),
        ),
        requeue=PendingAction(type="urgent_changes", reason="Add_Changes_Agent was unavailable"),
        pending=current,
    )
    content, _ = apply_turn(content, NOW, turn)
    (kept,) = content.session_state.pending_actions
    assert (kept.status, kept.attempts, kept.claimed_at) == ("failed", 1, None)
    assert kept.reason == "Add_Changes_Agent was unavailable"
    assert_a_client_patch_is_accepted(content)


def test_an_action_whose_task_still_works_is_bound_to_it_and_settled_when_it_ends() -> None:
    content = content_with([action(0)])
    content, current = claim(content)
    waiting = TurnStep(
        agent="Add_Changes_Agent",
        answered=False,
        reply="recorded",
        fallback="change_confirmation_without_analysis",
        waiting_task="task-1",
    )
    turn = Turn(
        primary=None,
        secondaries=(),
        clarification=False,
        reply="recorded",
        steps=(waiting,),
        pending=current,
    )
    content, reason = apply_turn(content, NOW, turn)
    assert reason.endswith("Add_Changes_Agent (fallback change_confirmation_without_analysis)")
    (bound,) = content.session_state.pending_actions
    assert (bound.status, bound.task_id) == ("in_progress", "task-1")
    step = content.agent_sequence[-1]
    assert (step.status, step.task_id, step.completion_time) == ("executing", "task-1", None)
    # Bound to its task: a claim timeout does not hand it to another caller.
    assert claim_next(content.session_state.pending_actions, NOW, NOW + LATER, ids()) is None
    assert_a_client_patch_is_accepted(content)

    # A later turn closes its own step, not the task's.
    later = Turn(
        primary=None,
        secondaries=(),
        clarification=False,
        reply="hi",
        steps=(TurnStep(agent="Make_Plan_Agent", answered=True, reply="hi"),),
    )
    content, _ = apply_turn(content, NOW, later)
    assert [s.status for s in content.agent_sequence[-2:]] == ["executing", "completed"]

    end = TaskEnd(
        task_id="task-1",
        agent="Add_Changes_Agent",
        answered=True,
        reply="Changed",
        output_data={"response": "Changed", "progress_percentage": 70},
        pending_action_id=current.id,
    )
    content, reason = apply_task_end(content, NOW, end)
    assert reason == "task task-1: Add_Changes_Agent answered"
    assert content.session_state.pending_actions == []
    closed = next(s for s in content.agent_sequence if s.task_id == "task-1")
    assert (closed.status, closed.output_summary, closed.completion_time) == (
        "completed",
        "Changed",
        NOW,
    )
    assert content.session_state.agent_outputs["Add_Changes_Agent"] == end.output_data
    assert (content.current_agent, content.progress_percentage) == ("Add_Changes_Agent", 70)
    assert_a_client_patch_is_accepted(content)


def test_a_task_that_ended_before_its_turn_was_written_keeps_its_closed_step() -> None:
    """A fast agent's task can end, and its end be written, between the turn's detaching
    it (respond-async, or a spent budget) and the turn's own write: the turn then neither
    reopens the step nor binds its action to the finished task."""
    for answered, status in ((True, "completed"), (False, "failed")):
        content = content_with([action(0)])
        content, current = claim(content)
        end = TaskEnd(
            task_id="task-9",
            agent="Add_Changes_Agent",
            answered=answered,
            reply="Changed" if answered else "agent answered HTTP 500",
            output_data={"response": "Changed"} if answered else None,
            pending_action_id=current.id,
        )
        content, _ = apply_task_end(content, NOW, end)
        turn = Turn(
            primary=None,
            secondaries=(),
            clarification=False,
            reply="accepted",
            steps=(
                TurnStep(
                    agent="Add_Changes_Agent",
                    answered=False,
                    reply="accepted",
                    waiting_task="task-9",
                ),
            ),
            pending=current,
        )
        content, _ = apply_turn(content, NOW, turn)
        steps = [s for s in content.agent_sequence if s.task_id == "task-9"]
        assert [s.status for s in steps] == [status]
        assert content.current_agent == "Add_Changes_Agent"
        left = content.session_state.pending_actions
        assert all(a.status != "in_progress" for a in left)
        if answered:
            assert left == []
        else:
            assert [a.status for a in left] == ["failed"]
        assert_a_client_patch_is_accepted(content)


def test_a_failed_task_fails_its_action_and_its_step() -> None:
    content = content_with([action(0)])
    content, current = claim(content)
    actions = content.session_state.pending_actions
    bound = [a.model_copy(update={"task_id": "task-2"}) for a in actions]
    content = replace(content, session_state=SessionState(pending_actions=bound))
    end = TaskEnd(
        task_id="task-2",
        agent="Add_Changes_Agent",
        answered=False,
        reply="agent answered HTTP 500",
        pending_action_id=current.id,
    )
    content, reason = apply_task_end(content, NOW, end)
    assert reason == "task task-2: Add_Changes_Agent failed"
    (failed,) = content.session_state.pending_actions
    assert (failed.status, failed.reason) == (
        "failed",
        "task task-2 failed: agent answered HTTP 500",
    )
    # Its step was trimmed away (or never written): one is added, closed.
    step = content.agent_sequence[-1]
    assert (step.status, step.task_id) == ("failed", "task-2")
    # Another task's end leaves the action alone.
    other = replace(end, task_id="task-3")
    unchanged, _ = apply_task_end(content, NOW, other)
    assert unchanged.session_state.pending_actions == content.session_state.pending_actions
    assert_a_client_patch_is_accepted(content)


def test_a_full_queue_drops_finished_actions_first_then_the_newest() -> None:
    queue = [action(i, "done" if i < 2 else "pending") for i in range(MAX_PENDING_ACTIONS)]
    turn = Turn(
        primary=None,
        secondaries=tuple(secondary(f"what is {n}?") for n in range(5)),
        clarification=False,
        reply="ok",
    )
    content, _ = apply_turn(content_with(queue), NOW, turn)
    kept = content.session_state.pending_actions
    assert len(kept) == MAX_PENDING_ACTIONS
    assert kept[: MAX_PENDING_ACTIONS - 2] == queue[2:]  # both finished ones made room
    assert [a.description for a in kept[-2:]] == ["what is 0?", "what is 1?"]


def test_long_clauses_and_replies_are_clipped_to_the_models_bounds() -> None:
    long = "x" * 10_000
    turn = Turn(
        primary=secondary("what?"),
        secondaries=(secondary(long),),
        clarification=False,
        reply=long,
        steps=(
            TurnStep(
                agent="Educate_Customer_Agent",
                answered=True,
                reply=long,
                output_data={"response": long},
            ),
        ),
    )
    content, _ = apply_turn(content_with([]), NOW, turn)
    (queued,) = content.session_state.pending_actions
    assert queued.description == "x" * 3999 + "\u2026"
    assert content.agent_sequence[-1].output_summary == "x" * 499 + "\u2026"
    assert_a_client_patch_is_accepted(content)


def test_content_read_back_from_storage_is_the_content_written() -> None:
    turn = Turn(
        primary=secondary("what?"),
        secondaries=(secondary("and why?"),),
        clarification=False,
        reply="because",
        steps=(
            TurnStep(
                agent="Educate_Customer_Agent",
                answered=True,
                reply="because",
                output_data={"response": "because", "progress_percentage": 30},
                next_agent="Make_Plan_Agent",
            ),
        ),
    )
    content, _ = apply_turn(content_with([action(1)]), NOW, turn)
    state, sequence, metadata = storage_json(content)
    assert "progress_percentage" not in state
    assert "session_priority" not in metadata
    shown_state, shown_metadata = show_mirrors(state, metadata, 30, "normal")
    view = Session(
        session_id=UUID(int=1),
        user_id=UUID(int=2),
        session_type="multi_agent_chat",
        status=content.status,
        priority=content.priority,
        current_agent=content.current_agent,
        agent_sequence=sequence,
        session_state=shown_state,
        coordination_metadata=shown_metadata,
        progress_percentage=content.progress_percentage,
        preserve=False,
        version=2,
        created_at=NOW,
        updated_at=NOW,
        last_activity_at=NOW,
        expires_at=NOW,
        completed_at=None,
    )
    assert content_of(view) == content


def test_app_code_changes_models_only_through_validation() -> None:
    """``model_copy(update=...)`` and ``model_construct`` skip validation: content built
    with them could be what a client PATCH then refuses. ``evolve`` is the way."""
    root = Path(__file__).resolve().parents[2] / "app"
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in sorted(root.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if "model_copy(" in line or "model_construct(" in line
    ]
    assert offenders == []


def test_a_claim_is_settled_by_id_not_by_value() -> None:
    """A client edited the claimed action while its agent worked: the turn leaves the
    client's version alone, and a concurrent second claim finds nothing waiting."""
    content, claimed = claim(content_with([action(0), action(1)]))
    assert claimed.description == "change 0"
    assert (
        claim_next(
            content.session_state.pending_actions[:1], NOW, NOW - timedelta(minutes=1), ids()
        )
        is None
    )  # only the claimed one: a second caller gets nothing
    edited = [
        evolve(a, priority_score=99) if a.id == claimed.id else a
        for a in content.session_state.pending_actions
    ]
    content = replace(content, session_state=SessionState(pending_actions=edited))
    done = Turn(primary=None, secondaries=(), clarification=False, reply="ok", pending=claimed)
    after, _ = apply_turn(content, NOW, done)
    # Still in progress (the edit kept the claim): the claim is ours, so it is settled.
    assert [a.description for a in after.session_state.pending_actions] == ["change 1"]
    cancelled = [evolve(a, status="cancelled") if a.id == claimed.id else a for a in edited]
    content = replace(content, session_state=SessionState(pending_actions=cancelled))
    after, _ = apply_turn(content, NOW, done)
    assert [(a.description, a.status) for a in after.session_state.pending_actions] == [
        ("change 0", "cancelled"),
        ("change 1", "pending"),
    ]


def test_a_claim_left_by_a_dead_worker_is_taken_over_after_the_timeout() -> None:
    content, claimed = claim(content_with([action(0)]))
    queue = content.session_state.pending_actions
    assert claim_next(queue, NOW, NOW - timedelta(minutes=15), ids()) is None
    later = NOW + timedelta(minutes=20)
    found = claim_next(queue, later, later - timedelta(minutes=15), ids())
    assert found is not None
    assert (found[1].id, found[1].claimed_at) == (claimed.id, later)
