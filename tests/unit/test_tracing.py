"""Trace context: a valid ``traceparent`` is continued, anything else starts a new trace,
and calls made inside a trace carry it on."""

from __future__ import annotations

import pytest

from app.tracing import current_trace_id, outbound_headers, traced

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_valid_traceparent_is_continued_in_a_span_of_its_own() -> None:
    with traced({"traceparent": PARENT, "tracestate": "vendor=x"}) as trace_id:
        assert trace_id == current_trace_id() == "0af7651916cd43dd8448eb211c80319c"
        sent = outbound_headers({"accept": "application/json"})
    assert sent["accept"] == "application/json"
    version, sent_trace, sent_span, flags = sent["traceparent"].split("-")
    assert (version, sent_trace, flags) == ("00", trace_id, "01")  # sampled stays sampled
    assert sent_span != "b7ad6b7169203331"  # this service's span, child of the caller's
    assert sent["tracestate"] == "vendor=x"
    assert current_trace_id() is None  # the trace ends with the block


@pytest.mark.parametrize(
    "traceparent",
    [
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
def test_an_invalid_traceparent_starts_a_new_trace(traceparent: str) -> None:
    with traced({"traceparent": traceparent}) as trace_id:
        sent = outbound_headers({})
    assert len(trace_id) == 32
    assert trace_id != "0af7651916cd43dd8448eb211c80319c"
    assert int(trace_id, 16) != 0
    assert sent["traceparent"].startswith(f"00-{trace_id}-")
    assert sent["traceparent"].endswith("-00")  # a trace started here is not sampled


def test_each_trace_started_here_is_new_and_nothing_is_sent_outside_one() -> None:
    with traced() as first:
        pass
    with traced() as second:
        pass
    assert first != second
    assert outbound_headers({}) == {}
