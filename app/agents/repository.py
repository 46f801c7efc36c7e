"""Agent rows in and out of PostgreSQL."""

from __future__ import annotations

from datetime import datetime

import asyncpg

from app.agents.schemas import Agent
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
    )


async def insert_agent(
    conn: Connection, name: str, key_hash: bytes, roles: list[str], now: datetime
) -> Agent | None:
    """Insert an agent; None if the name is taken."""
    row = await conn.fetchrow(Q.insert_agent, name, key_hash, roles, now)
    return None if row is None else _agent(row)


async def get_agent_by_name(conn: Connection, name: str) -> Agent | None:
    """One agent by name."""
    row = await conn.fetchrow(Q.get_agent_by_name, name)
    return None if row is None else _agent(row)


async def list_agents(conn: Connection) -> list[Agent]:
    """Every agent, by name."""
    return [_agent(row) for row in await conn.fetch(Q.list_agents)]


async def find_active_agent_by_key_hash(conn: Connection, key_hash: bytes) -> Agent | None:
    """The enabled agent whose key hashes to ``key_hash``."""
    row = await conn.fetchrow(Q.find_active_agent_by_key_hash, key_hash)
    return None if row is None else _agent(row)


async def disable_agent(conn: Connection, name: str, now: datetime) -> Agent | None:
    """Disable an agent (its key stops working); None if unknown."""
    row = await conn.fetchrow(Q.disable_agent, name, now)
    return None if row is None else _agent(row)


async def replace_agent_key(conn: Connection, name: str, key_hash: bytes) -> Agent | None:
    """Swap in a new key hash and re-enable; None if unknown."""
    row = await conn.fetchrow(Q.replace_agent_key, name, key_hash)
    return None if row is None else _agent(row)
