"""A durable task as an A2A Task (app/a2a/convert.py): states, history, the answer."""

from __future__ import annotations

import typing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from a2a.helpers import get_artifact_text, get_message_text
from a2a.types import Role, TaskState
from google.protobuf.json_format import MessageToDict

from app.a2a.convert import INTERRUPTED_STATES, STATES, TERMINAL_STATES, a2a_task
from app.tasks.schemas import TERMINAL_STATUSES, Task, TaskStatus

START = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)


def stored(**changes: typing.Any) -> Task:
    task = Task(
        task_id=uuid4(),
        session_id=uuid4(),
        user_id="u",
        agent_name="Make_Plan_Agent",
        kind="message",
        input={"request": {}, "turn": {"message": "plan my savings"}},
        priority=5,
        scheduled_at=START,
        status="working",
        attempt=1,
        max_attempts=6,
        lease_owner=None,
        lease_expires_at=None,
        idempotency_key=None,
        created_by="admin",
        trace_id=None,
        traceparent=None,
        created_at=START,
        started_at=START + timedelta(seconds=1),
        finished_at=None,
        last_error=None,
        result=None,
        decision_id=None,
        detached=False,
        requeue_of=None,
    )
    return replace(task, **changes)


def test_every_stored_status_is_an_a2a_state_and_the_terminal_ones_agree() -> None:
    assert set(STATES) == set(typing.get_args(TaskStatus))
    assert {STATES[s] for s in TERMINAL_STATUSES} == TERMINAL_STATES
    assert {STATES["input-required"], STATES["auth-required"]} == INTERRUPTED_STATES
    assert TaskState.TASK_STATE_UNSPECIFIED not in STATES.values()


def test_a_working_task_has_the_users_message_and_no_answer_yet() -> None:
    task = a2a_task(stored())
    assert task.status.state == TaskState.TASK_STATE_WORKING
    assert task.status.timestamp.ToDatetime(tzinfo=UTC) == START + timedelta(seconds=1)
    assert not task.status.HasField("message")
    [asked] = task.history
    assert (asked.role, get_message_text(asked)) == (Role.ROLE_USER, "plan my savings")
    assert not task.artifacts


def test_a_completed_task_answers_in_history_status_and_artifact_without_repair_notes() -> None:
    done = stored(
        status="completed",
        finished_at=START + timedelta(seconds=3),
        result={"success": True, "output_data": {"response": "Save 10%"}, "repaired": "truncated"},
    )
    task = a2a_task(done)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(task.status.message) == "Save 10%"
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    [artifact] = task.artifacts
    assert get_artifact_text(artifact) == "Save 10%"
    assert MessageToDict(artifact.parts[1].data) == {"response": "Save 10%"}


def test_a_failed_task_says_why_and_a_task_of_no_session_is_its_own_context() -> None:
    failed = a2a_task(
        stored(
            status="failed",
            session_id=None,
            kind="agent_call",
            input={"q": 1},
            last_error="HTTP 500",
        )
    )
    assert failed.context_id == failed.id
    assert get_message_text(failed.status.message) == "HTTP 500"
    assert MessageToDict(failed.history[0].parts[0].data) == {"q": 1}
    assert not failed.artifacts


def test_a_task_waiting_for_input_asks_its_question_without_an_artifact() -> None:
    waiting = a2a_task(
        stored(
            status="input-required",
            result={"success": True, "output_data": {"response": "Which account?"}},
        )
    )
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert get_message_text(waiting.status.message) == "Which account?"
    assert waiting.status.message.role == Role.ROLE_AGENT
    assert not waiting.artifacts
