"""What an erasure answers: the old summary fields, then rows per table."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class UserErased:
    """What a right-to-be-forgotten delete removed (``deleted``) and rewrote in rows that
    stay (``redacted``), per table. ``erasure_id`` names the erasure record."""

    user_id: UUID
    sessions_deleted: int
    erasure_id: UUID
    deleted: dict[str, int]
    redacted: dict[str, int]


@dataclass(frozen=True, slots=True)
class MemoriesErased:
    """What erasing a user's memories removed and redacted, per table."""

    user_id: UUID
    memories_deleted: int
    archived_deleted: int
    erasure_id: UUID
    deleted: dict[str, int]
    redacted: dict[str, int]
