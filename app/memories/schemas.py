"""Memory request and response shapes."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeAlias
from uuid import UUID

import msgspec
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from app.common.jsontypes import JsonValue
from app.common.validation import reject_deep_json
from app.sessions.schemas import Session

IDENTIFIER_PATTERN = re.compile(r"^[a-z][a-z0-9_]{0,49}$")
MAX_RETENTION_SECONDS = 100 * 365 * 86_400
Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN.pattern)]
MemoryKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]

MAX_BATCH = 500

# What an audited access asked for (``memory_access_log.query``): the names of the filters
# and the values given, as text or counts.
AuditQuery: TypeAlias = Mapping[str, str | int]


def _require_bounded_content(value: Any) -> Any:
    if value is None:
        raise ValueError("content is required and may not be null")
    return reject_deep_json(value)


# Any JSON value except null, nested at most MAX_JSON_DEPTH levels.
Content = Annotated[Any, BeforeValidator(_require_bounded_content)]


class MemoryWrite(BaseModel):
    """One memory to store. The writing agent comes from the API key, not from here."""

    model_config = ConfigDict(extra="forbid")

    user_id: UUID
    session_id: UUID | None = None
    memory_type: Identifier
    # Defaults from the memory type (e.g. planning -> agent_outputs), else session_data.
    category: Identifier | None = None
    # Optional name of the fact; (user_id, category, key) is unique.
    key: MemoryKey | None = None
    content: Content
    # Defaults to the category's access level.
    access_level: Identifier | None = None


class MemoryUpsert(BaseModel):
    """Create or replace the memory named (user_id, category, key)."""

    model_config = ConfigDict(extra="forbid")

    user_id: UUID
    category: Identifier
    key: MemoryKey
    memory_type: Identifier
    session_id: UUID | None = None
    content: Content
    access_level: Identifier | None = None


class CategoryWrite(BaseModel):
    """Create a category or change one (admin)."""

    model_config = ConfigDict(extra="forbid")

    # Seconds a memory is kept after its last write; null keeps it until deleted. At most
    # 100 years: beyond that "until deleted" is what is meant, and far larger numbers
    # overflow the interval arithmetic.
    retention_seconds: int | None = Field(default=None, ge=60, le=MAX_RETENTION_SECONDS)
    default_access_level: Identifier
    description: Annotated[str, StringConstraints(max_length=500)] = ""


class MemoryTypeWrite(BaseModel):
    """Register a memory type (admin)."""

    model_config = ConfigDict(extra="forbid")

    name: Identifier
    default_category: Identifier
    description: Annotated[str, StringConstraints(max_length=500)] = ""


class Memory(msgspec.Struct, frozen=True, gc=False):
    """A stored memory. A msgspec struct, not a dataclass like the other views: lists
    build and encode many of these per request, and a struct does both several times
    faster than a frozen dataclass (docs/benchmarks.md). Untracked by the cyclic garbage
    collector (``gc=False``): its fields are ids, strings, times and decoded JSON, which
    can never refer back to it, and a list of 20 otherwise set off a young collection
    every few requests."""

    memory_id: UUID
    user_id: UUID
    session_id: UUID | None
    agent_name: str
    memory_type: str
    category: str
    key: str | None
    content: JsonValue
    content_size: int
    access_level: str
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class MemoryBatch:
    """The memories a batch write stored, in request order."""

    items: list[Memory]


@dataclass(frozen=True, slots=True)
class MemoryPage:
    """One page of memories, newest first."""

    items: list[Memory]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Category:
    """A memory category and its rules."""

    name: str
    retention_seconds: int | None
    default_access_level: str
    description: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class CategoryChange:
    """A category after a change, and how many memories got a new expiry."""

    category: Category
    created: bool
    memories_reexpired: int | None


@dataclass(frozen=True, slots=True)
class MemoryType:
    """A memory type and the category it lands in by default."""

    name: str
    default_category: str
    description: str
    created_at: datetime


@dataclass(frozen=True, slots=True)
class AccessLevel:
    """Who may read memories of a level."""

    level: str
    required_role: str | None
    description: str


@dataclass(frozen=True, slots=True)
class SessionContext:
    """A session plus the memories the caller may see for it, within a byte budget."""

    session: Session
    memories: list[Memory]
    memory_bytes: int
    truncated: bool


@dataclass(frozen=True, slots=True)
class AccessLogEntry:
    """One audited memory access."""

    log_id: UUID
    agent_name: str
    acting_principal: str | None
    action: str
    memory_id: UUID | None
    query: JsonValue
    allowed: bool
    rows: int
    at: datetime


@dataclass(frozen=True, slots=True)
class AccessLogPage:
    """One page of the audit log, newest first."""

    items: list[AccessLogEntry]
    next_cursor: str | None


class BranchMemoryWrite(BaseModel):
    """Create or replace the branch's value of (category, key); the user is the session's."""

    model_config = ConfigDict(extra="forbid")

    category: Identifier
    key: MemoryKey
    memory_type: Identifier
    content: Content
    # Defaults to the category's access level.
    access_level: Identifier | None = None


class BranchMemory(Memory, frozen=True):
    """A memory as a branch reads it: ``branch`` names the branch when the branch wrote
    it, ``main`` when it is main's memory showing through."""

    branch: str


@dataclass(frozen=True, slots=True)
class BranchMemoryPage:
    """A page of the memories a branch sees, newest first."""

    items: list[BranchMemory]
    next_cursor: str | None
