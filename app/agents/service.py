"""Agent registry rules: unique names, keys shown once, disabling without forgetting."""

from __future__ import annotations

from app.agents import repository as repo
from app.agents.schemas import Agent, AgentWithKey
from app.auth.keys import generate_key, hash_key, same_digest
from app.auth.principal import ADMIN, Principal
from app.clock import Clock
from app.db.pool import Database
from app.errors import Conflict, NotFound


class AgentService:
    """Registers agents and resolves API keys to principals."""

    def __init__(self, database: Database, clock: Clock, admin_key: str) -> None:
        self._db = database
        self._clock = clock
        self._admin_digest = hash_key(admin_key)

    async def authenticate(self, key_digest: bytes) -> Principal | None:
        """The principal for a key digest, or None if the key is not valid."""
        if same_digest(key_digest, self._admin_digest):
            return ADMIN
        async with self._db.connection() as conn:
            agent = await repo.find_active_agent_by_key_hash(conn, key_digest)
        if agent is None:
            return None
        return Principal(
            kind="agent", name=agent.name, roles=frozenset(agent.roles), agent_id=agent.agent_id
        )

    async def create_agent(self, name: str, roles: list[str]) -> AgentWithKey:
        """Register an agent and return its new key (shown only this once)."""
        key = generate_key()
        async with self._db.transaction() as conn:
            agent = await repo.insert_agent(
                conn, name, hash_key(key), sorted(set(roles)), self._clock.now()
            )
        if agent is None:
            raise Conflict(f"An agent named {name!r} already exists.", agent=name)
        return AgentWithKey.issue(agent, key)

    async def list_agents(self) -> list[Agent]:
        """Every registered agent."""
        async with self._db.connection() as conn:
            return await repo.list_agents(conn)

    async def get_agent(self, name: str) -> Agent:
        """One agent by name (404 if unknown)."""
        async with self._db.connection() as conn:
            agent = await repo.get_agent_by_name(conn, name)
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return agent

    async def disable_agent(self, name: str) -> Agent:
        """Revoke an agent's key; the row stays so history keeps its name."""
        async with self._db.transaction() as conn:
            agent = await repo.disable_agent(conn, name, self._clock.now())
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return agent

    async def rotate_key(self, name: str) -> AgentWithKey:
        """Issue a new key for an agent (the old one stops working) and re-enable it."""
        key = generate_key()
        async with self._db.transaction() as conn:
            agent = await repo.replace_agent_key(conn, name, hash_key(key))
        if agent is None:
            raise NotFound(f"No agent named {name!r}.")
        return AgentWithKey.issue(agent, key)
