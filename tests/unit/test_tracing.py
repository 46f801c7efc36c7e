"""Trace context: a valid ``traceparent`` is continued, anything else starts a new trace,
calls made inside a trace carry it on, and a stored traceparent can be continued later."""

from __future__ import annotations

import pytest
from opentelemetry import propagate
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from app.settings import SettingsInvalid, TracingSettings, load_settings
from app.tracing import (
    Tracing,
    current_trace_id,
    current_traceparent,
    outbound_headers,
    trace_id_of,
)

PARENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
PARENT_SPAN = "b7ad6b7169203331"
PARENT = f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracing(spans: InMemorySpanExporter) -> Tracing:
    return Tracing(TracingSettings(), exporters=[spans])


def test_a_stored_traceparent_is_continued_in_a_span_of_its_own(
    tracing: Tracing, spans: InMemorySpanExporter
) -> None:
    with tracing.continue_trace(PARENT, "task attempt", kind=SpanKind.CONSUMER) as trace_id:
        assert trace_id == current_trace_id() == PARENT_TRACE
        sent = outbound_headers({"accept": "application/json"})
        stored = current_traceparent()
    assert sent["accept"] == "application/json"
    version, sent_trace, sent_span, flags = sent["traceparent"].split("-")
    assert (version, sent_trace) == ("00", PARENT_TRACE)
    assert int(flags, 16) & 1  # sampled stays sampled
    assert sent_span != PARENT_SPAN  # this service's span, child of the caller's
    assert stored == sent["traceparent"]
    assert trace_id_of(stored) == PARENT_TRACE
    assert current_trace_id() is None  # the trace ends with the block
    assert current_traceparent() is None
    (span,) = spans.get_finished_spans()
    assert span.name == "task attempt"
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is not None
    assert format(span.parent.span_id, "016x") == PARENT_SPAN
    assert format(span.context.span_id, "016x") == sent_span


def test_a_tracestate_travels_with_its_trace(tracing: Tracing) -> None:
    parent = propagate.extract({"traceparent": PARENT, "tracestate": "vendor=x"})
    with tracing.span("x", parent=parent):
        sent = outbound_headers({})
    assert sent["tracestate"] == "vendor=x"


@pytest.mark.parametrize(
    "traceparent",
    [
        None,
        "",
        "garbage",
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # all-zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # all-zero span id
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # forbidden version
        "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",  # upper case
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
        "00-" + "a" * 600,
    ],
)
def test_an_invalid_traceparent_starts_a_new_trace(
    tracing: Tracing, traceparent: str | None
) -> None:
    with tracing.continue_trace(traceparent, "job") as trace_id:
        sent = outbound_headers({})
    assert len(trace_id) == 32
    assert trace_id != PARENT_TRACE
    assert int(trace_id, 16) != 0
    assert sent["traceparent"].startswith(f"00-{trace_id}-")
    assert trace_id_of(traceparent) is None


def test_each_trace_started_here_is_new_and_nothing_is_sent_outside_one(
    tracing: Tracing,
) -> None:
    with tracing.span("first") as first, tracing.span("a job is never a child") as second:
        pass
    assert first != second
    assert outbound_headers({}) == {}


def test_the_sampler_is_configurable_and_ids_survive_not_sampling(
    spans: InMemorySpanExporter,
) -> None:
    tracing = Tracing(TracingSettings(traces_sampler="always_off"), exporters=[spans])
    with tracing.span("dropped") as trace_id:
        sent = outbound_headers({})
    assert sent["traceparent"].startswith(f"00-{trace_id}-")
    # Not sampled (bit 0); bit 1 is W3C level 2's "random trace id", which the SDK sets.
    assert int(sent["traceparent"][-2:], 16) & 1 == 0
    assert spans.get_finished_spans() == ()
    # A caller's sampled trace is recorded by the default parent-based sampler, and a
    # caller's unsampled one is not.
    tracing = Tracing(TracingSettings(), exporters=[spans])
    with tracing.continue_trace(PARENT.replace("-01", "-00"), "unsampled caller"):
        pass
    with tracing.continue_trace(PARENT, "sampled caller"):
        pass
    assert [s.name for s in spans.get_finished_spans()] == ["sampled caller"]


def test_without_an_exporter_nothing_is_exported() -> None:
    assert not Tracing(TracingSettings()).exporting
    assert Tracing(TracingSettings(traces_exporter=["console"])).exporting


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("OTEL_TRACES_EXPORTER", "zipkin", "OTEL_TRACES_EXPORTER"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL"),
        ("OTEL_TRACES_SAMPLER", "sometimes", "OTEL_TRACES_SAMPLER"),
        ("OTEL_TRACES_SAMPLER_ARG", "2", "OTEL_TRACES_SAMPLER_ARG"),
    ],
)
def test_a_bad_otel_variable_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, message: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsInvalid, match=message):
        load_settings()


def test_the_standard_otel_variables_configure_tracing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "otlp, console")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "switchboard-eu")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "ParentBased_TraceIdRatio")
    monkeypatch.setenv("OTEL_TRACES_SAMPLER_ARG", "0.25")
    settings = TracingSettings()
    assert settings.traces_exporter == ["otlp", "console"]
    assert settings.exporting
    tracing = Tracing(settings)
    assert tracing.provider.resource.attributes["service.name"] == "switchboard-eu"
    assert "0.25" in tracing.provider.sampler.get_description()
    tracing.shutdown()


@pytest.mark.parametrize(
    ("sampler", "carrier"),
    [
        ("parentbased_always_on", {}),
        ("parentbased_always_on", {"traceparent": PARENT, "tracestate": "vendor=x"}),
        ("parentbased_always_on", {"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-00"}),
        ("always_off", {}),
        ("parentbased_always_off", {"traceparent": PARENT}),
        ("traceidratio", {"traceparent": PARENT}),
    ],
)
def test_without_an_exporter_a_request_span_has_the_context_an_sdk_span_would_have(
    sampler: str, carrier: dict[str, str]
) -> None:
    """Not exporting, a request's span records nothing, but its trace id, flags and
    tracestate (what the answer, the logs and every call made for it carry) are those
    the SDK gives its own span under the same sampler."""
    settings = TracingSettings(traces_sampler=sampler, traces_sampler_arg=0.5)
    light, sdk = Tracing(settings), Tracing(settings, exporters=[InMemorySpanExporter()])
    assert not light.exporting
    assert sdk.exporting
    parent = propagate.extract(carrier)
    span = light.request_span("GET", parent)
    recorded = sdk.request_span("GET", parent)
    assert not span.is_recording()
    assert recorded.is_recording() == (recorded.get_span_context().trace_flags.sampled)
    ours, theirs = span.get_span_context(), recorded.get_span_context()
    assert ours.is_valid
    assert not ours.is_remote
    if carrier:
        assert format(ours.trace_id, "032x") == format(theirs.trace_id, "032x") == PARENT_TRACE
    else:
        assert ours.trace_id != theirs.trace_id  # a new trace each
    assert ours.span_id != theirs.span_id
    assert (ours.trace_flags, ours.trace_state) == (theirs.trace_flags, theirs.trace_state)
    recorded.end()
