"""Session shapes, following the seed's ``SessionCoordinationState``.

``session_state`` and ``coordination_metadata`` are validated as a whole after every write
(create, merge patch, handoff, rollback), so a stored session always has this shape. Two
values appear in two places for the seed's sake but are stored once: the progress lives in
the ``progress_percentage`` column and is shown as ``session_state.progress_percentage`` too;
the priority lives in ``priority`` and is shown as ``coordination_metadata.session_priority``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal
from uuid import UUID

import msgspec
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    model_validator,
)

from app.common.preconditions import MAX_VERSION
from app.common.validation import DateTime, reject_deep_json

if TYPE_CHECKING:  # app/sessions/sequence.py types its steps with this module's models
    from app.sessions.sequence import AgentSequence

SessionType = Literal["multi_agent_chat", "planning_session", "consultation", "education"]
# Where a session is in its work. Expiry is not a status: an expired session leaves for the
# archive (docs/design.md, "Sessions").
SessionStatus = Literal["active", "idle", "completed", "escalated"]
# A completed session takes no content changes (only `preserve` may still change). The one
# place Python spells the closed status; SQL's is session_open() in sql/schema.sql.
CLOSED_STATUSES = frozenset({"completed"})
Priority = Literal["low", "normal", "high", "urgent"]
ExecutionStatus = Literal["pending", "executing", "completed", "failed"]
# Statuses a client may set directly; completed comes from /complete.
SettableStatus = Literal["active", "idle", "escalated"]
Progress = Annotated[int, Field(ge=0, le=100)]
AGENT_REF_MAX = 100
AgentRef = Annotated[str, StringConstraints(min_length=1, max_length=AGENT_REF_MAX)]
SHORT_TEXT_MAX = 4000
ShortText = Annotated[str, StringConstraints(max_length=SHORT_TEXT_MAX)]
# Validation context of a session_state whose nesting the caller already bounded (a PATCH
# checks its own patch's depth: app/sessions/patching.py).
DEPTH_CHECKED = "depth_checked"
# Bounds on the lists the server appends to; it trims its own additions to stay inside them.
MAX_PENDING_ACTIONS = 1000
PendingStatus = Literal["pending", "in_progress", "done", "cancelled", "failed"]


class ConversationContext(BaseModel):
    """What the conversation is about; agents may add keys of their own."""

    model_config = ConfigDict(extra="allow", frozen=True)

    summary: ShortText | None = None
    last_intent: str | None = None
    topics: list[str] = Field(default_factory=list)
    turn_count: int = Field(default=0, ge=0)


class PendingAction(BaseModel):
    """Something the session still has to do (e.g. a secondary intent queued for later).

    Clients and the coordinator write the same shape. The coordinator also sets ``id``
    (names the action while it is worked on; given to every action it queues or claims),
    ``attempts`` (how often it tried the action), ``reason`` (why it was queued, or why it
    gave up), ``claimed_at`` with the status ``in_progress`` (an agent is working on it),
    ``task_id`` (the agent task working on it, once its caller stopped waiting) and the
    status ``failed`` (it stopped trying); clients may set them too.
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = None
    type: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    description: ShortText | None = None
    priority_score: int = Field(default=0, ge=0, le=100)
    status: PendingStatus = "pending"
    created_at: DateTime | None = None
    attempts: int = Field(default=0, ge=0)
    reason: ShortText | None = None
    claimed_at: DateTime | None = None
    # The agent task working on the action (app/coordination/completion.py settles it).
    task_id: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )


class UserPreferences(BaseModel):
    """How the user likes to be served; agents may add keys of their own."""

    model_config = ConfigDict(extra="allow", frozen=True)

    language: str | None = None
    communication_style: str | None = None
    notification_channel: str | None = None
    timezone: str | None = None


class SessionState(BaseModel):
    """The seed's ``session_state``: the shared working memory of the session."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _bounded_depth(cls, value: Any, info: ValidationInfo) -> Any:
        if info.context is not None and info.context.get(DEPTH_CHECKED):
            return value
        return reject_deep_json(value)

    active_process: Annotated[str, StringConstraints(min_length=1, max_length=200)] | None = None
    progress_percentage: Progress | None = None
    conversation_context: ConversationContext = Field(default_factory=ConversationContext)
    pending_actions: list[PendingAction] = Field(
        default_factory=list, max_length=MAX_PENDING_ACTIONS
    )
    agent_outputs: dict[str, Any] = Field(default_factory=dict)
    user_preferences: UserPreferences = Field(default_factory=UserPreferences)


class CoordinationMetadata(BaseModel):
    """The seed's ``coordination_metadata``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_priority: Priority | None = None
    complexity_score: float | None = Field(default=None, ge=0, le=100)
    # Seconds the coordinator expects the session still needs.
    estimated_completion_time: int | None = Field(default=None, ge=0)
    resource_requirements: list[Annotated[str, StringConstraints(max_length=200)]] = Field(
        default_factory=list, max_length=100
    )


