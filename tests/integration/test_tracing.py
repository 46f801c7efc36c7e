"""Every request has a trace id: continued from ``traceparent`` or new, on every log line
written while it is handled, in ``X-Trace-Id``, in problem bodies, and passed on to the
agents it calls."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from litestar import Litestar, get

from app.asgi import create_app
from app.clock import FrozenClock
from app.db.pool import Database
from app.errors import EXCEPTION_HANDLERS
from app.logs import log_handler
from app.services import build_services
from app.settings import LoggingSettings, Settings, TracingSettings
from app.tracing import TracedRequests, Tracing
from tests import dbutil
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, app_client, lifespan_of
from tests.integration.helpers import create_session

PARENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT = f"00-{PARENT_TRACE}-b7ad6b7169203331-01"


class JsonLog(io.StringIO):
    """What the switchboard loggers wrote, through the real handler, as parsed lines."""

    def records(self, logger: str | None = None) -> list[dict[str, Any]]:
        found = [json.loads(line) for line in self.getvalue().splitlines()]
        return [r for r in found if logger is None or r["logger"] == logger]


@pytest.fixture
def json_log(caplog: pytest.LogCaptureFixture) -> Iterator[JsonLog]:
    stream = JsonLog()
    handler = log_handler(LoggingSettings(format="json"), stream)
    logger = logging.getLogger("switchboard")
    caplog.set_level(logging.INFO, logger="switchboard")
    logger.addHandler(handler)
    yield stream
    logger.removeHandler(handler)


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


async def test_a_request_continues_the_callers_trace_and_names_it(
    client: httpx.AsyncClient, json_log: JsonLog
) -> None:
    response = await client.get("/v1/agents", headers={"traceparent": PARENT})
    assert response.status_code == 200
    assert response.headers["x-trace-id"] == PARENT_TRACE
    (access,) = json_log.records("switchboard.access")
    assert access["trace_id"] == PARENT_TRACE
    assert (access["method"], access["path"], access["route"]) == (
        "GET",
        "/v1/agents",
        "/v1/agents",
    )
    assert access["status"] == 200
    assert access["duration_ms"] >= 0
    assert access["message"].startswith("GET /v1/agents 200 ")


async def test_without_a_traceparent_each_request_gets_a_new_trace(
    client: httpx.AsyncClient, anon: httpx.AsyncClient, json_log: JsonLog
) -> None:
    first = await client.get("/v1/agents", headers={"traceparent": "00-nonsense"})
    second = await anon.get("/v1/agents")  # 401, answered by the auth middleware
    third = await anon.get("/no/such/route")  # 404, answered by the router
    ids = [r.headers["x-trace-id"] for r in (first, second, third)]
    assert len(set(ids)) == 3
    assert all(len(i) == 32 and int(i, 16) for i in ids)
    logged = json_log.records("switchboard.access")
    assert [(r["trace_id"], r["status"], r["route"]) for r in logged] == [
        (ids[0], 200, "/v1/agents"),
        (ids[1], 401, "/v1/agents"),
        (ids[2], 404, "unmatched"),
    ]
    # A problem names the trace too, for a user to quote.
    assert second.json()["trace_id"] == ids[1]
    assert third.json()["trace_id"] == ids[2]


async def test_a_5xx_problem_names_its_trace(settings: Settings, server_url: str) -> None:
    missing = dbutil.with_database(server_url, "sbtest_does_not_exist")
    settings.database.pool_min_size = 0
    app = create_app(settings, database_url=missing, admin_key=ADMIN_KEY, run_scheduler=False)
    async with lifespan_of(app), app_client(app) as client:
        response = await client.get("/ready", headers={"traceparent": PARENT})
    assert response.status_code == 503
    assert response.json()["trace_id"] == PARENT_TRACE == response.headers["x-trace-id"]


async def test_the_access_log_can_be_turned_off(database_url: str, json_log: JsonLog) -> None:
    settings = Settings(logging=LoggingSettings(access=False))
    app = create_app(settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False)
    async with lifespan_of(app), app_client(app) as client:
        response = await client.get("/health")
    assert response.status_code == 200
    assert response.headers["x-trace-id"]
    assert json_log.records("switchboard.access") == []


async def test_an_agent_call_carries_the_requests_trace(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    patched = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": agent.url})
    assert patched.status_code == 200, patched.text
    session = await create_session(client)
    response = await client.post(
        f"/v1/sessions/{session['session_id']}/messages",
        json={"text": "Please make a plan for my savings"},
        headers={"traceparent": PARENT},
    )
    assert response.status_code == 200, response.text
    assert response.json()["agent"] == "Make_Plan_Agent"
    sent = agent.headers[-1]["traceparent"]
    version, trace_id, span_id, flags = sent.split("-")
    assert (version, trace_id, flags) == ("00", PARENT_TRACE, "01")
    assert span_id != "b7ad6b7169203331"


async def test_every_line_written_while_handling_a_request_has_its_trace_id(
    json_log: JsonLog,
) -> None:
    """A handler's own log line and the 500 it ends in, around a small app of its own (the
    middleware and error handlers are the ones create_app uses)."""
    logger = logging.getLogger("switchboard.test")

    @get("/boom")
    async def boom() -> None:
        logger.info("about to fail", extra={"step": 1})
        raise RuntimeError("a bug")

    inner = Litestar([boom], exception_handlers=EXCEPTION_HANDLERS, logging_config=None)
    inner.asgi_handler = TracedRequests(
        inner.asgi_handler, tracing=Tracing(TracingSettings()), observer=None, access_log=True
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=inner), base_url="http://test"
    ) as client:
        response = await client.get("/boom", headers={"traceparent": PARENT})
    assert response.status_code == 500
    assert response.json()["trace_id"] == PARENT_TRACE
    lines = json_log.records()
    assert [line["logger"] for line in lines] == [
        "switchboard.test",
        "switchboard.errors",
        "switchboard.access",
    ]
    assert {line["trace_id"] for line in lines} == {PARENT_TRACE}
    assert "RuntimeError: a bug" in lines[1]["exception"]
    assert lines[2]["status"] == 500


async def test_a_decision_keeps_the_trace_of_the_request_that_made_it(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    patched = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": agent.url})
    assert patched.status_code == 200, patched.text
    session = await create_session(client)
    sid = session["session_id"]
    continued = await client.post(
        f"/v1/sessions/{sid}/messages",
        json={"text": "Please make a plan for my savings"},
        headers={"traceparent": PARENT},
    )
    started = await client.post(
        f"/v1/sessions/{sid}/messages", json={"text": "what is compound interest"}
    )
    assert continued.status_code == started.status_code == 200
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert [d["trace_id"] for d in decisions] == [started.headers["x-trace-id"], PARENT_TRACE]


async def test_events_keep_the_trace_of_the_request_or_job_that_wrote_them(
    settings: Settings, database_url: str, frozen_clock: FrozenClock
) -> None:
    """The events' statements name no trace: the transaction's traceparent is the column's
    default (sql/schema.sql, current_traceparent)."""
    tracing = Tracing(settings.tracing)
    app = create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        clock=frozen_clock,
        run_scheduler=False,
        tracing=tracing,
    )
    async with lifespan_of(app), app_client(app, {"X-API-Key": ADMIN_KEY}) as client:
        subscribed = await client.post(
            "/v1/subscriptions",
            json={
                "url": "http://127.0.0.1:9/hook",
                "event_types": ["session.expired", "session.restored", "session.expiring"],
            },
        )
        assert subscribed.status_code == 201, subscribed.text
        doomed = await create_session(client, ttl_seconds=3600)
        await create_session(client, ttl_seconds=3600 + 600)  # warned of, 10 min before
        frozen_clock.advance(timedelta(hours=1, minutes=1))
        # A run asked for over HTTP is part of that request's trace.
        ran = await client.post("/v1/jobs/expiry_cleanup/run", headers={"traceparent": PARENT})
        assert ran.status_code == 200, ran.text
        restored = await client.post(f"/v1/sessions/{doomed['session_id']}/restore")
        assert restored.status_code == 200, restored.text
        # A scheduled run is a trace of its own (app/jobs/scheduler.py runs it in a span).
        database = Database(database_url, settings.database)
        await database.open()
        services = build_services(settings, database, frozen_clock, replica="replica-test")
        try:
            with tracing.span("job expiry_warning") as job_trace:
                await services.jobs.run_now("expiry_warning", dry_run=False)
        finally:
            await services.aclose()
            await database.close()
        listed = (await client.get("/v1/events")).json()["items"]
    by_type = {e["event_type"]: e["trace_id"] for e in listed}
    assert by_type == {
        "session.expiring": job_trace,
        "session.restored": restored.headers["x-trace-id"],
        "session.expired": PARENT_TRACE,
    }
