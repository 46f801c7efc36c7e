"""Agent rows in and out of PostgreSQL."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.agents.schemas import Agent, AgentIdentity, PublishedCard, PublishedSkill
from app.db.pool import Connection
from app.db.queries import QUERIES

Q = QUERIES.agents


def _agent(row: asyncpg.Record) -> Agent:
    return Agent(
        agent_id=row["agent_id"],
        name=row["name"],
        roles=list(row["roles"]),
        created_at=row["created_at"],
        disabled_at=row["disabled_at"],
        description=row["description"],
        url=row["url"],
        timeout_ms=row["timeout_ms"],
        retry_attempts=row["retry_attempts"],
        fallback_strategy=row["fallback_strategy"],
        intents=list(row["intents"]),
        skills=row["skills"],
        enabled=row["enabled"],
        fail_max=row["fail_max"],
        reset_timeout_ms=row["reset_timeout_ms"],
        has_key=row["has_key"],
        updated_at=row["updated_at"],
        a2a_url=row["a2a_url"],
        a2a_protocol_version=row["a2a_protocol_version"],
        card_status=row["card_status"],
        card_error=row["card_error"],
        card_fetched_at=row["card_fetched_at"],
        card_checked_at=row["card_checked_at"],
    )


async def insert_agent(
    conn: Connection, name: str, key_hash: bytes, roles: list[str] | None, now: datetime
) -> Agent | None:
    """Insert an agent (or key a seeded one); None if the name is taken. ``roles`` None
    keeps a seeded agent's roles."""
    row = await conn.fetchrow(Q.insert_agent, name, key_hash, roles, now)
    return None if row is None else _agent(row)


async def get_agent_by_name(conn: Connection, name: str) -> Agent | None:
    """One agent by name."""
    row = await conn.fetchrow(Q.get_agent_by_name, name)
    return None if row is None else _agent(row)


async def list_agents(conn: Connection) -> list[Agent]:
    """Every agent, by name."""
    return [_agent(row) for row in await conn.fetch(Q.list_agents)]


async def find_active_agent_by_key_hash(conn: Connection, key_hash: bytes) -> AgentIdentity | None:
    """The owner of the key, unless its key was revoked."""
    row = await conn.fetchrow(Q.find_active_agent_by_key_hash, key_hash)
    if row is None:
        return None
    return AgentIdentity(agent_id=row["agent_id"], name=row["name"], roles=list(row["roles"]))


async def disable_agent(conn: Connection, name: str, now: datetime) -> bool:
    """Revoke an agent's key; False if there is no such agent."""
    return await conn.fetchval(Q.disable_agent, name, now) is not None


async def replace_agent_key(
    conn: Connection, name: str, key_hash: bytes, now: datetime
) -> Agent | None:
    """Swap in a new key hash and re-enable; None if unknown."""
    row = await conn.fetchrow(Q.replace_agent_key, name, key_hash, now)
    return None if row is None else _agent(row)


async def update_agent_settings(
    conn: Connection, agent: Agent, enabled: bool | None, now: datetime
) -> Agent | None:
    """Write every setting of ``agent``, and ``enabled`` unless None (``agent.enabled`` is
    the shown value, which a disabled key turns false); None if it vanished."""
    row = await conn.fetchrow(
        Q.update_agent_settings,
        agent.name,
        agent.roles,
        agent.description,
        agent.url,
        agent.timeout_ms,
        agent.retry_attempts,
        agent.fallback_strategy,
        agent.intents,
        agent.skills,
        enabled,
        agent.fail_max,
        agent.reset_timeout_ms,
        now,
    )
    return None if row is None else _agent(row)


async def set_agent_card(
    conn: Connection,
    name: str,
    card: PublishedCard,
    url: str,
    skills: list[PublishedSkill],
    description: str,
    now: datetime,
    a2a_url: str | None = None,
    a2a_protocol_version: str | None = None,
) -> Agent | None:
    """Store a published card and the url, skills, description and A2A interface (None:
    it declares none) it declares."""
    row = await conn.fetchrow(
        Q.set_agent_card, name, card, url, skills, description, now, a2a_url, a2a_protocol_version
    )
    return None if row is None else _agent(row)


async def store_discovered_card(
    conn: Connection,
    name: str,
    card: PublishedCard,
    skills: list[PublishedSkill],
    description: str,
    a2a_url: str,
    a2a_protocol_version: str,
    now: datetime,
) -> Agent | None:
    """Store a card fetched from the agent: its skills, description and A2A interface;
    the agent's url (where the card was fetched) stays."""
    row = await conn.fetchrow(
        Q.store_discovered_card, name, card, skills, description, a2a_url, a2a_protocol_version, now
    )
    return None if row is None else _agent(row)


async def mark_card_failure(
    conn: Connection, name: str, status: str, error: str, now: datetime
) -> Agent | None:
    """Record that the agent's card could not be fetched (``unreachable``) or used
    (``invalid``); the card fetched before, if any, stays in use."""
    row = await conn.fetchrow(Q.mark_card_failure, name, status, error[:2000], now)
    return None if row is None else _agent(row)


async def agents_to_refresh(conn: Connection, checked_before: datetime, limit: int) -> list[Agent]:
    """Agents whose card was discovered (or whose discovery failed), enabled, with a url,
    not checked since ``checked_before``; the least recently checked first."""
    return [_agent(row) for row in await conn.fetch(Q.agents_to_refresh, checked_before, limit)]


async def get_agent_card(conn: Connection, name: str) -> PublishedCard | None:
    """The card an agent published, if any."""
    card: PublishedCard | None = await conn.fetchval(Q.get_agent_card, name)
    return card


async def fallback_strategy_names(conn: Connection) -> set[str]:
    """The fallback strategies an agent may name."""
    return {row["name"] for row in await conn.fetch(Q.fallback_strategy_names)}


async def known_roles(conn: Connection, checked_in_code: list[str]) -> list[str]:
    """The roles an agent may hold, sorted: those access levels require, and
    ``checked_in_code``."""
    return [row["role"] for row in await conn.fetch(Q.known_roles, checked_in_code)]
