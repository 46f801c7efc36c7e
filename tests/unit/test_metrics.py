"""The request histogram renders Prometheus's cumulative ``le`` buckets."""

from __future__ import annotations

import re

from app.metrics import BUCKETS, RequestMetrics


def _buckets(metrics: RequestMetrics) -> dict[str, int]:
    found = {}
    for line in metrics.lines():
        match = re.match(r'switchboard_http_request_seconds_bucket\{.*le="([^"]+)"\} (\d+)$', line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def test_buckets_are_cumulative_and_a_bound_counts_as_within() -> None:
    metrics = RequestMetrics()
    for seconds in (0.001, 0.005, 0.02, 0.3, 7.0):
        metrics.observe("GET", "/x", 200, seconds)
    buckets = _buckets(metrics)
    assert buckets["0.005"] == 2  # 0.001 and exactly 0.005
    assert buckets["0.01"] == 2
    assert buckets["0.025"] == 3
    assert buckets["0.25"] == 3
    assert buckets["0.5"] == 4
    assert buckets[str(BUCKETS[-1])] == 4  # 7 s is past the last bound
    assert buckets["+Inf"] == 5
    counts = [buckets[str(b)] for b in BUCKETS]
    assert counts == sorted(counts)


def test_routes_and_statuses_are_counted_apart() -> None:
    metrics = RequestMetrics()
    metrics.observe("GET", "/x", 200, 0.01)
    metrics.observe("GET", "/x", 404, 0.01)
    metrics.observe("POST", "/x", 200, 0.01)
    text = "\n".join(metrics.lines())
    assert 'switchboard_http_requests_total{method="GET",route="/x",status="404"} 1' in text
    assert 'switchboard_http_request_seconds_count{method="GET",route="/x"} 2' in text
    assert 'switchboard_http_request_seconds_count{method="POST",route="/x"} 1' in text


def test_a_route_whose_requests_all_exceed_the_last_bound_still_has_a_histogram() -> None:
    metrics = RequestMetrics()
    metrics.observe("POST", "/slow", 200, BUCKETS[-1] * 2)
    buckets = _buckets(metrics)
    assert buckets["+Inf"] == 1
    assert buckets[str(BUCKETS[-1])] == 0
    assert 'switchboard_http_request_seconds_count{method="POST",route="/slow"} 1' in "\n".join(
        metrics.lines()
    )
