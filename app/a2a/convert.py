"""Switchboard's durable tasks and coordinator answers as A2A 1.0 objects (the a2a-sdk's
protocol types): pure functions, no I/O.

An A2A Task is a row of ``agent_tasks`` seen through the protocol: its id is the task's,
its contextId the session's, its state the task's status (the table's states are A2A's),
its history the user's message and, once answered, the agent's reply, and a completed
task's answer is its one artifact (the reply as text and the agent's ``output_data`` as
data). Nothing is stored twice: every field is derived from the row when it is read.
"""

from __future__ import annotations

from typing import Any

from a2a.helpers import new_data_part, new_text_part
from a2a.types import Artifact, Message, Part, Role, Task, TaskState, TaskStatus
from google.protobuf.struct_pb2 import Struct
from google.protobuf.timestamp_pb2 import Timestamp

from app.coordination.outcome import response_text
from app.coordination.schemas import MessageResult
from app.coordination.tasks import COORDINATOR_KINDS, REPAIRED_KEY
from app.tasks.schemas import Task as StoredTask

STATES: dict[str, TaskState] = {
    "submitted": TaskState.TASK_STATE_SUBMITTED,
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "auth-required": TaskState.TASK_STATE_AUTH_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "canceled": TaskState.TASK_STATE_CANCELED,
    "rejected": TaskState.TASK_STATE_REJECTED,
}
STATUS_OF_STATE = {state: status for status, state in STATES.items()}
# Where a stream ends: the task is over, or waits for the client (A2A 1.0, 3.1.2).
TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED_STATES = frozenset(
    {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
)
ANSWER_ARTIFACT = "answer"
# Where a task's input keeps the messageId of the A2A message it answers.
CLIENT_MESSAGE_ID = "a2a_message_id"


def _struct(values: dict[str, Any]) -> Struct:
    struct = Struct()
    struct.update(values)
    return struct


def _timestamp(task: StoredTask) -> Timestamp:
    """When the task's status last changed, as far as the row tells."""
    stamp = Timestamp()
    stamp.FromDatetime(task.finished_at or task.started_at or task.created_at)
    return stamp


def context_id(task: StoredTask) -> str:
    """The A2A contextId of a task: its session, else the task itself (a task for no
    session is a context of its own)."""
    return str(task.session_id or task.task_id)


def user_message(task: StoredTask) -> Message:
    """What the task was asked: the user's words for a coordinator task, the input
    document for any other kind."""
    parts: list[Part]
    coordinated = task.kind in COORDINATOR_KINDS
    turn = task.input.get("turn") if coordinated else None
    if isinstance(turn, dict) and isinstance(turn.get("message"), str):
        parts = [new_text_part(turn["message"])]
    else:
        parts = [new_data_part(task.input)]
    # The client's messageId when an A2A message started the task (app/a2a/messages.py).
    client_id = task.input.get(CLIENT_MESSAGE_ID) if coordinated else None
    return Message(
        message_id=str(client_id) if client_id else f"{task.task_id}-request",
        context_id=context_id(task),
        task_id=str(task.task_id),
        role=Role.ROLE_USER,
        parts=parts,
    )


def _answer(task: StoredTask) -> tuple[str, Any] | None:
    """The reply text and output data of a completed task, or the agent's question while
    the task waits for the user (input-required, auth-required)."""
    if not task.answered or task.result is None:
        return None
    result = {k: v for k, v in task.result.items() if k != REPAIRED_KEY}
    output = result.get("output_data", result)
    return response_text(output), output


def agent_message(task: StoredTask) -> Message | None:
    """The agent's reply (completed), its question (input-required, auth-required) or why
    there is none (failed, rejected, canceled)."""
    answer = _answer(task)
    if answer is not None:
        text = answer[0]
    elif task.terminal:
        text = task.last_error or f"The task was {task.status}."
    else:
        return None
    return Message(
        message_id=f"{task.task_id}-{task.status}",
        context_id=context_id(task),
        task_id=str(task.task_id),
        role=Role.ROLE_AGENT,
        parts=[new_text_part(text)],
        metadata=_struct({"agent": task.agent_name}),
    )


def answer_artifact(task: StoredTask) -> Artifact | None:
    """A completed task's answer: the reply as text and the agent's output as data."""
    answer = _answer(task) if task.status == "completed" else None
    if answer is None:
        return None
    text, output = answer
    parts = [new_text_part(text)]
    if output is not None:
        parts.append(new_data_part(output))
    return Artifact(
        artifact_id=f"{task.task_id}-{ANSWER_ARTIFACT}",
        name=ANSWER_ARTIFACT,
        parts=parts,
        metadata=_struct({"agent": task.agent_name}),
    )


def task_status(task: StoredTask) -> TaskStatus:
    """The task's A2A status: its state, when it got there and, once over, the reply."""
    status = TaskStatus(state=STATES[task.status], timestamp=_timestamp(task))
    reply = agent_message(task)
    if reply is not None:
        status.message.CopyFrom(reply)
    return status


def a2a_task(task: StoredTask) -> Task:
    """A durable task as an A2A Task."""
    history = [user_message(task)]
    reply = agent_message(task)
    if reply is not None:
        history.append(reply)
    artifact = answer_artifact(task)
    return Task(
        id=str(task.task_id),
        context_id=context_id(task),
        status=task_status(task),
        history=history,
        artifacts=[artifact] if artifact is not None else [],
        metadata=_struct(
            {
                "agent": task.agent_name,
                "kind": task.kind,
                "attempt": task.attempt,
                "created_by": task.created_by,
                **({"decision_id": str(task.decision_id)} if task.decision_id else {}),
                **({"last_error": task.last_error} if task.last_error else {}),
            }
        ),
    )


def answer_message(result: MessageResult, message_id: str) -> Message:
    """The coordinator's answer to a message that no agent task answers (a clarifying
    question, a fallback while the agent's circuit is open, no agent at all)."""
    meta: dict[str, Any] = {
        "decision_id": str(result.decision_id),
        "session_version": result.session_version,
        "degraded": result.degraded,
    }
    if result.agent:
        meta["agent"] = result.agent
    if result.fallback:
        meta["fallback"] = result.fallback
    if result.clarification:
        meta["clarification_options"] = list(result.clarification.options)
    return Message(
        message_id=message_id,
        context_id=str(result.session_id),
        role=Role.ROLE_AGENT,
        parts=[new_text_part(result.response)],
        metadata=_struct(meta),
    )
