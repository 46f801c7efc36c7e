"""Agent request and response shapes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

AgentName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$")]
RoleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,49}$")]

# Roles the rest of the system gives meaning to; others are allowed and simply carried.
KNOWN_ROLES = ("authorized", "analytics", "coordination_manager")


class AgentCreate(BaseModel):
    """Register an agent; its key is returned once."""

    model_config = ConfigDict(extra="forbid")

    name: AgentName
    roles: list[RoleName] = Field(default_factory=list, max_length=20)


@dataclass(frozen=True, slots=True)
class Agent:
    """A registered agent (never its key)."""

    agent_id: UUID
    name: str
    roles: list[str]
    created_at: datetime
    disabled_at: datetime | None


@dataclass(frozen=True, slots=True)
class AgentWithKey:
    """An agent with its freshly issued key; the key is shown this once only."""

    agent_id: UUID
    name: str
    roles: list[str]
    created_at: datetime
    disabled_at: datetime | None
    api_key: str

    @classmethod
    def issue(cls, agent: Agent, api_key: str) -> AgentWithKey:
        """Pair an agent with the key just generated for it."""
        return cls(
            agent.agent_id, agent.name, agent.roles, agent.created_at, agent.disabled_at, api_key
        )
