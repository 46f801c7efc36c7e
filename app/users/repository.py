"""User rows in and out of PostgreSQL."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import asyncpg

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.users.schemas import User

Q = QUERIES.users


def _user(row: asyncpg.Record) -> User:
    return User(
        id=row["id"],
        external_ref=row["external_ref"],
        created_at=row["created_at"],
        deleted_at=row["deleted_at"],
    )


async def insert_user(conn: Connection, external_ref: str | None, now: datetime) -> User | None:
    """Insert a user; None if ``external_ref`` is already taken."""
    row = await conn.fetchrow(Q.insert_user, external_ref, now)
    return None if row is None else _user(row)


async def get_user(conn: Connection, user_id: UUID) -> User | None:
    """One user by id."""
    row = await conn.fetchrow(Q.get_user, user_id)
    return None if row is None else _user(row)


async def get_user_by_external_ref(conn: Connection, external_ref: str) -> User | None:
    """One user by the caller's reference."""
    row = await conn.fetchrow(Q.get_user_by_external_ref, external_ref)
    return None if row is None else _user(row)


async def user_exists(conn: Connection, user_id: UUID) -> bool:
    """True if the user exists."""
    return bool(await conn.fetchval(Q.user_exists, user_id))
