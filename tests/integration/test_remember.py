"""``MemoryService.remember``: the one rule for a memory a caller may or may not name, which
an agent's memory updates and the n8n memory webhook both go through. Named (a category and
a key) it creates, then replaces, that memory; unnamed it is always a new one; work that must
commit with it commits with it, or neither does."""

from __future__ import annotations

from collections.abc import AsyncIterator
from uuid import UUID

import httpx
import pytest

from app.auth.principal import ADMIN
from app.clock import SystemClock
from app.db.pool import Connection, Database
from app.memories.schemas import Memory, MemoryWrite
from app.memories.service import MemoryService
from app.settings import DatabaseSettings, MemorySettings
from tests.integration.helpers import create_user


class Refused(Exception):
    """Raised by the work that commits with a write, to roll it back."""


@pytest.fixture
async def memories(database_url: str) -> AsyncIterator[MemoryService]:
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    try:
        yield MemoryService(database, SystemClock(), MemorySettings())
    finally:
        await database.close()


def note(user_id: str, content: object, *, key: str | None = None) -> MemoryWrite:
    return MemoryWrite(
        user_id=UUID(user_id),
        memory_type="data_collection",
        category="user_profile",
        key=key,
        content=content,
    )


async def test_a_named_memory_is_created_then_replaced(
    client: httpx.AsyncClient, memories: MemoryService
) -> None:
    user_id = await create_user(client)
    first, created = await memories.remember(note(user_id, 3200, key="income"), ADMIN)
    assert created is True
    second, created = await memories.remember(note(user_id, 4100, key="income"), ADMIN)
    assert created is False
    assert second.memory_id == first.memory_id
    assert (second.content, second.version) == (4100, first.version + 1)


async def test_an_unnamed_memory_is_always_a_new_one(
    client: httpx.AsyncClient, memories: MemoryService
) -> None:
    user_id = await create_user(client)
    first, created_first = await memories.remember(note(user_id, {"goal": "house"}), ADMIN)
    second, created_second = await memories.remember(note(user_id, {"goal": "house"}), ADMIN)
    assert created_first
    assert created_second
    assert first.memory_id != second.memory_id


@pytest.mark.parametrize("key", ["income", None])
async def test_the_work_that_commits_with_it_sees_it_and_can_undo_it(
    client: httpx.AsyncClient, memories: MemoryService, key: str | None
) -> None:
    user_id = await create_user(client)
    seen: list[tuple[Memory, bool]] = []

    async def keep(_conn: Connection, result: tuple[Memory, bool]) -> None:
        seen.append(result)

    memory, created = await memories.remember(note(user_id, 1, key=key), ADMIN, keep)
    assert seen == [(memory, created)]
    assert created is True

    async def refuse(_conn: Connection, _result: tuple[Memory, bool]) -> None:
        raise Refused

    with pytest.raises(Refused):
        await memories.remember(note(user_id, 2, key=key), ADMIN, refuse)
    listed = await client.get("/v1/memories", params={"user_id": user_id})
    assert [m["content"] for m in listed.json()["items"]] == [1]
