"""An agent's circuit breaker as the admin sees and sets it (``/v1/agents/{name}/breaker``):
the state this replica holds, and manual isolation published to every replica."""

from __future__ import annotations

from app.agents import repository as agents_repo
from app.agents.schemas import Agent
from app.coordination.breakers import BreakerRegistry
from app.coordination.schemas import BreakerView
from app.db.pool import Database
from app.errors import NotFound


class BreakerAdmin:
    """Shows an agent's breaker and isolates the agent (or brings it back)."""

    def __init__(self, database: Database, breakers: BreakerRegistry) -> None:
        self._db = database
        self._breakers = breakers

    async def breaker(self, name: str) -> BreakerView:
        """An agent's breaker as this replica sees it."""
        agent = await self._agent(name)
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
        await self._breakers.isolate(await self._agent(name), state)
        return await self.breaker(name)

    async def _agent(self, name: str) -> Agent:
        """The agent, disabled or not (a disabled agent's breaker can still be managed)."""
        async with self._db.connection() as conn:
            agent = await agents_repo.get_agent_by_name(conn, name)
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return agent