class AgentExecution(BaseModel):
    """One step of the session's agent sequence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent_name: AgentRef
    execution_order: int = Field(ge=1)
    status: ExecutionStatus
    start_time: datetime | None = None
    completion_time: datetime | None = None
    output_summary: ShortText | None = None
    next_agent: AgentRef | None = None
    # The agent task of an execution still running after its turn was answered (the
    # caller stopped waiting): it is closed when the task ends, not by the next turn.
    task_id: Annotated[str, StringConstraints(min_length=1, max_length=100)] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )


class SessionEditable(BaseModel):
    """Everything a client may change with a merge patch; validated after the patch applies."""

    model_config = ConfigDict(extra="forbid")

    session_state: SessionState = Field(default_factory=SessionState)
    coordination_metadata: CoordinationMetadata = Field(default_factory=CoordinationMetadata)
    progress_percentage: Progress
    priority: Priority
    current_agent: AgentRef | None = None
    preserve: bool
    status: SettableStatus


class SessionDocument(BaseModel):
    """The versioned content as one document (the storage form, no mirrored copies): what
    a three-way merge compares and produces. A merged or resolved document is validated
    as this before it is written."""

    model_config = ConfigDict(extra="forbid")

    session_state: SessionState
    agent_sequence: list[AgentExecution]
    coordination_metadata: CoordinationMetadata
    current_agent: AgentRef | None
    progress_percentage: Progress
    priority: Priority
    status: SessionStatus


class SessionCreate(BaseModel):
    """Open a session for a user."""

    model_config = ConfigDict(extra="forbid")

    user_id: UUID
    session_type: SessionType = "multi_agent_chat"
    session_state: SessionState = Field(default_factory=SessionState)
    coordination_metadata: CoordinationMetadata = Field(default_factory=CoordinationMetadata)
    progress_percentage: Progress | None = None
    priority: Priority | None = None
    current_agent: AgentRef | None = None
    preserve: bool = False
    # Lifetime from now; the default and the ceiling are settings.
    ttl_seconds: int | None = Field(default=None, ge=60)


class Handoff(BaseModel):
    """Pass the session from the current agent to the next one."""

    model_config = ConfigDict(extra="forbid")

    to_agent: AgentRef
    reason: Annotated[str, StringConstraints(min_length=1, max_length=500)]
    output_summary: ShortText | None = None
    # The outgoing agent's result: completed (default) or failed.
    outcome: Literal["completed", "failed"] = "completed"
    base_version: int | None = Field(default=None, ge=1, le=MAX_VERSION)


class Completion(BaseModel):
    """Mark the session completed."""

    model_config = ConfigDict(extra="forbid")

    output_summary: ShortText | None = None
    base_version: int | None = Field(default=None, ge=1, le=MAX_VERSION)


class Rollback(BaseModel):
    """Restore the content of an earlier version as a new version."""

    model_config = ConfigDict(extra="forbid")

    to_version: int = Field(ge=1)
    base_version: int | None = Field(default=None, ge=1, le=MAX_VERSION)


class Session(msgspec.Struct, frozen=True, gc=False):
    """A session as the API shows it (a msgspec struct, as Memory: built and encoded on
    most requests; untracked by the cyclic garbage collector as Memory is, for the same
    reason: nothing it holds can refer back to it)."""

    session_id: UUID
    user_id: UUID
    session_type: str
    status: str
    priority: str
    current_agent: str | None
    agent_sequence: list[dict[str, Any]]
    session_state: dict[str, Any]
    coordination_metadata: dict[str, Any]
    progress_percentage: int
    preserve: bool
    version: int
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime
    expires_at: datetime
    completed_at: datetime | None


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of a user's sessions, newest first."""

    items: list[Session]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SessionVersion:
    """One committed change of a session."""

    session_id: UUID
    version: int
    session_state: dict[str, Any]
    agent_sequence: list[dict[str, Any]]
    coordination_metadata: dict[str, Any]
    current_agent: str | None
    progress_percentage: int
    status: str
    priority: str
    changed_by: str
    change_reason: str
    created_at: datetime
    # A merged write: the version it was based on; a branch merge: the branch and the
    # branch version it took in as well (docs/design.md, "Auto-merge", "Branches").
    merge_base: int | None = None
    merged_branch: str | None = None
    merged_branch_version: int | None = None


@dataclass(frozen=True, slots=True)
class SessionVersionPage:
    """One page of a session's history, newest first."""

    items: list[SessionVersion]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SessionContent:
    """The versioned content of a session, typed: what every write (a client's, the
    coordinator's, a rollback) produces and the repository stores. Its models validate on
    construction, so content that exists is content a client PATCH accepts. The mirrored
    copies (``session_state.progress_percentage``, ``coordination_metadata.session_priority``)
    are never set here: their columns are the truth."""

    session_state: SessionState
    # Typed where a write touched it, the other steps as stored (app/sessions/sequence.py).
    agent_sequence: AgentSequence
    coordination_metadata: CoordinationMetadata
    current_agent: str | None
    progress_percentage: int
    status: str
    priority: str
    preserve: bool
    completed_at: datetime | None


@dataclass(frozen=True, slots=True)
class PatchedContent:
    """A client PATCH's content (app/sessions/patching.py): what the patch touched validated
    as :class:`SessionContent` validates it, ``session_state`` and ``coordination_metadata``
    in their storage form (no mirrored copies): the members the patch did not touch as they
    were stored (they were validated when written), the ones it touched dumped from their
    models. The agent sequence is carried as stored (a PATCH cannot change it)."""

    session_state: dict[str, Any]
    agent_sequence: AgentSequence
    coordination_metadata: dict[str, Any]
    current_agent: str | None
    progress_percentage: int
    status: str
    priority: str
    preserve: bool
    completed_at: datetime | None


# What a write stores: content typed whole, or a client PATCH's (typed where it touched it).
WrittenContent = SessionContent | PatchedContent
