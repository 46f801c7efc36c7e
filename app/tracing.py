"""Trace context: every request and every job run has a trace id, W3C Trace Context
(``traceparent``) through OpenTelemetry's API.

A request that arrives with a valid ``traceparent`` continues that trace; any other gets
a new one. While it is handled, the trace is OpenTelemetry's current span context (a
context variable, so tasks started by the request inherit it): every log line carries its
id (app/logs.py), every agent call and event delivery sends it on as ``traceparent``
(``outbound_headers``), and the answer names it in ``X-Trace-Id`` and in a problem's
``trace_id``, so a user can quote it.

Why opentelemetry-api and not a hand-written parser: STYLE.md asks for OpenTelemetry's
own trace context, the API package is small (pure Python, depends only on
typing-extensions, about 20 ms to import), its propagator implements the spec's corner
cases (version ``ff``, all-zero ids, over-long headers, ``tracestate``), and a deployment
that adds the OpenTelemetry SDK and exporters sees the same context. Without an SDK
nothing is recorded or exported: the spans are ``NonRecordingSpan`` carriers of ids.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from litestar.enums import ScopeType
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Message, Receive, Scope, Send

TRACE_ID_HEADER = "X-Trace-Id"

_PROPAGATOR = TraceContextTextMapPropagator()
_CARRIED = frozenset({b"traceparent", b"tracestate"})
_TRACE_ID_HEADER = TRACE_ID_HEADER.lower().encode()

access_logger = logging.getLogger("switchboard.access")


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the request or job being handled, if any."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return trace.format_trace_id(span_context.trace_id)


def outbound_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus ``traceparent`` (and ``tracestate``) for a call made on behalf of
    the current request or job, so the agent's own logs can join the trace."""
    _PROPAGATOR.inject(headers)
    return headers


def _span_context(parent: trace.SpanContext | None) -> trace.SpanContext:
    """A new span in ``parent``'s trace (its flags and state kept), or in a new trace."""
    # Ids need to be unique, not secret (they are sent to every agent called): the
    # Mersenne Twister, as OpenTelemetry's SDK uses, at a tenth of the cost of secrets.
    span_id = random.getrandbits(64) or 1
    if parent is not None and parent.is_valid:
        return trace.SpanContext(
            parent.trace_id,
            span_id,
            is_remote=False,
            trace_flags=parent.trace_flags,
            trace_state=parent.trace_state,
        )
    # Not sampled: nothing here records spans, so a collector downstream should not
    # expect this trace's root to be exported.
    return trace.SpanContext(random.getrandbits(128) or 1, span_id, is_remote=False)


@contextlib.contextmanager
def traced(carrier: dict[str, str] | None = None) -> Iterator[str]:
    """Run the block in a new span: a child of the ``traceparent`` in ``carrier`` when it
    holds a valid one, else the root of a new trace. Yields the trace id."""
    parent = None
    if carrier:
        parent = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    span_context = _span_context(parent)
    token = otel_context.attach(trace.set_span_in_context(trace.NonRecordingSpan(span_context)))
    try:
        yield trace.format_trace_id(span_context.trace_id)
    finally:
        otel_context.detach(token)


class RequestObserver(Protocol):
    """What counts finished requests (app/metrics.py)."""

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one finished request."""


class TracedRequests:
    """ASGI middleware around the whole app (routing and error handling included): each
    HTTP request runs in its own trace, answers with ``X-Trace-Id``, is counted by
    ``observer`` and, with ``access_log``, logged once when it ends."""

    def __init__(self, app: ASGIApp, *, observer: RequestObserver | None, access_log: bool) -> None:
        self.app = app
        self.observer = observer
        self.access_log = access_log

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one connection event; only HTTP requests are traced."""
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in _CARRIED
        }
        started = time.perf_counter()
        status = 500  # what the client gets when the app fails before answering

        with traced(carrier) as trace_id:
            header = (_TRACE_ID_HEADER, trace_id.encode())

            async def answer(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    message["headers"] = [*message.get("headers", ()), header]
                await send(message)

            try:
                await self.app(scope, receive, answer)
            finally:
                seconds = time.perf_counter() - started
                route = scope.get("path_template") or "unmatched"
                method: str = scope["method"]
                if self.observer is not None:
                    self.observer.observe(method, route, status, seconds)
                if self.access_log:
                    duration_ms = round(seconds * 1000, 1)
                    access_logger.info(
                        "%s %s %d %.1f ms",
                        method,
                        scope["path"],
                        status,
                        duration_ms,
                        extra={
                            "method": method,
                            "path": scope["path"],
                            "route": route,
                            "status": status,
                            "duration_ms": duration_ms,
                        },
                    )
