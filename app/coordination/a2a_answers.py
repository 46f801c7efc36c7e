"""A2A in Switchboard's words: the message an agent is sent, and its answer (an A2A Task
with its status and artifacts, or a Message) as the seed's response format. Pure.

What is sent: the user's message as a text part; the seed's request (intent, clause,
session, context flags) as the message's ``metadata.switchboard``; the remote task and
context to continue when the agent asked for input before.

What is made of the answer: ``output_data.response`` is the text the user reads (the
task's status message, else its text artifacts; a message's text parts),
``output_data.artifacts`` the task's artifacts as A2A JSON, ``output_data.a2a`` the remote
task id, context id and state. A task that is completed (or a message) is an answer; one
that is input-required or auth-required is an answer too, the agent's question, and the
Switchboard task waits for the user in that state; one that failed, was rejected or
canceled is a failed attempt, and so is one still working (SendMessage is blocking: the
agent returned before its task settled, and Switchboard does not poll).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args
from uuid import uuid4

import msgspec
import orjson
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState
from google.protobuf.json_format import MessageToDict
from pydantic import ValidationError

from app.common.jsonbody import decode_json
from app.coordination.schemas import AgentRequest, AgentResponse
from app.errors import BadRequest, ValidationFailed
from app.tasks.schemas import INTERRUPTED_STATUSES, TaskStatus

# Switchboard's task statuses (A2A's states), and what an unknown or unset state reads as.
A2AStateName = TaskStatus | Literal["unspecified"]
_STATUSES = frozenset(get_args(TaskStatus))
_FAILED = frozenset({"failed", "canceled", "rejected"})


class A2AAnswerFailed(Exception):
    """The agent answered, but not with something the user can be given."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class A2AContinuation(msgspec.Struct, frozen=True, kw_only=True):
    """The remote task a message continues (the agent asked for input)."""

    task_id: str
    context_id: str


@dataclass(frozen=True, slots=True)
class A2AOutcome:
    """An A2A answer in Switchboard's words: the response, and the remote task's state
    (``continuation`` is set when the agent waits for the user)."""

    response: AgentResponse
    state: A2AStateName
    continuation: A2AContinuation | None

    @property
    def interrupted(self) -> bool:
        """The agent waits for the user (input-required or auth-required)."""
        return self.state in INTERRUPTED_STATUSES


def state_name(state: int) -> A2AStateName:
    """An A2A TaskState as Switchboard's task status spells it (TASK_STATE_INPUT_REQUIRED:
    input-required)."""
    name = TaskState.Name(state).removeprefix("TASK_STATE_").lower().replace("_", "-")
    return cast("TaskStatus", name) if name in _STATUSES else "unspecified"


def a2a_message(
    request: AgentRequest | Mapping[str, Any],
    continuation: A2AContinuation | None,
) -> Message:
    """The A2A message for a Switchboard request: the user's text, the request itself in
    ``metadata.switchboard``, the remote task and context when it continues one."""
    document: dict[str, Any] = (
        msgspec.to_builtins(request) if isinstance(request, AgentRequest) else dict(request)
    )
    message = Message(
        message_id=str(uuid4()),
        role=Role.ROLE_USER,
        parts=[Part(text=_request_text(document))],
    )
    if continuation is not None:
        message.task_id = continuation.task_id
        message.context_id = continuation.context_id
    message.metadata.update({"switchboard": document})
    return message


def outcome_of(answer: Task | Message, request_id: str | None) -> A2AOutcome:
    """The agent's A2A answer as the seed's response; ``A2AAnswerFailed`` when it is a
    failure (failed, rejected, canceled, still working) or cannot be stored."""
    if isinstance(answer, Message):
        text = _parts_text(answer.parts)
        a2a = {"message_id": answer.message_id, "context_id": answer.context_id or None}
        output: dict[str, Any] = {"response": text, "a2a": a2a}
        return A2AOutcome(_response(output, request_id), "completed", None)
    state = state_name(answer.status.state)
    said = _parts_text(answer.status.message.parts) if answer.status.HasField("message") else ""
    if state in _FAILED:
        raise A2AAnswerFailed(
            f"agent's A2A task {state}" + (f": {said}" if said else ""), retryable=False
        )
    if state not in INTERRUPTED_STATUSES and state != "completed":
        raise A2AAnswerFailed(
            f"agent's A2A task is still {state} after a blocking SendMessage", retryable=False
        )
    artifacts = [MessageToDict(artifact) for artifact in answer.artifacts]
    text = said or "\n".join(
        text for artifact in answer.artifacts if (text := _parts_text(artifact.parts))
    )
    if not text and state in INTERRUPTED_STATUSES:
        text = "The agent needs more from you to go on."
    output = {
        "response": text,
        "artifacts": artifacts,
        "a2a": {"task_id": answer.id, "context_id": answer.context_id, "state": state},
    }
    continuation = (
        A2AContinuation(task_id=answer.id, context_id=answer.context_id)
        if state in INTERRUPTED_STATUSES and answer.id
        else None
    )
    return A2AOutcome(_response(output, request_id), state, continuation)


def _response(output: dict[str, Any], request_id: str | None) -> AgentResponse:
    """``output`` as a successful response, if it holds only what can be stored (the same
    rule as any agent answer and any client body)."""
    try:
        document = decode_json(orjson.dumps(output))
        return AgentResponse(success=True, request_id=request_id, output_data=document)
    except (BadRequest, ValidationFailed, ValidationError, orjson.JSONEncodeError):
        raise A2AAnswerFailed(
            "agent answered values that cannot be stored", retryable=False
        ) from None


def _parts_text(parts: Any) -> str:
    return "\n".join(part.text for part in parts if part.HasField("text") and part.text)


def _request_text(document: Mapping[str, Any]) -> str:
    """The user's words in a request: its input_data.message, else the input as JSON."""
    data = document.get("input_data")
    if isinstance(data, Mapping):
        message = data.get("message")
        if isinstance(message, str) and message:
            return message
    return orjson.dumps(data if data is not None else document).decode()
