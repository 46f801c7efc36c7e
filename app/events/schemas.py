"""Event shapes: the event types, subscriptions, deliveries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.common.validation import StoredHttpUrl

EVENT_TYPES = (
    "session.expiring",
    "session.expired",
    "session.archived",
    "session.restored",
    "memory.purged",
    "task.completed",
    "task.failed",
    # A durable task failed for good (app/tasks/; written by agent_task_dead_lettered).
    "task.dead_lettered",
    # (revision 0024) Every new version of a session (session_version_told in schema.sql);
    # a handoff's version is session.handoff instead.
    "session.version",
    "session.handoff",
    # Every transition of a durable task (agent_task_transition in schema.sql).
    "task.transition",
    # A circuit breaker changed state (save_breaker in coordination.sql).
    "breaker.changed",
    # A session waits for a person (session_escalate: the next-step decision or a dead
    # letter) and a person resolved it (app/coordination/escalation.py).
    "session.escalated",
    "session.resolved",
)
EventType = Literal[
    "session.expiring",
    "session.expired",
    "session.archived",
    "session.restored",
    "memory.purged",
    # A message's agent task that the caller stopped waiting for ended: its answer was
    # applied to the session (completed) or it gave up (failed): app/coordination/completion.py.
    "task.completed",
    "task.failed",
    "task.dead_lettered",
    "session.version",
    "session.handoff",
    "task.transition",
    "breaker.changed",
    "session.escalated",
    "session.resolved",
]


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to write to the outbox with the change it describes."""

    event_type: EventType
    payload: dict[str, Any]


class SubscriptionCreate(BaseModel):
    """Subscribe a URL to event types."""

    model_config = ConfigDict(extra="forbid")

    url: StoredHttpUrl
    event_types: list[EventType] = Field(min_length=1, max_length=len(EVENT_TYPES))
    # Generated (and shown once) when not given.
    secret: Annotated[str, StringConstraints(min_length=16, max_length=200)] | None = None


@dataclass(frozen=True, slots=True)
class Subscription:
    """A subscriber (never its secret)."""

    subscription_id: UUID
    url: str
    event_types: list[str]
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True, slots=True)
class SubscriptionWithSecret:
    """A new subscriber and the secret its signatures use, shown once."""

    subscription: Subscription
    secret: str


@dataclass(frozen=True, slots=True)
class EventDelivery:
    """An event and the state of its delivery to one subscriber."""

    event_id: UUID
    event_type: str
    payload: dict[str, Any]
    created_at: datetime
    subscription_id: UUID
    status: str
    attempts: int
    last_error: str | None
    delivered_at: datetime | None
    next_attempt_at: datetime
    # The trace of the request or job that wrote the event (None for older events).
    trace_id: str | None


@dataclass(frozen=True, slots=True)
class EventDeliveryPage:
    """A page of deliveries, newest event first."""

    items: list[EventDelivery]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SubscriberDelivery:
    """An event's delivery to one subscriber: where, how it went, and the last error."""

    subscription_id: UUID
    url: str
    status: str
    attempts: int
    last_error: str | None
    delivered_at: datetime | None
    next_attempt_at: datetime


@dataclass(frozen=True, slots=True)
class EventDetail:
    """One event, its payload and its delivery to each subscriber."""

    event_id: UUID
    event_type: str
    payload: dict[str, Any]
    created_at: datetime
    trace_id: str | None
    deliveries: list[SubscriberDelivery]


@dataclass(frozen=True, slots=True)
class DueDelivery:
    """A delivery claimed for sending."""

    event_id: UUID
    subscription_id: UUID
    attempts: int
    event_type: str
    payload: dict[str, Any]
    created_at: datetime
    url: str
    secret: str
    # An A2A push config's delivery target (app/a2a/push.py): its token and authentication.
    push: bool = False
    push_token: str | None = None
    push_authentication: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """A numbered outbox event as the event streams send it: ``frame`` is its whole SSE
    message, encoded once and shared by every stream that sends it."""

    position: int
    event_type: str
    # The session the payload names, if any (what a session's stream selects by).
    session_id: str | None
    frame: bytes
