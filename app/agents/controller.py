"""HTTP routes for the agent registry (admin only)."""

from __future__ import annotations

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.agents.schemas import Agent, AgentCreate, AgentWithKey
from app.agents.service import AgentService
from app.auth.guards import admin_only


class AgentController(Controller):
    """Register, list, disable agents and rotate their keys."""

    path = "/v1/agents"
    tags = ["agents"]
    guards = [admin_only]

    @post("/", status_code=HTTP_201_CREATED, summary="Register an agent (key shown once)")
    async def create_agent(
        self, data: JSONBody[AgentCreate], agent_service: NamedDependency[AgentService]
    ) -> AgentWithKey:
        """Create an agent and return its API key; store it, it is not shown again."""
        return await agent_service.create_agent(data.name, data.roles)

    @get("/", summary="List agents")
    async def list_agents(self, agent_service: NamedDependency[AgentService]) -> list[Agent]:
        """Every registered agent, enabled or not."""
        return await agent_service.list_agents()

    @get("/{name:str}", summary="Get an agent")
    async def get_agent(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> Agent:
        """One agent by name."""
        return await agent_service.get_agent(name)

    @delete("/{name:str}", status_code=HTTP_204_NO_CONTENT, summary="Disable an agent")
    async def disable_agent(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> None:
        """Revoke the agent's key at once; the name stays reserved for the audit trail."""
        await agent_service.disable_agent(name)

    @post("/{name:str}/key", status_code=HTTP_201_CREATED, summary="Issue a new key")
    async def rotate_key(
        self, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> AgentWithKey:
        """Replace the agent's key (the old one stops working) and re-enable it."""
        return await agent_service.rotate_key(name)
