"""What the tests of the coordinator on durable tasks share: the application with its task
worker running and fast retries, a real agent and a real event subscriber on 127.0.0.1,
and the calls and waits those tests make. Test modules import the fixtures they use."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.clock import SystemClock
from app.db.pool import Database
from app.events.service import EventService
from app.events.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from app.outbound.policy import OutboundPolicy
from app.outbound.transport import outbound_client
from app.settings import (
    CoordinationSettings,
    DatabaseSettings,
    SchedulerSettings,
    Settings,
    TaskSettings,
)
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED
from tests.integration.helpers import create_session, eventually

SECRET = "s" * 32
PLAN = "Please make a plan for my savings"
PLAN_AGENT = "Make_Plan_Agent"


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        coordination=CoordinationSettings(breaker_sync_seconds=0.2, rules_cache_seconds=0),
        # Retries in tens of milliseconds: a dead agent is dead-lettered within the test.
        tasks=TaskSettings(
            max_retries=2, retry_base_seconds=0.05, retry_cap_seconds=0.1, poll_interval=0.2
        ),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
def app(settings: Settings, database_url: str) -> Litestar:
    """The application with its task worker running (retries are claimed by it)."""
    return create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
        run_worker=True,
    )


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    server.reply = {
        "success": True,
        "output_data": {"response": "Here is your plan", "progress_percentage": 40},
        "memory_updates": [{"memory_type": "planning", "content": {"plan": "v1"}}],
    }
    yield server
    await server.stop()


@pytest.fixture
async def subscriber() -> AsyncIterator[AgentServer]:
    """A real HTTP endpoint receiving the signed events."""
    server = await AgentServer().start()
    yield server
    await server.stop()


@pytest.fixture
async def events(database_url: str) -> AsyncIterator[EventService]:
    """Delivery of due events, run by the test (the app's scheduler is off in tests)."""
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    outbound = OutboundPolicy(LOOPBACK_ALLOWED)
    async with outbound_client(outbound) as http:
        yield EventService(database, SystemClock(), SchedulerSettings(), http, outbound)
    await database.close()


# Awaited with a count: the first that many events the subscriber received.
Told = Callable[[int], Awaitable[list[dict[str, Any]]]]


@pytest.fixture
async def told(client: httpx.AsyncClient, subscriber: AgentServer, events: EventService) -> Told:
    """The subscriber subscribed to task.completed and task.failed; ``await told(n)``
    delivers what is due until it received ``n`` events, and returns them."""
    await subscribe(client, subscriber.url)

    async def received(count: int) -> list[dict[str, Any]]:
        return await delivered(events, subscriber, count)

    return received


# Every fixture above, for a test module to take in one line (pytest finds a fixture by
# the name it has in the test's module).
FIXTURES = (settings, app, agent, subscriber, events, told)


def agent_slow_until_released(
    agent: AgentServer, called: asyncio.Event | None = None
) -> asyncio.Event:
    """Hold the agent's answers until the returned event is set (``called`` is set when a
    request has arrived)."""
    release = asyncio.Event()

    async def slow() -> None:
        if called is not None:
            called.set()
        await release.wait()

    agent.before_reply = slow
    return release


async def plan_session(client: httpx.AsyncClient, agent: AgentServer, **fields: Any) -> str:
    """Make_Plan_Agent at the agent's URL (with these ``fields``), and a new session's id."""
    await configure(client, PLAN_AGENT, url=agent.url, **fields)
    session = await create_session(client)
    sid: str = session["session_id"]
    return sid


async def session_when(
    client: httpx.AsyncClient, sid: str, ready: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The session once ``ready`` says so (fails after the wait of ``eventually``)."""

    async def read() -> dict[str, Any] | None:
        current: dict[str, Any] = (await client.get(f"/v1/sessions/{sid}")).json()
        return current if ready(current) else None

    found: dict[str, Any] = await eventually(read)
    return found


def answered_by_plan_agent(session: dict[str, Any]) -> bool:
    """Make_Plan_Agent's output is in the session."""
    return PLAN_AGENT in session["session_state"]["agent_outputs"]


async def configure(client: httpx.AsyncClient, name: str, **fields: Any) -> None:
    response = await client.patch(f"/v1/agents/{name}", json=fields)
    assert response.status_code == 200, response.text


async def subscribe(client: httpx.AsyncClient, url: str) -> None:
    response = await client.post(
        "/v1/subscriptions",
        json={"url": url, "event_types": ["task.completed", "task.failed"], "secret": SECRET},
    )
    assert response.status_code == 201, response.text


async def post_message(
    client: httpx.AsyncClient,
    sid: str,
    text: str,
    prefer: str | list[str] | None = None,
    *,
    branch: str | None = None,
) -> httpx.Response:
    """POST a message to the session, or to its ``branch``, with these Prefer headers."""
    headers: list[tuple[str, str]] = []
    for value in [prefer] if isinstance(prefer, str) else prefer or []:
        headers.append(("Prefer", value))
    where = f"/v1/sessions/{sid}" if branch is None else f"/v1/sessions/{sid}/branches/{branch}"
    return await client.post(f"{where}/messages", json={"text": text}, headers=headers)


async def task_of(client: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/tasks/{task_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body.get("task", body)


async def decisions(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await client.get(f"/v1/sessions/{sid}/decisions")).json()[
        "items"
    ]
    return items


async def delivered(
    events: EventService, subscriber: AgentServer, count: int
) -> list[dict[str, Any]]:
    """The events the subscriber received once ``count`` arrived, each signature checked."""

    async def arrived() -> bool:
        await events.deliver_due()
        return len(subscriber.bodies) >= count

    await eventually(arrived)
    received = []
    for body, headers in zip(subscriber.bodies, subscriber.headers, strict=True):
        stamp = int(headers[TIMESTAMP_HEADER.lower()])
        assert headers[SIGNATURE_HEADER.lower()] == sign(SECRET, stamp, body)
        received.append(orjson.loads(body))
    return received
