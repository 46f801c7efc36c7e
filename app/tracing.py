"""Trace context and spans: every request, job run and agent call is a span of a W3C trace,
through OpenTelemetry's SDK; exporting the spans is optional and off by default.

A request that arrives with a valid ``traceparent`` continues that trace; any other starts
one. While it is handled its span is OpenTelemetry's current span (a context variable, so
tasks started by the request inherit it): every log line carries the trace id
(app/logs.py), every agent call and event delivery sends ``traceparent`` on (the httpx
instrumentation around the outbound transport: a client span per call, child of the
request's), and the answer names the trace in ``X-Trace-Id`` and in a problem's
``trace_id``, so a user can quote it. Rows that record what a trace did (decisions, events)
keep its id; work resumed later, in another process perhaps, keeps the whole
``traceparent`` and continues it with ``Tracing.continue_trace``.

The server side is our own middleware (``TracedRequests``) with the SDK's tracer, not
opentelemetry-instrumentation-asgi: measured in-process around a trivial app, that
middleware costs about 70 µs per request (it decodes every header for each of its eight
lookups, sets every attribute twice and names the span by the raw path, ids included),
where this one costs about 12 µs; it also cannot see Litestar's route template.
docs/design.md ("Logs, traces and metrics") has the numbers and the rest of the reasons.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from litestar.enums import ScopeType
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.instrumentation.httpx import AsyncOpenTelemetryTransport
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.sdk.trace.sampling import (
    ALWAYS_OFF,
    ALWAYS_ON,
    Decision,
    ParentBased,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from app.settings import TracingSettings

if TYPE_CHECKING:
    from litestar.types import ASGIApp, HTTPScope, Message, Receive, Scope, Send
    from opentelemetry.context import Context
    from opentelemetry.util.types import Attributes

TRACE_ID_HEADER = "X-Trace-Id"

# W3C Trace Context alone formats and reads stored traceparents; requests and calls use
# the global propagator (OTEL_PROPAGATORS; by default trace context and baggage).
_TRACE_CONTEXT = TraceContextTextMapPropagator()
_TRACE_ID_HEADER = TRACE_ID_HEADER.lower().encode()

access_logger = logging.getLogger("switchboard.access")

# The asyncpg instrumentation names a query span by the statement's first word after a
# leading /* comment */; the named queries (sql/queries/*.sql) open with -- comments, which
# would name every span "--". This also skips those (and whitespace), so spans are named
# SELECT, WITH, INSERT, ...
_LEADING_SQL_COMMENTS = re.compile(r"^(?:\s*(?:/\*.*?\*/|--[^\n]*))+", re.DOTALL)


def current_trace_id() -> str | None:
    """The trace id (32 hex digits) of the request, job or task being handled, if any."""
    span_context = trace.get_current_span().get_span_context()
    if not span_context.is_valid:
        return None
    return trace.format_trace_id(span_context.trace_id)


def current_traceparent() -> str | None:
    """The W3C ``traceparent`` of the current span, if any: what a row keeps so that work
    done later from it (``Tracing.continue_trace``) joins this trace."""
    carrier: dict[str, str] = {}
    _TRACE_CONTEXT.inject(carrier)
    return carrier.get("traceparent")


def trace_id_of(traceparent: str | None) -> str | None:
    """The trace id a stored ``traceparent`` names (None for none or an invalid one)."""
    if not traceparent:
        return None
    span_context = trace.get_current_span(
        _TRACE_CONTEXT.extract({"traceparent": traceparent})
    ).get_span_context()
    return trace.format_trace_id(span_context.trace_id) if span_context.is_valid else None


def outbound_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` plus the current trace context (``traceparent``, ``tracestate``). The
    outbound client's instrumentation sets them on every call anyway, with its own span."""
    propagate.inject(headers)
    return headers


