"""HTTP routes for the agent registry, agent cards and the skill map."""

from __future__ import annotations

from litestar import Controller, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.agents.schemas import (
    Agent,
    AgentCard,
    AgentCreate,
    AgentSettings,
    AgentWithKey,
    PublishedCard,
    SkillAgents,
)
from app.agents.service import AgentService
from app.auth.guards import admin_only, admin_or_named_agent


class AgentController(Controller):
    """Register, configure, list and disable agents; rotate keys; publish cards."""

    path = "/v1/agents"
    tags = ["agents"]

    @post("/", status_code=HTTP_201_CREATED, guards=[admin_only], summary="Register an agent")
    async def create_agent(
        self, data: JSONBody[AgentCreate], agent_service: NamedDependency[AgentService]
    ) -> AgentWithKey:
        """Create an agent (or issue the first key of a seeded one) and return its API key;
        store it, it is not shown again."""
        return await agent_service.create_agent(data)

    @get("/", guards=[admin_only], summary="List agents")
    async def list_agents(self, agent_service: NamedDependency[AgentService]) -> list[Agent]:
        """Every registered agent, enabled or not."""
        return await agent_service.list_agents()

    @get("/{name:str}", guards=[admin_only], summary="Get an agent")
    async def get_agent(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> Agent:
        """One agent by name."""
        return await agent_service.get_agent(name)

    @patch("/{name:str}", guards=[admin_only], summary="Change an agent's settings")
    async def update_agent(
        self,
        name: FromPath[str],
        data: JSONBody[AgentSettings],
        agent_service: NamedDependency[AgentService],
    ) -> Agent:
        """Roles, url, timeout_ms, retry_attempts, fallback_strategy, intents, skills,
        enabled, fail_max, reset_timeout_ms: fields not sent stay as they are."""
        return await agent_service.update_settings(name, data)

    @delete(
        "/{name:str}",
        status_code=HTTP_204_NO_CONTENT,
        guards=[admin_only],
        summary="Disable an agent's key",
    )
    async def disable_agent(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> None:
        """Revoke the agent's key at once; the name stays reserved for the audit trail."""
        await agent_service.disable_agent(name)

    @post(
        "/{name:str}/key",
        status_code=HTTP_201_CREATED,
        guards=[admin_only],
        summary="Issue a new key",
    )
    async def rotate_key(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> AgentWithKey:
        """Replace the agent's key (the old one stops working) and re-enable it."""
        return await agent_service.rotate_key(name)

    @post(
        "/{name:str}/card",
        status_code=200,
        guards=[admin_or_named_agent],
        summary="Publish an agent's A2A card",
    )
    async def publish_card(
        self,
        name: FromPath[str],
        data: JSONBody[AgentCard],
        agent_service: NamedDependency[AgentService],
    ) -> Agent:
        """The admin, or the agent itself. The card's url and skills become the agent's
        routing url and skills."""
        return await agent_service.publish_card(name, data)

    @post(
        "/{name:str}/discover",
        status_code=200,
        guards=[admin_only],
        summary="Fetch an agent's A2A card from its URL",
    )
    async def discover(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> Agent:
        """Fetch the card at the agent's ``<url>/.well-known/agent-card.json`` (A2A): its
        skills join the skill map and, through its JSON-RPC interface, the agent is called
        with A2A SendMessage. 404 unknown agent; 422 no url, or a card that cannot be used
        (no JSON-RPC interface, a bad skill, not a card); 502 the card cannot be fetched.
        A failure is also recorded on the agent (card_status, card_error)."""
        return await agent_service.discover(name)

    @get("/{name:str}/card", summary="An agent's published card")
    async def get_card(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> PublishedCard:
        """The A2A card as the agent published it."""
        return await agent_service.get_card(name)


class SkillController(Controller):
    """The skill map: which agents can do what."""

    path = "/v1/skills"
    tags = ["agents"]

    @get("/", summary="Skills and the agents offering them")
    async def skills(self, agent_service: NamedDependency[AgentService]) -> list[SkillAgents]:
        """Every skill of an enabled agent, with the agents that offer it."""
        return await agent_service.skill_map()
