"""User rules: optional unique external reference (erasure lives in app/erasure)."""

from __future__ import annotations

from uuid import UUID

from app.clock import Clock
from app.db.pool import Database
from app.errors import Conflict, NotFound
from app.users import repository as repo
from app.users.schemas import User


class UserService:
    """Creates and finds users."""

    def __init__(self, database: Database, clock: Clock) -> None:
        self._db = database
        self._clock = clock

    async def create_user(self, external_ref: str | None) -> User:
        """Create a user (409, naming the existing id, if ``external_ref`` is taken)."""
        async with self._db.transaction() as conn:
            user = await repo.insert_user(conn, external_ref, self._clock.now())
            if user is None:
                existing = await repo.get_user_by_external_ref(conn, external_ref or "")
        if user is None:
            raise Conflict(
                f"A user with external_ref {external_ref!r} already exists.",
                existing_user_id=str(existing.id) if existing else None,
            )
        return user

    async def create_or_get(self, external_ref: str) -> User:
        """The user with this reference, created if there is none (safe under races)."""
        async with self._db.transaction() as conn:
            user = await repo.insert_user(conn, external_ref, self._clock.now())
            if user is None:
                user = await repo.get_user_by_external_ref(conn, external_ref)
        if user is None:  # deleted between the two statements
            raise Conflict(f"User {external_ref!r} changed concurrently; retry.", retryable=True)
        return user

    async def get_user(self, user_id: UUID) -> User:
        """One user (404 if unknown)."""
        async with self._db.connection() as conn:
            user = await repo.get_user(conn, user_id)
        if user is None:
            raise NotFound(f"No user {user_id}.")
        return user

    async def find_by_external_ref(self, external_ref: str) -> User:
        """The user with this external reference (404 if none)."""
        async with self._db.connection() as conn:
            user = await repo.get_user_by_external_ref(conn, external_ref)
        if user is None:
            raise NotFound(f"No user with external_ref {external_ref!r}.")
        return user

    async def require_user(self, user_id: UUID) -> None:
        """404 unless the user exists."""
        async with self._db.connection() as conn:
            if not await repo.user_exists(conn, user_id):
                raise NotFound(f"No user {user_id}.")
