"""Switchboard's own A2A agent card (public, no key), at the A2A 1.0 well-known path and
at ``/.well-known/agent.json``, where A2A 0.2 clients looked."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Request, get
from litestar.di import NamedDependency

from app.a2a.card import agent_card, card_document
from app.agents.service import AgentService
from app.common.jsontypes import JsonObject

Agents = NamedDependency[AgentService]


class AgentCardController(Controller):
    """Switchboard's A2A agent card."""

    path = "/.well-known"
    tags = ["agents", "a2a"]

    @get(["/agent-card.json", "/agent.json"], summary="Switchboard's A2A agent card")
    async def card(self, request: Request[Any, Any, Any], agent_service: Agents) -> JsonObject:
        """The A2A 1.0 card (with the fields 0.3 clients read): the JSON-RPC interface at
        ``/a2a``, streaming, the API keys as security schemes, and the coordinator's skill
        plus every skill the enabled agents offer (the skill map)."""
        base = str(request.base_url).rstrip("/")
        version = request.app.openapi_config.version if request.app.openapi_config else ""
        return card_document(agent_card(base, version, await agent_service.skill_map()))
