"""Exporting spans over OTLP/HTTP, configured by the standard OTEL_* variables, to a real
collector endpoint on 127.0.0.1: one message is one trace, from the caller's traceparent
through the request, its queries and the agent call, whose span the agent is told about."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from app.asgi import create_app
from app.settings import DatabaseSettings, Settings
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED, app_client, lifespan_of
from tests.integration.helpers import create_session

PARENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
PARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"


class Collector:
    """An OTLP/HTTP trace receiver: every span posted to /v1/traces, decoded."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.services: set[str] = set()
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest.FromString(body)
                for resource_spans in request.resource_spans:
                    for attribute in resource_spans.resource.attributes:
                        if attribute.key == "service.name":
                            collector.services.add(attribute.value.string_value)
                    for scope_spans in resource_spans.scope_spans:
                        for span in scope_spans.spans:
                            collector.spans.append(
                                {
                                    "name": span.name,
                                    "trace_id": span.trace_id.hex(),
                                    "span_id": span.span_id.hex(),
                                    "parent": span.parent_span_id.hex(),
                                    "kind": span.kind,
                                    "scope": scope_spans.scope.name,
                                    "attributes": {
                                        a.key: a.value.WhichOneof("value")
                                        and getattr(a.value, a.value.WhichOneof("value") or "")
                                        for a in span.attributes
                                    },
                                }
                            )
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        # The exporter posts from its own thread (and, on shutdown, from the event loop's
        # thread): the receiver runs in threads of its own.
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"


@pytest.fixture
def collector() -> Iterator[Collector]:
    receiver = Collector()
    receiver.thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


async def test_a_message_is_one_exported_trace_with_its_queries_and_agent_call(
    monkeypatch: pytest.MonkeyPatch, collector: Collector, agent: AgentServer, database_url: str
) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "switchboard-test")
    settings = Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5), outbound=LOOPBACK_ALLOWED
    )
    assert settings.tracing.exporting
    app = create_app(settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False)
    async with lifespan_of(app), app_client(app, {"X-API-Key": ADMIN_KEY}) as client:
        patched = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": agent.url})
        assert patched.status_code == 200, patched.text
        session = await create_session(client)
        response = await client.post(
            f"/v1/sessions/{session['session_id']}/messages",
            json={"text": "Please make a plan for my savings"},
            headers={"traceparent": PARENT},
        )
        assert response.status_code == 200, response.text
        unmatched = await client.get("/no/such/route")
    # Leaving the lifespan shut the tracer down, which exported what was buffered.
    assert collector.services == {"switchboard-test"}
    message = [s for s in collector.spans if s["trace_id"] == PARENT_TRACE]
    (server,) = [s for s in message if s["scope"] == "switchboard" and s["parent"] == PARENT_SPAN]
    assert server["name"] == "POST /v1/sessions/{session_id}/messages"
    assert server["parent"] == PARENT_SPAN
    assert server["attributes"]["http.route"] == "/v1/sessions/{session_id}/messages"
    assert server["attributes"]["http.response.status_code"] == 200
    assert server["attributes"]["url.path"] == f"/v1/sessions/{session['session_id']}/messages"
    # The agent call: its task's attempt runs in a span of the request's trace (the task
    # keeps the request's traceparent: app/tasks), and the call is a client span in it.
    (attempt,) = [s for s in message if s["name"] == "task message"]
    assert (attempt["scope"], attempt["parent"]) == ("switchboard", server["span_id"])
    (call,) = [s for s in message if s["scope"] == "opentelemetry.instrumentation.httpx"]
    assert call["parent"] == attempt["span_id"]
    assert agent.headers[-1]["traceparent"] == f"00-{PARENT_TRACE}-{call['span_id']}-01"
    # The queries the request sent, each a client span in its trace (SQL, no parameters).
    queries = [s for s in message if s["scope"] == "opentelemetry.instrumentation.asyncpg"]
    assert len(queries) >= 3
    assert all(q["attributes"]["db.system"] == "postgresql" for q in queries)
    # Named by the statement's first word, past the comments the named queries open with.
    names = {q["name"] for q in queries}
    assert "WITH" in names
    assert names <= {"SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "BEGIN;", "COMMIT;"}
    assert any("coordination_decisions" in q["attributes"]["db.statement"] for q in queries)
    # Every other span belongs to a request's trace: queries outside one (the breaker and
    # presence loops, start-up) are not traces of their own.
    servers = {s["trace_id"] for s in collector.spans if s["scope"] == "switchboard"}
    assert {s["trace_id"] for s in collector.spans} == servers
    assert unmatched.headers["x-trace-id"] in servers
