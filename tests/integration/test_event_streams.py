"""Event streams (Server-Sent Events) across two server processes on one database: an
event made on one replica reaches a stream held by the other, ``Last-Event-ID`` resumes
without loss or repetition, the per-key limit, the eviction of a client that stopped
reading (a real socket), and who may open which stream. Plus the events the streams are
made of (session versions, handoffs, task transitions, breaker changes), written with
the changes they describe."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from app.db.pool import Database
from app.events.hub import EventHub
from app.settings import DatabaseSettings, StreamSettings, TracingSettings
from app.tracing import Tracing
from bench.serve import spawn
from tests import dbutil
from tests.conftest import ADMIN_KEY
from tests.integration.helpers import assert_problem, create_session, if_match
from tests.integration.test_console import sign_in

MAX_PER_KEY = 3
QUEUE_EVENTS = 16
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Replicas:
    urls: tuple[str, str]
    database_url: str


@pytest.fixture(scope="module")
def replicas(server_url: str, template_database: str) -> Iterator[Replicas]:
    """Two server processes (as ``switchboard serve`` runs) on one database of their own."""
    name = dbutil.unique_name("sbtest_streams")
    asyncio.run(dbutil.create_database(server_url, name, template=template_database))
    url = dbutil.with_database(server_url, name)
    env = {
        "SWITCHBOARD_DATABASE_URL": url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
        "SWITCHBOARD_STREAM_MAX_PER_KEY": str(MAX_PER_KEY),
        "SWITCHBOARD_STREAM_QUEUE_EVENTS": str(QUEUE_EVENTS),
        "SWITCHBOARD_STREAM_KEEPALIVE_SECONDS": "1",
        "SWITCHBOARD_DATABASE_POOL_MIN_SIZE": "1",
        "SWITCHBOARD_DATABASE_POOL_MAX_SIZE": "5",
    }
    spawned = [spawn("switchboard", env) for _ in range(2)]
    processes = [server.process for server in spawned]
    try:
        yield Replicas((spawned[0].url, spawned[1].url), url)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=30)
        asyncio.run(dbutil.drop_database(server_url, name))


@pytest.fixture
async def a(replicas: Replicas) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=replicas.urls[0], headers=ADMIN, timeout=10) as client:
        yield client


@pytest.fixture
async def b(replicas: Replicas) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=replicas.urls[1], headers=ADMIN, timeout=10) as client:
        yield client


@dataclass
class Event:
    id: int
    type: str
    data: dict[str, Any]


class SseReader:
    """Reads one open SSE response: events (id, type, JSON data) and comment lines."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._lines = response.aiter_lines()
        self.comments = 0
        self.retry: int | None = None

    async def next_event(self, within: float = 10) -> Event:
        """The next event, skipping comments; fails after ``within`` seconds."""
        return await asyncio.wait_for(self._next_event(), within)

    async def _next_event(self) -> Event:
        fields: dict[str, str] = {}
        async for line in self._lines:
            if line == "":
                if "data" in fields:
                    return Event(int(fields["id"]), fields["event"], json.loads(fields["data"]))
                fields = {}
                continue
            if line.startswith(":"):
                self.comments += 1
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "retry":
                self.retry = int(value)
            fields[name] = value
        raise EOFError("the stream ended")

    async def events(self, count: int, within: float = 10) -> list[Event]:
        return [await self.next_event(within) for _ in range(count)]


async def open_stream(
    client: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None
) -> tuple[httpx.Response, SseReader]:
    """Open ``path`` as a stream (the caller closes the response)."""
    request = client.build_request("GET", path, headers=headers, timeout=httpx.Timeout(30))
    response = await client.send(request, stream=True)
    assert response.status_code == 200, (await response.aread()).decode()
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-cache"
    return response, SseReader(response)


async def patch(client: httpx.AsyncClient, session: dict[str, Any], version: int) -> None:
    response = await client.patch(
        f"/v1/sessions/{session['session_id']}",
        json={"progress_percentage": version % 100},
        headers=if_match(version),
    )
    assert response.status_code == 200, response.text


