"""Webhook request shapes, flat and forgiving of n8n's habits (fields n8n adds are refused
only where a typo would silently change the meaning)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.agents.schemas import AgentName
from app.common.validation import DateTime
from app.coordination.schemas import ContextFlag, MessageText
from app.memories.schemas import Content, Identifier, MemoryKey, MemoryWrite
from app.sessions.schemas import SessionType

IdempotencyKey = Annotated[str, StringConstraints(min_length=1, max_length=255)]
UserRef = Annotated[str, StringConstraints(min_length=1, max_length=256)]
# Where the user wrote from (kept in the new session's conversation_context).
Channel = Annotated[str, StringConstraints(max_length=50)]


class CoordinationHook(BaseModel):
    """An incoming user message."""

    model_config = ConfigDict(extra="forbid")

    # Who wrote: Switchboard's user id, or your own id for them (created on first use).
    user_id: UUID | None = None
    user_ref: UserRef | None = None
    # Omit to continue the user's latest open session of this type (or start one).
    session_id: UUID | None = None
    session_type: SessionType = "multi_agent_chat"
    text: MessageText
    channel: Channel | None = None
    context_flags: list[ContextFlag] = Field(default_factory=list, max_length=20)
    idempotency_key: IdempotencyKey | None = None

    @model_validator(mode="after")
    def _someone(self) -> CoordinationHook:
        if self.user_id is None and self.user_ref is None and self.session_id is None:
            raise ValueError("send user_id, user_ref or session_id")
        if self.user_id is not None and self.user_ref is not None:
            raise ValueError("send user_id or user_ref, not both")
        return self


class MemoryHook(BaseModel):
    """The seed's memory update request, plus reads and queries."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["write", "read", "query"] = "write"
    # The agent this is for (seed: required). A coordination_manager key may name any
    # registered agent; other agents only themselves.
    agent_name: AgentName
    user_id: UUID | None = None
    memory_type: Identifier | None = None
    memory_content: Content | None = None
    session_id: UUID | None = None
    category: Identifier | None = None
    key: MemoryKey | None = None
    access_level: Identifier | None = None
    # read
    memory_id: UUID | None = None
    # query
    since: DateTime | None = None
    contains: dict[str, Any] | list[Any] | None = None
    limit: int = Field(default=50, ge=1, le=200)
    cursor: Annotated[str, StringConstraints(max_length=512)] | None = None
    idempotency_key: IdempotencyKey | None = None

    @model_validator(mode="after")
    def _required_for_action(self) -> MemoryHook:
        missing: list[str] = []
        if self.action == "write":
            missing = [
                name
                for name in ("user_id", "memory_type", "memory_content")
                if getattr(self, name) is None
            ]
        elif self.action == "read" and self.memory_id is None:
            missing = [
                name for name in ("user_id", "category", "key") if getattr(self, name) is None
            ]
            if missing:
                missing = ["memory_id (or user_id, category and key)"]
        elif self.action == "query" and self.user_id is None and self.session_id is None:
            missing = ["user_id or session_id"]
        if self.since is not None and self.since.tzinfo is None:
            raise ValueError("since needs a timezone")
        if missing:
            raise ValueError(f"{self.action} needs {', '.join(missing)}")
        return self

    def write(self) -> MemoryWrite:
        """The memory ``action: write`` stores (its required fields are checked above)."""
        return MemoryWrite.model_validate(
            {
                "user_id": self.user_id,
                "session_id": self.session_id,
                "memory_type": self.memory_type,
                "category": self.category,
                "key": self.key,
                "content": self.memory_content,
                "access_level": self.access_level,
            }
        )

    def memory_name(self) -> tuple[UUID, str, str] | None:
        """(user_id, category, key) when they name the memory to read, else None."""
        if self.user_id is None or self.category is None or self.key is None:
            return None
        return self.user_id, self.category, self.key


class CleanupHook(BaseModel):
    """Run a cleanup job (or all) now."""

    model_config = ConfigDict(extra="forbid")

    job: Annotated[str, StringConstraints(min_length=1, max_length=64)] = "all"
    dry_run: bool = False
    idempotency_key: IdempotencyKey | None = None
