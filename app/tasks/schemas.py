"""Task shapes: what is submitted, the stored task, its history, dead letters, and what a
handler raises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from app.common.validation import DateTime

TaskStatus = Literal[
    "submitted",
    "working",
    "input-required",
    "auth-required",
    "completed",
    "failed",
    "canceled",
    "rejected",
]
TERMINAL_STATUSES = frozenset({"completed", "failed", "canceled", "rejected"})
# The A2A states in which a task waits for the user (the user's next message resumes it).
INTERRUPTED_STATUSES = frozenset({"input-required", "auth-required"})
TaskKind = Literal["message", "pending_action", "handoff", "classify", "agent_call"]
TASK_KINDS: tuple[TaskKind, ...] = (
    "message",
    "pending_action",
    "handoff",
    "classify",
    "agent_call",
)
DeadLetterState = Literal["open", "requeued", "discarded", "all"]
FailureReason = Literal["attempts_exhausted", "not_retryable", "lease_expired"]


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to submit. ``max_attempts`` None: one plus the agent's retries (settings)."""

    agent_name: str
    kind: str
    input: dict[str, Any]
    session_id: UUID | None = None
    user_id: str | None = None
    priority: int = 5
    idempotency_key: str | None = None
    decision_id: UUID | None = None
    max_attempts: int | None = None
    scheduled_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Task:
    """A stored task: what it is for, where it is in its life, and how it ended."""

    task_id: UUID
    session_id: UUID | None
    user_id: str | None
    agent_name: str
    kind: str
    input: dict[str, Any]
    priority: int
    scheduled_at: datetime
    status: TaskStatus
    attempt: int
    max_attempts: int
    lease_owner: str | None
    lease_expires_at: datetime | None
    idempotency_key: str | None
    created_by: str
    trace_id: str | None
    traceparent: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    last_error: str | None
    result: dict[str, Any] | None
    decision_id: UUID | None
    detached: bool
    requeue_of: UUID | None

    @property
    def terminal(self) -> bool:
        """True once the task is completed, failed, canceled or rejected (final)."""
        return self.status in TERMINAL_STATUSES

    @property
    def interrupted(self) -> bool:
        """True while the task waits for the user's input (input-required, auth-required)."""
        return self.status in INTERRUPTED_STATUSES

    @property
    def answered(self) -> bool:
        """True when the agent has answered (completed) or asked the user something
        (input-required, auth-required): its result, when there is one, holds which."""
        return self.status == "completed" or self.interrupted

    @property
    def settled(self) -> bool:
        """True once nothing more happens without someone: terminal, or waiting for input."""
        return self.terminal or self.interrupted


@dataclass(frozen=True, slots=True)
class TaskTransition:
    """One step of a task's life: from which status to which, at which attempt, who, why."""

    from_status: str | None
    to_status: str
    attempt: int
    actor: str
    reason: str | None
    at: datetime
    # When the task was due next: after a retry, the end of its backoff.
    due_at: datetime


@dataclass(frozen=True, slots=True)
class TaskDetail:
    """A task with its transition history."""

    task: Task
    transitions: list[TaskTransition]


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of a session's tasks, newest first."""

    items: list[Task]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A task that failed for good, and what a person did about it."""

    dead_letter_id: UUID
    task_id: UUID
    agent_name: str
    kind: str
    session_id: UUID | None
    user_id: str | None
    attempts: int
    failure_reason: str
    last_error: str | None
    failed_at: datetime
    manual_intervention_required: bool
    escalation_level: int
    requeued_task_id: UUID | None
    requeued_at: datetime | None
    requeued_by: str | None
    discarded_at: datetime | None
    discarded_by: str | None
    discard_reason: str | None


@dataclass(frozen=True, slots=True)
class DeadLetterPage:
    """One page of dead letters, newest first."""

    items: list[DeadLetter]
    next_cursor: str | None


class TaskCreate(BaseModel):
    """POST /v1/tasks: an agent call to run durably (kind agent_call)."""

    model_config = ConfigDict(extra="forbid")

    agent_name: Annotated[str, Field(min_length=1, max_length=100)]
    # What the agent is sent (the seed's request_format), as it is.
    input: dict[str, Any]
    session_id: UUID | None = None
    user_id: Annotated[str | None, Field(min_length=1, max_length=256)] = None
    priority: Annotated[int, Field(ge=1, le=10)] = 5
    max_attempts: Annotated[int | None, Field(ge=1, le=100)] = None
    # RFC 3339 with an offset, within the years 1 to 9999 in UTC (else 422, not a 500).
    scheduled_at: DateTime | None = None


class TaskFailed(Exception):
    """Raised by a handler: the attempt failed; ``retryable`` says whether another may help."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class TaskDelayed(Exception):
    """Raised by a handler: the attempt was not made (the agent's circuit is open); try
    again at ``until`` without counting an attempt."""

    def __init__(self, until: datetime, reason: str) -> None:
        super().__init__(reason)
        self.until = until
        self.reason = reason


class TaskInputRequired(Exception):
    """Raised by a handler: the agent answered that it waits for the user (A2A
    ``input-required`` or ``auth-required``); the task waits in ``status`` holding
    ``result`` (the agent's question, what to continue) until it is resumed."""

    def __init__(self, status: Literal["input-required", "auth-required"], result: dict[str, Any]):
        super().__init__(status)
        self.status = status
        self.result = result


# A handler runs one attempt: it returns the result document or raises TaskFailed,
# TaskDelayed or TaskInputRequired. on_finished runs once after the task reached a terminal
# state (and each time it stops to wait for input), on the replica that finished it,
# outside the finishing transaction.
Handler = Callable[[Task], Awaitable[dict[str, Any]]]
FinishedHook = Callable[[Task], Awaitable[None]]