async def test_an_event_made_on_one_replica_reaches_a_stream_on_the_other(
    a: httpx.AsyncClient, b: httpx.AsyncClient
) -> None:
    session = await create_session(a)
    sid = session["session_id"]
    response, stream = await open_stream(b, f"/v1/sessions/{sid}/events")
    admin_response, admin = await open_stream(b, "/v1/events/stream?types=session.version")
    try:
        await patch(a, session, 1)  # on replica A
        event = await stream.next_event()
        assert event.type == "session.version"
        assert event.data["payload"]["session_id"] == sid
        assert event.data["payload"]["version"] == 2
        assert event.data["payload"]["change_reason"] == "patched"
        assert event.data["position"] == event.id
        assert stream.retry is not None
        seen = await admin.next_event()
        assert (seen.id, seen.type) == (event.id, "session.version")
        # Another session's change reaches the admin stream, not this session's stream.
        other = await create_session(a)
        await patch(a, other, 1)
        await patch(a, session, 2)
        assert (await stream.next_event()).data["payload"]["version"] == 3
        got = await admin.events(3)  # the other session's creation and change, then ours
        told = [(e.data["payload"]["session_id"], e.data["payload"]["version"]) for e in got]
        assert told == [(other["session_id"], 1), (other["session_id"], 2), (sid, 3)]
        assert [e.id for e in got] == sorted({e.id for e in got})
    finally:
        await response.aclose()
        await admin_response.aclose()


async def test_last_event_id_resumes_on_another_replica_without_loss_or_repetition(
    a: httpx.AsyncClient, b: httpx.AsyncClient
) -> None:
    session = await create_session(a)
    sid = session["session_id"]
    response, stream = await open_stream(a, f"/v1/sessions/{sid}/events")
    for version in range(1, 6):
        await patch(b, session, version)
    first = await stream.events(2)
    await response.aclose()  # the client drops after two events
    for version in range(6, 11):
        await patch(a, session, version)
    # Writes while it reconnects, on both replicas.
    writer = asyncio.create_task(_patch_range(a, b, session, 11, 21))
    response, stream = await open_stream(
        b, f"/v1/sessions/{sid}/events", headers={"Last-Event-ID": str(first[-1].id)}
    )
    try:
        await writer
        rest = await stream.events(18)
        versions = [e.data["payload"]["version"] for e in first + rest]
        assert versions == list(range(2, 22))  # every version once, in order
        ids = [e.id for e in first + rest]
        assert ids == sorted(set(ids))
        with pytest.raises(TimeoutError):
            await stream.next_event(within=1.5)  # nothing repeated after the last
        assert stream.comments >= 1  # the keep-alive comment (every second here)
    finally:
        await response.aclose()
    # ?after= does the same for clients that cannot send the header.
    response, stream = await open_stream(a, f"/v1/sessions/{sid}/events?after={ids[9]}")
    try:
        assert [e.id for e in await stream.events(10)] == ids[10:]
    finally:
        await response.aclose()


async def _patch_range(
    a: httpx.AsyncClient, b: httpx.AsyncClient, session: dict[str, Any], start: int, end: int
) -> None:
    for version in range(start, end):
        await patch(a if version % 2 else b, session, version)


async def test_a_key_may_hold_only_so_many_streams(
    a: httpx.AsyncClient, replicas: Replicas
) -> None:
    created = await a.post("/v1/agents", json={"name": "Stream_Limit_Agent"})
    key = {"X-API-Key": created.json()["api_key"]}
    session = await create_session(a)
    path = f"/v1/sessions/{session['session_id']}/events"
    async with httpx.AsyncClient(base_url=replicas.urls[0], headers=key) as agent:
        held = [await open_stream(agent, path) for _ in range(MAX_PER_KEY)]
        try:
            refused = await agent.get(path)
            body = assert_problem(refused, 429)
            assert body["type"].endswith("too-many-streams")
            assert int(refused.headers["retry-after"]) >= 1
            # Another key is not affected.
            other, _ = await open_stream(a, path)
            await other.aclose()
            # Closing one frees its place.
            await held.pop()[0].aclose()
            deadline = time.monotonic() + 5
            while (
                again := await agent.get(path, headers={"Last-Event-ID": "abc"})
            ).status_code == 429:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            assert_problem(again, 400)  # past the limit check: the bad id is what it refuses
            response, _ = await open_stream(agent, path)
            held.append((response, _))
        finally:
            for response, _ in held:
                await response.aclose()


