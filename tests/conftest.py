"""Fixtures: a real PostgreSQL per test (cloned from a migrated template), the app, clients."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.clock import Clock, FrozenClock, SystemClock
from app.db.migrate import upgrade
from app.settings import DatabaseSettings, OutboundSettings, Settings
from tests import dbutil

ADMIN_KEY = "test-admin-key-0123456789abcdef"
# The test agents and subscribers (tests/agent_server.py) listen on 127.0.0.1, which the
# default outbound policy refuses: tests that call them say so in their settings.
LOOPBACK_ALLOWED = OutboundSettings(allow_loopback=True)


def pytest_configure(config: pytest.Config) -> None:
    """Tests fire requests far faster than any client should: no rate limit unless a test
    sets one (settings read the environment when a test builds them); no gc.freeze."""
    os.environ.setdefault("SWITCHBOARD_RATE_LIMIT_PER_SECOND", "0")
    # Hundreds of apps start in this one process; frozen objects would never be collected.
    os.environ.setdefault("SWITCHBOARD_GC_FREEZE", "false")


@pytest.fixture(scope="session")
def server_url() -> str:
    """Maintenance URL of the PostgreSQL server the tests use."""
    return dbutil.server_url()


@pytest.fixture(scope="session")
def template_database(server_url: str) -> Iterator[str]:
    """A database migrated to head once per run; every test clones it."""
    name = dbutil.unique_name("sbtest_template")
    asyncio.run(dbutil.create_database(server_url, name))
    try:
        upgrade(dbutil.with_database(server_url, name))
        yield name
    finally:
        asyncio.run(dbutil.drop_database(server_url, name))


@pytest.fixture(scope="session")
def database_dropper(server_url: str) -> Iterator[dbutil.Dropper]:
    """Drops the tests' databases behind their backs (each drop is a checkpoint)."""
    dropper = dbutil.Dropper(server_url)
    try:
        yield dropper
    finally:
        dropper.close()


@pytest.fixture
async def database_url(
    server_url: str, template_database: str, database_dropper: dbutil.Dropper
) -> AsyncIterator[str]:
    """A fresh, migrated database of this test's own, dropped in the background after it."""
    name = dbutil.unique_name("sbtest")
    await dbutil.create_database(server_url, name, template=template_database)
    try:
        yield dbutil.with_database(server_url, name)
    finally:
        # DROP ... WITH (FORCE) ends any connection the test left open.
        database_dropper.drop(name)


@pytest.fixture
def settings() -> Settings:
    """Settings for the app under test: a small pool, and agents on 127.0.0.1 allowed."""
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5), outbound=LOOPBACK_ALLOWED
    )


@pytest.fixture
def clock() -> Clock:
    """Wall-clock time unless a test overrides this fixture with a FrozenClock."""
    return SystemClock()


@pytest.fixture
def frozen_clock() -> FrozenClock:
    """A controllable clock starting at a fixed instant."""
    return FrozenClock(datetime(2026, 11, 1, 12, 0, tzinfo=UTC))


@pytest.fixture
def app(settings: Settings, database_url: str, clock: Clock) -> Litestar:
    """The application wired to this test's database."""
    return create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        clock=clock,
        run_scheduler=False,
        # The task tests start workers of their own (tests/integration/test_tasks*.py).
        run_worker=False,
    )


def app_client(app: Litestar, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """An HTTP client calling ``app`` in-process, on the test's own event loop."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver.local", headers=headers
    )


@asynccontextmanager
async def lifespan_of(app: Litestar) -> AsyncIterator[Litestar]:
    """Run the app's lifespan in a task of its own.

    Litestar's lifespan holds an anyio cancel scope, which must be left by the task that
    entered it; pytest-asyncio sets a fixture up and tears it down in different tasks.
    """
    started, stop = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with app.lifespan():
            started.set()
            await stop.wait()

    task = asyncio.create_task(hold())
    waiter = asyncio.create_task(started.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        waiter.cancel()
        task.result()  # start-up failed: raise its error here
    try:
        yield app
    finally:
        stop.set()
        await task


@pytest.fixture
async def running_app(app: Litestar) -> AsyncIterator[Litestar]:
    """The app with its lifespan entered (pool open) for the length of the test."""
    async with lifespan_of(app):
        yield app


@pytest.fixture
async def client(running_app: Litestar) -> AsyncIterator[httpx.AsyncClient]:
    """An admin-authenticated client."""
    async with app_client(running_app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as admin:
        yield admin


def same_app_client(app: Litestar, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    """Another client of an app whose lifespan ``client`` already runs, on the same loop."""
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver.local", headers=headers
    )


@pytest.fixture
async def anon(app: Litestar, client: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the same app that sends no key."""
    async with same_app_client(app) as anonymous:
        yield anonymous


@pytest.fixture(autouse=True)
async def _fail_on_loop_errors() -> AsyncIterator[None]:
    """Any exception the event loop swallows (a never-awaited task's error) fails the test."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    yield
    loop.set_exception_handler(previous)
    assert not errors, f"unhandled event-loop errors: {errors}"


@pytest.fixture
def make_agent_client(running_app: Litestar, client: httpx.AsyncClient) -> Any:
    """Factory: register an agent with ``roles`` and return a client using its key."""

    async def make(name: str, roles: list[str] | None = None) -> httpx.AsyncClient:
        response = await client.post("/v1/agents", json={"name": name, "roles": roles or []})
        assert response.status_code == 201, response.text
        return app_client(running_app, {"X-API-Key": response.json()["api_key"]})

    return make