class _QueriesJoinTraces(Sampler):
    """``inner``, except that a database query outside any trace (the LISTEN connection,
    replica presence, breaker re-reads) is not made a trace of its own: with the asyncpg
    instrumentation on, each of those would be a one-span trace every few seconds."""

    def __init__(self, inner: Sampler) -> None:
        self._inner = inner

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[trace.Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        """Drop a parentless query span; otherwise decide as ``inner`` does."""
        if (
            kind is SpanKind.CLIENT
            and attributes is not None
            and ("db.system" in attributes or "db.system.name" in attributes)
            and not trace.get_current_span(parent_context).get_span_context().is_valid
        ):
            return SamplingResult(Decision.DROP)
        return self._inner.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        """As OpenTelemetry describes samplers."""
        return f"QueriesJoinTraces{{{self._inner.get_description()}}}"


def _sampler(settings: TracingSettings) -> Sampler:
    ratio = TraceIdRatioBased(settings.traces_sampler_arg)
    chosen: dict[str, Sampler] = {
        "always_on": ALWAYS_ON,
        "always_off": ALWAYS_OFF,
        "traceidratio": ratio,
        "parentbased_always_on": ParentBased(ALWAYS_ON),
        "parentbased_always_off": ParentBased(ALWAYS_OFF),
        "parentbased_traceidratio": ParentBased(ratio),
    }
    return _QueriesJoinTraces(chosen[settings.traces_sampler])


def _processors(settings: TracingSettings) -> list[SpanProcessor]:
    processors: list[SpanProcessor] = []
    for name in dict.fromkeys(settings.traces_exporter):
        if name == "otlp":
            # Imported only when asked for: it brings protobuf and requests (the extra).
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                OTLPSpanExporter,
            )

            # Endpoint, headers, timeout and compression: the standard OTEL_EXPORTER_OTLP_*.
            processors.append(BatchSpanProcessor(OTLPSpanExporter()))
        elif name == "console":
            processors.append(SimpleSpanProcessor(ConsoleSpanExporter()))
    return processors


class Tracing:
    """The process's tracer (an SDK ``TracerProvider`` built from ``TracingSettings``) and
    what is traced with it: requests (``TracedRequests``), job runs and resumed work
    (``span``, ``continue_trace``), outbound calls (``instrument``) and, while exporting,
    database queries (the asyncpg instrumentation, between ``start`` and ``shutdown``).

    ``exporters`` are added to the configured ones (tests collect spans in memory)."""

    def __init__(self, settings: TracingSettings, exporters: Sequence[SpanExporter] = ()) -> None:
        self.provider = TracerProvider(
            sampler=_sampler(settings),
            # Resource.create adds OTEL_RESOURCE_ATTRIBUTES and the SDK's own attributes.
            resource=Resource.create({SERVICE_NAME: settings.service_name}),
        )
        processors = _processors(settings)
        processors += [SimpleSpanProcessor(exporter) for exporter in exporters]
        for processor in processors:
            self.provider.add_span_processor(processor)
        # Span attributes beyond ids and names are read only by an exporter: without one,
        # requests skip setting them.
        self.exporting = bool(processors)
        self.tracer = self.provider.get_tracer("switchboard")
        self._queries_instrumented = False

    def start(self) -> None:
        """While exporting, trace database queries too (asyncpg's instrumentation patches
        the driver's classes, so for the whole process, until ``shutdown``). Without an
        exporter their spans would be built only to be dropped."""
        if self.exporting and not self._queries_instrumented:
            from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

            instrumentor = AsyncPGInstrumentor()  # type: ignore[no-untyped-call]
            if not instrumentor.is_instrumented_by_opentelemetry:
                instrumentor._leading_comment_remover = _LEADING_SQL_COMMENTS
                instrumentor.instrument(tracer_provider=self.provider)
                self._queries_instrumented = True

    def shutdown(self) -> None:
        """Stop tracing queries, and export what is still buffered (bounded by the
        exporter's own timeout)."""
        if self._queries_instrumented:
            from opentelemetry.instrumentation.asyncpg import AsyncPGInstrumentor

            AsyncPGInstrumentor().uninstrument()  # type: ignore[no-untyped-call]
            self._queries_instrumented = False
        self.provider.shutdown()

    def request_span(self, name: str, parent: Context, attributes: Attributes = None) -> trace.Span:
        """The server span of one request, a child of the span in ``parent`` if it holds a
        valid one. While exporting, an SDK span. Otherwise nothing would ever read what an
        SDK span records, so the span is a non-recording one with the very ids and flags
        the SDK would give it (the same sampler decides the sampled flag, the same id
        generator makes the ids): the trace id, ``traceparent`` and logs are unchanged,
        for about a seventh of the cost (docs/benchmarks.md, "Read paths")."""
        if self.exporting:
            return self.tracer.start_span(
                name,
                context=parent,
                kind=SpanKind.SERVER,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            )
        provider = self.provider
        ids = provider.id_generator
        caller = trace.get_current_span(parent).get_span_context()
        if caller.is_valid:
            trace_id, random_trace_id = caller.trace_id, caller.trace_flags.random_trace_id
        else:
            trace_id, random_trace_id = ids.generate_trace_id(), ids.is_trace_id_random()
        sampled = provider.sampler.should_sample(
            parent, trace_id, name, SpanKind.SERVER, attributes
        )
        flags = (
            TraceFlags.SAMPLED
            if sampled.decision is Decision.RECORD_AND_SAMPLE
            else TraceFlags.DEFAULT
        )
        if random_trace_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        return NonRecordingSpan(
            SpanContext(
                trace_id,
                ids.generate_span_id(),
                is_remote=False,
                trace_flags=TraceFlags(flags),
                trace_state=sampled.trace_state,
            )
        )

    def instrument(self, transport: httpx.AsyncBaseTransport) -> httpx.AsyncBaseTransport:
        """``transport`` with a client span per request, whose context it sends on as
        ``traceparent`` (opentelemetry-instrumentation-httpx)."""
        return AsyncOpenTelemetryTransport(transport, tracer_provider=self.provider)

    @contextlib.contextmanager
    def span(
        self,
        name: str,
        *,
        parent: Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
    ) -> Iterator[str]:
        """Run the block in a new current span: a child of the span in ``parent`` when it
        holds a valid one, else the root of a new trace. Yields the trace id."""
        # Outside any request: a job run or a task is not a child of whatever span the
        # code that scheduled it happened to run in.
        context = parent if parent is not None else otel_context.Context()
        with self.tracer.start_as_current_span(name, context=context, kind=kind) as current:
            yield trace.format_trace_id(current.get_span_context().trace_id)

    def continue_trace(
        self, traceparent: str | None, name: str, *, kind: SpanKind = SpanKind.INTERNAL
    ) -> contextlib.AbstractContextManager[str]:
        """Run the block in a span of the trace a stored ``traceparent`` names (the work a
        request left to be done later, in this process or another): its logs, calls and
        rows then carry that trace's id. A missing or invalid one starts a new trace.
        Yields the trace id."""
        parent = _TRACE_CONTEXT.extract({"traceparent": traceparent}) if traceparent else None
        return self.span(name, parent=parent, kind=kind)