async def test_a_client_that_stops_reading_is_disconnected(
    a: httpx.AsyncClient, replicas: Replicas
) -> None:
    port = int(replicas.urls[0].rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(
        b"GET /v1/events/stream?types=memory.purged HTTP/1.1\r\nHost: x\r\n"
        + f"Authorization: Bearer {ADMIN_KEY}\r\n\r\n".encode()
    )
    sock.settimeout(10)
    head = sock.recv(4096)
    assert head.startswith(b"HTTP/1.1 200"), head
    # Far more than the socket buffers and the queue hold: 4,000 events of 4 KiB.
    conn = await asyncpg.connect(replicas.database_url)
    try:
        for _ in range(4):
            await conn.execute(
                "INSERT INTO outbox_events (event_type, payload) "
                "SELECT 'memory.purged', jsonb_build_object('n', i, 'pad', repeat('x', 4096)) "
                "FROM generate_series(1, 1000) i"
            )
    finally:
        await conn.close()
    # Now read: whatever was buffered, then the end of the connection.
    received = 0
    deadline = time.monotonic() + 30
    sock.settimeout(1)
    ended = False
    while time.monotonic() < deadline:
        await asyncio.sleep(0)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            continue
        if not chunk:
            ended = True
            break
        received += chunk.count(b"\nevent: memory.purged\n")
        await asyncio.sleep(0.01)  # a slow reader, but reading
    sock.close()
    assert ended, "the server kept the stream of a client that stopped reading"
    assert received < 4000  # cut off, not all delivered
    # A client that reads resumes from the table: all 4,000, each once, in order.
    response, stream = await open_stream(
        a, "/v1/events/stream?types=memory.purged", headers={"Last-Event-ID": "0"}
    )
    try:
        ids = [(await stream.next_event()).id for _ in range(4000)]
        assert ids == sorted(set(ids))
        with pytest.raises(TimeoutError):
            await stream.next_event(within=1.5)
    finally:
        await response.aclose()


async def _status_of(
    client: httpx.AsyncClient, path: str, headers: dict[str, str]
) -> httpx.Response:
    """The answer's head (and body, unless it is a stream that would never end)."""
    async with client.stream("GET", path, headers=headers) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
        return response


async def test_who_may_open_which_stream(a: httpx.AsyncClient, replicas: Replicas) -> None:
    session = await create_session(a)
    path = f"/v1/sessions/{session['session_id']}/events"
    created = await a.post("/v1/agents", json={"name": "Stream_Reader_Agent"})
    agent_key = created.json()["api_key"]
    async with httpx.AsyncClient(base_url=replicas.urls[0]) as anyone:
        assert_problem(await anyone.get(path), 401)
        assert_problem(await anyone.get(path, headers={"X-API-Key": "not-a-key" * 4}), 401)
        # An agent may read every session (tasks and sessions alike), so its stream too...
        response, _ = await open_stream(anyone, path, headers={"X-API-Key": agent_key})
        await response.aclose()
        # ...but not every event.
        assert_problem(await anyone.get("/v1/events/stream", headers={"X-API-Key": agent_key}), 403)
        # A disabled agent's key (its key revoked) reads nothing, on either replica.
        disabled = await a.delete("/v1/agents/Stream_Reader_Agent")
        assert disabled.status_code in (200, 204), disabled.text
        assert_problem(await _status_of(anyone, path, {"X-API-Key": agent_key}), 401)
    assert_problem(await a.get("/v1/sessions/0193a3c0-0000-7000-8000-000000000000/events"), 404)
    for bad in ("abc", "-1", "1.5", "99999999999999999999", "12 3"):
        assert_problem(await a.get(path, headers={"Last-Event-ID": bad}), 400)
    assert_problem(await a.get(f"{path}?after=x"), 400)
    assert_problem(await a.get(path, headers={"Last-Event-ID": str(2**62)}), 400)  # never sent
    assert_problem(await a.get("/v1/events/stream?types=session.nope"), 400)
    assert_problem(await a.get("/v1/events/stream?types=,"), 400)


async def test_sigterm_ends_open_streams_and_the_server_stops(
    server_url: str, template_database: str
) -> None:
    """A replica told to stop (SIGTERM) ends its open streams cleanly (what was queued, then
    the end of the response) and exits: uvicorn waits for open connections before the
    app's shutdown, so a stream left open held the process for up to
    SWITCHBOARD_STREAM_MAX_SECONDS."""
    name = dbutil.unique_name("sbtest_streams_stop")
    await dbutil.create_database(server_url, name, template=template_database)
    url = dbutil.with_database(server_url, name)
    env = {
        "SWITCHBOARD_DATABASE_URL": url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
        "SWITCHBOARD_STREAM_KEEPALIVE_SECONDS": "1",
    }
    process, port = await asyncio.to_thread(spawn, "switchboard", env)
    try:
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, headers=ADMIN, timeout=10) as client:
            session = await create_session(client)
            response, stream = await open_stream(
                client, f"/v1/sessions/{session['session_id']}/events"
            )
            admin_response, admin = await open_stream(client, "/v1/events/stream")
            try:
                await patch(client, session, 1)
                assert (await stream.next_event()).data["payload"]["version"] == 2
                await admin.next_event()
                process.terminate()
                # Both streams end, cleanly (no error): the client reconnects elsewhere.
                with pytest.raises(EOFError):
                    await stream.next_event(within=10)
                with pytest.raises(EOFError):
                    await admin.next_event(within=10)
            finally:
                await response.aclose()
                await admin_response.aclose()
        code = await asyncio.to_thread(process.wait, 15)
        assert code is not None
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        await dbutil.drop_database(server_url, name)


