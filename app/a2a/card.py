"""Switchboard's A2A 1.0 agent card, built with the a2a-sdk's types and serialized by it
(the SDK adds the fields A2A 0.3 clients read: ``url``, ``protocolVersion``,
``preferredTransport``). It advertises exactly what works: the JSON-RPC interface at
``A2A_PATH``, streaming, push notifications, no extended card; the API keys as its
security schemes; the coordinator's own skill and every skill of the registry's skill map
(the skills the enabled agents' published cards offer)."""

from __future__ import annotations

from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    APIKeySecurityScheme,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import PROTOCOL_VERSION_0_3, PROTOCOL_VERSION_1_0, TransportProtocol

from app.agents.schemas import SkillAgents

# Where the JSON-RPC binding is served (app/a2a/route.py).
A2A_PATH = "/a2a"
DESCRIPTION = (
    "Session coordination for multi-agent systems: a message is routed to the right agent "
    "(intent analysis, priorities, circuit breakers, fallbacks) as a durable task, with "
    "shared session state and memories. contextId is the Switchboard session."
)
COORDINATE = AgentSkill(
    id="coordinate_message",
    name="Coordinate a message",
    description=(
        "Route a user message to the agent for its intent and answer with that agent's "
        "task; without a contextId, metadata.user_id or metadata.user_ref names the user "
        "whose latest open session continues."
    ),
    tags=["coordination", "routing", "intent"],
    examples=["I lost my job and need a new budget"],
    input_modes=["text/plain"],
    output_modes=["text/plain", "application/json"],
)


def registry_skill(skill: SkillAgents) -> AgentSkill:
    """A skill of the registry's skill map, as the card lists it."""
    return AgentSkill(
        id=skill.skill_id,
        name=skill.name,
        description=skill.description or f"Offered by {', '.join(skill.agents)}.",
        tags=skill.tags or ["agent"],
    )


def agent_card(base_url: str, version: str, skills: list[SkillAgents]) -> AgentCard:
    """The card for clients reaching Switchboard at ``base_url``."""
    return AgentCard(
        name="Switchboard",
        description=DESCRIPTION,
        version=version,
        documentation_url=f"{base_url}/schema",
        supported_interfaces=[
            AgentInterface(
                url=f"{base_url}{A2A_PATH}",
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_1_0,
            ),
            # The same endpoint serves 0.3 methods (message/send, tasks/get...): the SDK
            # writes this interface as the 0.3 card's url and preferredTransport.
            AgentInterface(
                url=f"{base_url}{A2A_PATH}",
                protocol_binding=TransportProtocol.JSONRPC.value,
                protocol_version=PROTOCOL_VERSION_0_3,
            ),
        ],
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=True, extended_agent_card=False
        ),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(
                    scheme="bearer", description="Authorization: Bearer <Switchboard API key>"
                )
            ),
            "apiKey": SecurityScheme(
                api_key_security_scheme=APIKeySecurityScheme(
                    location="header", name="X-API-Key", description="A Switchboard API key"
                )
            ),
        },
        # Either scheme (each requirement alone suffices).
        security_requirements=[
            SecurityRequirement(schemes={"bearer": StringList()}),
            SecurityRequirement(schemes={"apiKey": StringList()}),
        ],
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain", "application/json"],
        skills=[COORDINATE, *(registry_skill(s) for s in skills if s.skill_id != COORDINATE.id)],
    )


def card_document(card: AgentCard) -> dict[str, Any]:
    """The card as JSON, serialized by the SDK (1.0 fields plus 0.3's)."""
    document: dict[str, Any] = agent_card_to_dict(card)
    return document
