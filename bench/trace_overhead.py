"""What tracing costs, in-process: ``python -m bench.trace_overhead``.

- per request: Switchboard's ``TracedRequests`` (app/tracing.py) around a trivial ASGI app,
  with and without a caller's ``traceparent``, with exporting off (the default) and on (a
  batch processor whose exporter drops everything, so the export itself is not timed),
  next to opentelemetry-instrumentation-asgi's middleware, the one not used;
- per agent call: the httpx instrumentation around a transport that answers at once;
- per query: the asyncpg instrumentation (installed only while exporting), against a real
  PostgreSQL when ``BENCH_DATABASE_URL`` is set.

Each figure is the best of five runs, in µs per operation, minus the bare operation.
Access log and request counting are off: they cost the same with any tracing.
docs/design.md ("Logs, traces and metrics") records the figures.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
import httpx
from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from app.settings import TracingSettings
from app.tracing import TracedRequests, Tracing

HEADERS = [
    (b"host", b"127.0.0.1:8080"),
    (b"user-agent", b"curl/8.0"),
    (b"accept", b"*/*"),
    (b"x-api-key", b"sk_0123456789abcdef0123456789abcdef"),
    (b"content-type", b"application/json"),
    (b"content-length", b"0"),
    (b"connection", b"keep-alive"),
]
TRACEPARENT = (b"traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


class Discard(SpanExporter):
    """Takes every span and does nothing with it."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Drop the batch."""
        return SpanExportResult.SUCCESS


async def trivial(scope: Any, receive: Any, send: Any) -> None:
    """The app being measured around: a constant answer."""
    scope["path_template"] = "/v1/sessions/{session_id}"  # what Litestar's router sets
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


async def per_request(app: Callable[..., Awaitable[None]], headers: list[Any], n: int) -> float:
    """Best of five runs of ``n`` requests, µs per request."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(_: Any) -> None:
        return None

    def scope() -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": "/v1/sessions/0190c3a4-0000-7000-8000-000000000000",
            "raw_path": b"/v1/sessions/0190c3a4-0000-7000-8000-000000000000",
            "query_string": b"",
            "root_path": "",
            "headers": list(headers),
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8080),
        }

    for _ in range(n // 10):
        await app(scope(), receive, send)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(n):
            await app(scope(), receive, send)
        best = min(best, (time.perf_counter() - started) / n * 1e6)
    return best


def exporting_tracing() -> Tracing:
    """A Tracing that records every span and hands it to a batch processor (dropped)."""
    tracing = Tracing(TracingSettings())
    tracing.provider.add_span_processor(BatchSpanProcessor(Discard()))
    tracing.exporting = True
    return tracing


async def requests(n: int) -> None:
    """The per-request table."""
    off, on = Tracing(TracingSettings()), exporting_tracing()
    variants: dict[str, Callable[..., Awaitable[None]]] = {
        "bare app": trivial,
        "TracedRequests, exporting off": TracedRequests(
            trivial, tracing=off, observer=None, access_log=False
        ),
        "TracedRequests, exporting on": TracedRequests(
            trivial, tracing=on, observer=None, access_log=False
        ),
        "instrumentation-asgi, exporting off": OpenTelemetryMiddleware(
            trivial, tracer_provider=off.provider, exclude_spans=["receive", "send"]
        ),
        "instrumentation-asgi + send/receive spans": OpenTelemetryMiddleware(
            trivial, tracer_provider=off.provider
        ),
    }
    bare = await per_request(trivial, HEADERS, n)
    print(f"per request, µs added to a bare app ({bare:.1f} µs), best of 5 x {n}")
    for name, app in variants.items():
        plain = await per_request(app, HEADERS, n)
        traced = await per_request(app, [*HEADERS, TRACEPARENT], n)
        print(f"  {name:45s} {plain - bare:6.1f}   with traceparent {traced - bare:6.1f}")
    on.shutdown()


async def calls(n: int) -> None:
    """The per-call figure of the httpx instrumentation."""

    def answer(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{}")

    tracing = Tracing(TracingSettings())
    bare = httpx.AsyncClient(transport=httpx.MockTransport(answer))
    instrumented = httpx.AsyncClient(transport=tracing.instrument(httpx.MockTransport(answer)))
    figures = []
    for client in (bare, instrumented):
        best = float("inf")
        with tracing.span("bench"):
            for _ in range(5):
                started = time.perf_counter()
                for _ in range(n):
                    await client.post("http://agent.local/x", content=b"{}")
                best = min(best, (time.perf_counter() - started) / n * 1e6)
        figures.append(best)
        await client.aclose()
    print(
        f"per agent call: {figures[0]:.1f} µs bare (in-memory transport), "
        f"{figures[1] - figures[0]:.1f} µs added by the httpx instrumentation"
    )


async def queries(url: str, n: int) -> None:
    """The per-query figure of the asyncpg instrumentation."""
    tracing = exporting_tracing()
    conn = await asyncpg.connect(url)
    figures = []
    try:
        for instrumented in (False, True):
            if instrumented:
                tracing.start()
            best = float("inf")
            with tracing.span("bench"):
                for _ in range(5):
                    started = time.perf_counter()
                    for _ in range(n):
                        await conn.fetchval("SELECT 1")
                    best = min(best, (time.perf_counter() - started) / n * 1e6)
            figures.append(best)
    finally:
        await conn.close()
        tracing.shutdown()
    print(
        f"per query: {figures[0]:.1f} µs bare (SELECT 1), "
        f"{figures[1] - figures[0]:.1f} µs added by the asyncpg instrumentation (exporting only)"
    )


async def main() -> None:
    """Print the three tables."""
    await requests(20_000)
    await calls(5_000)
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        await queries(url, 5_000)
    else:
        print("per query: set BENCH_DATABASE_URL to measure the asyncpg instrumentation")


if __name__ == "__main__":
    asyncio.run(main())