async def test_the_hub_does_not_run_in_the_trace_of_the_stream_that_started_it(
    database_url: str,
) -> None:
    """The first stream of a process starts the hub from its request: the pump must not
    inherit that request's span, or every query it makes for the life of the process (a
    numbering on each NOTIFY and every ``sync_seconds``) is recorded in that one trace."""
    spans = InMemorySpanExporter()
    tracing = Tracing(TracingSettings(), exporters=[spans])
    tracing.start()  # traces database queries, as a deployment that exports does
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=3))
    await database.open()
    hub = EventHub(database, StreamSettings(sync_seconds=0.2))
    try:
        with tracing.span("GET /v1/events/stream") as request_trace:
            await hub.start()
        in_request = len(spans.get_finished_spans())
        conn = await asyncpg.connect(database_url)
        try:
            newest = await conn.fetchval(
                "INSERT INTO outbox_events (event_type, payload) VALUES ('memory.purged', '{}') "
                "RETURNING event_id"
            )
            deadline = time.monotonic() + 10
            while (
                await conn.fetchval(
                    "SELECT position FROM outbox_events WHERE event_id = $1", newest
                )
                is None
            ):
                assert time.monotonic() < deadline, "the hub never numbered the event"
                await asyncio.sleep(0.05)
        finally:
            await conn.close()
        await asyncio.sleep(0.5)  # a few more sync rounds of the pump
        later = spans.get_finished_spans()[in_request:]
        assert not [s.name for s in later if format(s.context.trace_id, "032x") == request_trace]
    finally:
        await hub.stop()
        await database.close()
        tracing.shutdown()


async def test_the_console_stream_needs_a_console_session_and_delivers_events(
    a: httpx.AsyncClient, replicas: Replicas
) -> None:
    """GET /console/events: the overview's live refresh, signed by the console's cookie (an
    EventSource cannot send a key header), over the same hub as the API's streams."""
    async with httpx.AsyncClient(base_url=replicas.urls[1], timeout=10) as browser:
        refused = await browser.get("/console/events")
        assert refused.status_code == 303, refused.text
        assert refused.headers["location"] == "/console/login"
        # An API key is no console session.
        assert (await browser.get("/console/events", headers=ADMIN)).status_code == 303
        signed_in = await sign_in(browser, ADMIN_KEY)
        assert signed_in.status_code == 303, signed_in.text
        response, stream = await open_stream(browser, "/console/events")
        try:
            assert "connect-src 'self'" in response.headers["content-security-policy"]
            session = await create_session(a)  # on the other replica
            await patch(a, session, 1)
            got = await stream.events(2)
            assert [(e.type, e.data["payload"]["session_id"]) for e in got] == [
                ("session.version", session["session_id"]),
                ("session.version", session["session_id"]),
            ]
            assert [e.data["payload"]["version"] for e in got] == [1, 2]
        finally:
            await response.aclose()
        # A bad cursor is a 400, as on the API's streams.
        bad = await browser.get("/console/events", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 400
