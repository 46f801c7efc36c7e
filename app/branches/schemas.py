"""Branch shapes: what a client sends to fork, merge and rebase, and what it reads back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

import msgspec
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from app.common.preconditions import MAX_VERSION
from app.sessions.schemas import AgentRef

# The seed's purposes of a branch (seed 004: "conversation branches").
BranchPurpose = Literal[
    "analysis", "alternative_solution", "verification", "collaboration", "conflict_resolution"
]
# Lowercase letters, digits, '.', '_' and '-' (a path segment as it is); "main" is the
# session itself.
BRANCH_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
BranchName = Annotated[str, StringConstraints(pattern=BRANCH_NAME_PATTERN)]
MAIN = "main"


class BranchCreate(BaseModel):
    """Fork the session into a named branch."""

    model_config = ConfigDict(extra="forbid")

    name: BranchName
    purpose: BranchPurpose
    # The agent that owns the branch; default: the caller.
    owner_agent: AgentRef | None = None
    # The session version to fork at; default: the current one.
    from_version: int | None = Field(default=None, ge=1, le=MAX_VERSION)

    @model_validator(mode="after")
    def _not_main(self) -> BranchCreate:
        if self.name == MAIN:
            raise ValueError('"main" is the session itself; name the branch otherwise')
        return self


class PathChoice(BaseModel):
    """How one conflicting path is settled: ``ours`` (the branch's value), ``theirs`` (the
    session's), ``value`` (the one given) or ``remove``."""

    model_config = ConfigDict(extra="forbid")

    take: Literal["ours", "theirs", "value", "remove"]
    value: Any = None


class MergeResolution(BaseModel):
    """Completes a merge (or rebase) that conflicted: a choice for each conflicting path
    (keys are the JSON Pointers the 409 listed), or a whole ``document`` to write. Without
    either, the merge must be clean."""

    model_config = ConfigDict(extra="forbid")

    choices: dict[str, PathChoice] | None = None
    # Any of session_state, agent_sequence, coordination_metadata, current_agent,
    # progress_percentage, priority; what it leaves out comes from the merge.
    document: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> MergeResolution:
        if self.choices is not None and self.document is not None:
            raise ValueError("send choices or a document, not both")
        return self


class Branch(msgspec.Struct, frozen=True):
    """A branch as the API shows it: where it sits on its parent, its head and content."""

    session_id: UUID
    name: str
    parent: str
    purpose: str
    owner_agent: str
    state: str
    base_version: int
    forked_at_version: int
    version: int
    session_state: dict[str, Any]
    agent_sequence: list[dict[str, Any]]
    coordination_metadata: dict[str, Any]
    current_agent: str | None
    progress_percentage: int
    priority: str
    merged_version: int | None
    created_by: str
    created_at: datetime
    updated_at: datetime
    last_activity_at: datetime


@dataclass(frozen=True, slots=True)
class BranchList:
    """A session's branches, oldest first, and the session's head (to see how far behind)."""

    items: list[Branch]
    session_version: int


@dataclass(frozen=True, slots=True)
class BranchVersion:
    """One committed change of a branch."""

    session_id: UUID
    branch: str
    version: int
    session_state: dict[str, Any]
    agent_sequence: list[dict[str, Any]]
    coordination_metadata: dict[str, Any]
    current_agent: str | None
    progress_percentage: int
    priority: str
    changed_by: str
    change_reason: str
    created_at: datetime
    # An auto-merged write: the branch version it was based on.
    merge_base: int | None
    # A fork or rebase: the session version this branch version sits on.
    parent_version: int | None


@dataclass(frozen=True, slots=True)
class BranchVersionPage:
    """One page of a branch's history, newest first."""

    items: list[BranchVersion]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class GraphNode:
    """One version in a session's graph: ``main`` or a branch, and the versions it came
    from (``branch@version``): the one before it, and for a fork, rebase or merge the
    version on the other line as well."""

    id: str
    branch: str
    version: int
    parents: list[str]
    changed_by: str
    change_reason: str
    created_at: datetime
    merge_base: int | None


@dataclass(frozen=True, slots=True)
class SessionGraph:
    """The versions of a session and of its live branches, as a graph."""

    session_id: UUID
    nodes: list[GraphNode]
