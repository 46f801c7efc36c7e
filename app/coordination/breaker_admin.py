"""An agent's circuit breaker as the admin sees and sets it (``/v1/agents/{name}/breaker``):
the state this replica holds, and manual isolation published to every replica."""

from __future__ import annotations

from app.agents.service import AgentService
from app.coordination.breakers import BreakerRegistry
from app.coordination.schemas import BreakerView


class BreakerAdmin:
    """Shows an agent's breaker and isolates the agent (or brings it back). Any registered
    agent has one, disabled or not (a disabled agent's breaker can still be managed)."""

    def __init__(self, agents: AgentService, breakers: BreakerRegistry) -> None:
        self._agents = agents
        self._breakers = breakers

    async def breaker(self, name: str) -> BreakerView:
        """An agent's breaker as this replica sees it (404 for an unknown agent)."""
        agent = await self._agents.get_agent(name)
        snapshot = self._breakers.breaker_for(agent).snapshot()
        return BreakerView(
            agent=name,
            state=snapshot.state,
            failure_count=snapshot.failure_count,
            opened_at=snapshot.opened_at,
            fail_max=agent.fail_max,
            reset_timeout_ms=agent.reset_timeout_ms,
        )

    async def set_breaker(self, name: str, state: str) -> BreakerView:
        """Isolate an agent (open) or bring it back (closed), on every replica."""
        await self._breakers.isolate(await self._agents.get_agent(name), state)
        return await self.breaker(name)
