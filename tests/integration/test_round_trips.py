"""Round trips to PostgreSQL per write path (issue 22): every statement the app sends on its
pooled connections is logged (asyncpg's query logger, BEGIN and COMMIT included), and each
write path is held to the count it was brought down to. A change that adds a round trip
to one of these paths fails here and has to say why."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import uuid4

import asyncpg
import httpx
import pytest
from litestar import Litestar

import app.db.pool as pool_module
from app.db.queries import QUERIES
from tests.conftest import app_client, lifespan_of
from tests.integration.helpers import create_session, create_user


class Statements:
    """What the app's pooled connections sent, in order."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.recording = False

    def log(self, record: Any) -> None:
        # The announcer's coalesced NOTIFY (app/db/announce.py) is sent by a background
        # task after the commit, one per burst of commits, not one per request: it is not a
        # round trip of the request's (test_announce.py holds it to its own count).
        if self.recording and record.query != QUERIES.announce.notify:
            self.sent.append(" ".join(record.query.split())[:120])

    async def count(self, request: Any) -> tuple[httpx.Response, list[str]]:
        """The response of ``request()`` and the statements sent while it ran."""
        self.sent = []
        self.recording = True
        try:
            response = await request()
        finally:
            self.recording = False
        return response, list(self.sent)


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> Statements:
    logged = Statements()
    original = pool_module._init_connection

    async def init(conn: asyncpg.Connection[asyncpg.Record]) -> None:
        await original(conn)
        conn.add_query_logger(logged.log)

    monkeypatch.setattr(pool_module, "_init_connection", init)
    return logged


@pytest.fixture
async def running_app(app: Litestar, statements: Statements) -> AsyncIterator[Litestar]:
    """The app with its pool's connections logging what they send."""
    async with lifespan_of(app):
        yield app


@pytest.fixture
async def agent(
    running_app: Litestar, client: httpx.AsyncClient
) -> AsyncIterator[httpx.AsyncClient]:
    """The benchmark's client: an agent key with the coordination_manager role."""
    created = await client.post(
        "/v1/agents", json={"name": "Orchestrator_Agent", "roles": ["coordination_manager"]}
    )
    assert created.status_code == 201, created.text
    async with app_client(running_app, {"X-API-Key": created.json()["api_key"]}) as agent:
        # The key is resolved once and cached: warm the cache before counting.
        assert (await agent.get("/v1/memory-types")).status_code == 200
        yield agent


# Each path's statements once its caches are warm (the agent key, the rules), counted with
# BEGIN and COMMIT. Before issue 22: PATCH 2, POST memory 2, webhook memory 6, message 5.
EXPECTED = {
    # The read, then the optimistic UPDATE with its version row: the merge patch and its
    # validation are Python's, so the write needs the current session first.
    "PATCH session": 2,
    # Checks and INSERT with its audit row in one statement.
    "POST memory": 1,
    # The key's claim, the memory with its audit row and the stored answer in one statement
    # (a new memory without a key; a named one claims first, then writes and seals in a
    # transaction: 5).
    "webhook memory": 1,
    # Session read; next-step counters; the UPDATE with its decision row (the agents are
    # kept per replica until a change is announced, app/agents/directory.py; the A2A task
    # awaiting input is looked for only when an enabled agent speaks A2A).
    "message": 3,
}


async def test_write_paths_send_their_counted_round_trips(
    client: httpx.AsyncClient, agent: httpx.AsyncClient, statements: Statements
) -> None:
    user = await create_user(client)
    session = await create_session(client, user_id=user)
    sid = session["session_id"]
    talked = (await create_session(client, user_id=user))["session_id"]
    # The benchmark's message: routed to an agent whose breaker is open (its fallback).
    assert (
        await client.patch(
            "/v1/agents/Educate_Customer_Agent", json={"url": "http://192.0.2.1:9/none"}
        )
    ).status_code == 200
    opened = await client.post("/v1/agents/Educate_Customer_Agent/breaker", json={"state": "open"})
    assert opened.status_code == 200, opened.text
    # The agents' change (above) is announced by NOTIFY: heard before the caches warm, so
    # it does not drop the kept agent list between the warm-up message and the counted one.
    await asyncio.sleep(0.3)
    paths: dict[str, Callable[[], Awaitable[httpx.Response]]] = {
        "PATCH session": lambda: agent.patch(
            f"/v1/sessions/{sid}",
            json={"session_state": {"agent_outputs": {"bench": 1}}},
            headers={"If-Match": "*"},
        ),
        "POST memory": lambda: agent.post(
            "/v1/memories",
            json={"user_id": user, "memory_type": "orchestrator", "content": {"t": "x"}},
        ),
        "webhook memory": lambda: agent.post(
            "/webhooks/n8n/memory",
            json={
                "user_id": user,
                "agent_name": "Orchestrator_Agent",
                "memory_type": "orchestrator",
                "memory_content": {"n": 1},
            },
            headers={"Idempotency-Key": str(uuid4())},
        ),
        "message": lambda: agent.post(
            f"/v1/sessions/{talked}/messages", json={"text": "what is compound interest"}
        ),
    }
    counted: dict[str, int] = {}
    sent_by: dict[str, list[str]] = {}
    for name, request in paths.items():
        first = await request()  # caches filled, statements prepared
        assert first.status_code in (200, 201), first.text
        response, sent = await statements.count(request)
        assert response.status_code == first.status_code, response.text
        counted[name] = len(sent)
        sent_by[name] = sent
    assert counted == EXPECTED, sent_by
    # The message went where the benchmark's goes: the open breaker's fallback.
    assert response.json()["fallback"] == "static_educational_content"
