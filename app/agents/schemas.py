"""Agent request and response shapes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, TypeAlias
from uuid import UUID

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from app.auth.principal import ADMIN_NAME
from app.common.jsontypes import JsonObject
from app.common.validation import StoredHttpUrl, reject_deep_json


def _not_the_admin(name: str) -> str:
    # The admin key writes as "admin": an agent of that name would own the admin's memories.
    if name.lower() == ADMIN_NAME:
        raise ValueError(f"{name!r} is reserved for the admin key")
    return name


AgentName = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_.-]{0,99}$"),
    AfterValidator(_not_the_admin),
]
RoleName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,49}$")]
IntentName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
ShortText = Annotated[str, StringConstraints(max_length=500)]

# An A2A skill as stored and shown: AgentSkill's members and whatever else the agent
# published with it (kept as sent).
PublishedSkill: TypeAlias = JsonObject
# An A2A agent card as the agent published it (kept as sent).
PublishedCard: TypeAlias = JsonObject

CardStatus = Literal["published", "discovered", "unreachable", "invalid"]

# The longest an agent may be given to answer (agents.timeout_ms has the same CHECK).
MAX_AGENT_TIMEOUT_MS = 300_000


class AgentSkill(BaseModel):
    """An A2A-style skill: what an agent can do, with examples and tags for routing."""

    model_config = ConfigDict(extra="allow")

    @model_validator(mode="before")
    @classmethod
    def _bounded_depth(cls, value: Any) -> Any:
        return reject_deep_json(value)  # extra fields are stored as sent

    id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    description: Annotated[str, StringConstraints(max_length=2000)] = ""
    tags: list[Annotated[str, StringConstraints(min_length=1, max_length=100)]] = Field(
        default_factory=list, max_length=50
    )
    examples: list[Annotated[str, StringConstraints(max_length=1000)]] = Field(
        default_factory=list, max_length=50
    )


class AgentSettings(BaseModel):
    """Routing and resilience settings; every field optional (PATCH merges them)."""

    model_config = ConfigDict(extra="forbid")

    roles: list[RoleName] | None = Field(default=None, max_length=20)
    description: ShortText | None = None
    url: StoredHttpUrl | None = None
    timeout_ms: int | None = Field(default=None, ge=50, le=MAX_AGENT_TIMEOUT_MS)
    retry_attempts: int | None = Field(default=None, ge=0, le=10)
    fallback_strategy: IntentName | None = None
    intents: list[IntentName] | None = Field(default=None, max_length=50)
    skills: list[AgentSkill] | None = Field(default=None, max_length=100)
    enabled: bool | None = None
    fail_max: int | None = Field(default=None, ge=1, le=1000)
    reset_timeout_ms: int | None = Field(default=None, ge=10, le=86_400_000)


class AgentCreate(AgentSettings):
    """Register an agent (or issue the first key of a seeded one); the key is returned once."""

    name: AgentName
    # With a url: fetch the agent's A2A card from <url>/.well-known/agent-card.json at
    # registration (as POST /v1/agents/{name}/discover does). Its outcome is the agent's
    # card_status; a card that cannot be had does not refuse the registration.
    discover: bool = False


class AgentCard(BaseModel):
    """An A2A Agent Card, as an agent publishes it (unknown fields are kept)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _bounded_depth(cls, value: Any) -> Any:
        return reject_deep_json(value)  # the card is stored and shown as published

    name: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    description: Annotated[str, StringConstraints(max_length=2000)] = ""
    url: StoredHttpUrl
    version: Annotated[str, StringConstraints(max_length=50)] = "1.0.0"
    skills: list[AgentSkill] = Field(default_factory=list, max_length=100)
    capabilities: JsonObject = Field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Agent:
    """A registered agent (never its key). ``enabled`` is what routing sees: false when it
    was switched off (PATCH ``enabled: false``) or disabled with DELETE (``disabled_at``
    set, its key revoked, until a new key is issued)."""

    agent_id: UUID
    name: str
    roles: list[str]
    created_at: datetime
    disabled_at: datetime | None
    description: str
    url: str | None
    timeout_ms: int
    retry_attempts: int
    fallback_strategy: str | None
    intents: list[str]
    skills: list[PublishedSkill]
    enabled: bool
    fail_max: int
    reset_timeout_ms: int
    has_key: bool
    updated_at: datetime
    # The A2A JSON-RPC interface its card declares: set, the agent is called with A2A
    # SendMessage (app/outbound/a2a.py) instead of the seed's JSON request to ``url``.
    a2a_url: str | None = None
    a2a_protocol_version: str | None = None
    # Where its card came from and how the last fetch went: published, discovered,
    # unreachable or invalid (None: no card); the last error, the last fetch that
    # succeeded and the last one tried.
    card_status: CardStatus | None = None
    card_error: str | None = None
    card_fetched_at: datetime | None = None
    card_checked_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """What authentication needs to know about the owner of a key."""

    agent_id: UUID
    name: str
    roles: list[str]


@dataclass(frozen=True, slots=True)
class AgentWithKey:
    """An agent with its freshly issued key; the key is shown this once only."""

    agent: Agent
    api_key: str


@dataclass(frozen=True, slots=True)
class SkillAgents:
    """One skill and the enabled agents that offer it."""

    skill_id: str
    name: str
    description: str
    tags: list[str]
    agents: list[str]
