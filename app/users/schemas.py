"""User request and response shapes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, StringConstraints

ExternalRef = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class UserCreate(BaseModel):
    """Create a user, optionally tied to the caller's own identifier for them."""

    model_config = ConfigDict(extra="forbid")

    external_ref: ExternalRef | None = None


@dataclass(frozen=True, slots=True)
class User:
    """A user as stored."""

    id: UUID
    external_ref: str | None
    created_at: datetime
    deleted_at: datetime | None