class RequestObserver(Protocol):
    """What counts finished requests (app/metrics.py)."""

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one finished request."""


def _request_attributes(scope: HTTPScope) -> dict[str, Any]:
    """The stable HTTP server semantic conventions that the scope holds (never the query
    string: it can carry user ids and ``contains`` documents)."""
    attributes: dict[str, Any] = {
        "http.request.method": scope["method"],
        "url.path": scope["path"],
        "url.scheme": scope.get("scheme", "http"),
        "network.protocol.version": scope.get("http_version", "1.1"),
    }
    client = scope.get("client")
    if client:
        attributes["client.address"] = client[0]
    server = scope.get("server")
    if server and server[1] is not None:
        attributes["server.address"], attributes["server.port"] = server
    return attributes


class TracedRequests:
    """ASGI middleware around the whole app (routing and error handling included): each
    HTTP request is a server span, continued from the caller's ``traceparent`` or the root
    of a new trace, answered with ``X-Trace-Id``, counted by ``observer`` and, with
    ``access_log``, logged once when it ends."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        tracing: Tracing,
        observer: RequestObserver | None,
        access_log: bool,
    ) -> None:
        self.app = app
        self.tracing = tracing
        self.detailed = tracing.exporting
        self.observer = observer
        self.access_log = access_log
        # The request headers the propagator reads (traceparent, tracestate, baggage).
        self._carried = frozenset(name.encode() for name in propagate.get_global_textmap().fields)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one connection event; only HTTP requests are traced."""
        if scope["type"] != ScopeType.HTTP:
            await self.app(scope, receive, send)
            return
        carried = self._carried
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in carried
        }
        started = time.perf_counter()
        status = 500  # what the client gets when the app fails before answering
        method: str = scope["method"]
        # A context of its own even without a caller's trace: never a child of whatever
        # span the server happened to be in.
        parent = otel_context.Context()
        if carrier:
            parent = propagate.extract(carrier, context=parent)
        span = self.tracing.request_span(
            method, parent, _request_attributes(scope) if self.detailed else None
        )
        token = otel_context.attach(trace.set_span_in_context(span))
        header = (
            _TRACE_ID_HEADER,
            trace.format_trace_id(span.get_span_context().trace_id).encode(),
        )

        async def answer(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        try:
            await self.app(scope, receive, answer)
        except BaseException as exc:
            if self.detailed:
                span.record_exception(exc)
            raise
        finally:
            seconds = time.perf_counter() - started
            template: str | None = scope.get("path_template")
            route = template or "unmatched"
            if self.observer is not None:
                self.observer.observe(method, route, status, seconds)
            if self.access_log:  # while the span is current: the line carries its trace id
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
            # Named by the route template (low cardinality), as the conventions ask.
            span.update_name(f"{method} {template}" if template else method)
            if self.detailed:
                span.set_attribute("http.response.status_code", status)
                if template:
                    span.set_attribute("http.route", template)
            if status >= 500:
                span.set_status(Status(StatusCode.ERROR))
            span.end()
            otel_context.detach(token)
