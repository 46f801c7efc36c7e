"""The request metrics through prometheus-client: cumulative ``le`` buckets, routes and
statuses apart, one registry per app, the exposition format the scraper asks for."""

from __future__ import annotations

from typing import Any

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from app.clock import SystemClock
from app.coordination.breakers import BreakerRegistry
from app.db.pool import Database
from app.metrics import BUCKETS, Metrics
from app.settings import DatabaseSettings


async def no_jobs() -> list[Any]:
    return []


def metrics() -> Metrics:
    """An app's metrics over a database that is never opened (the pool is left out)."""
    database = Database("postgresql://nowhere/none", DatabaseSettings())
    return Metrics(
        database,
        BreakerRegistry(database, SystemClock(), sync_interval=5.0, replica_id="test"),
        no_jobs,
    )


def samples(found: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    body, _ = found.exposition("", [])
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def bucket(le: str, route: str = "/x", method: str = "GET") -> tuple[str, frozenset[Any]]:
    labels = {"method": method, "route": route, "le": le}
    return ("switchboard_http_request_seconds_bucket", frozenset(labels.items()))


def test_buckets_are_cumulative_and_a_bound_counts_as_within() -> None:
    found = metrics()
    for seconds in (0.001, 0.005, 0.02, 0.3, 7.0):
        found.observe("GET", "/x", 200, seconds)
    values = samples(found)
    assert values[bucket("0.005")] == 2  # 0.001 and exactly 0.005
    assert values[bucket("0.01")] == 2
    assert values[bucket("0.025")] == 3
    assert values[bucket("0.25")] == 3
    assert values[bucket("0.5")] == 4
    assert values[bucket(str(BUCKETS[-1]))] == 4  # 7 s is past the last bound
    assert values[bucket("+Inf")] == 5
    counts = [values[bucket(str(b))] for b in BUCKETS]
    assert counts == sorted(counts)


def test_routes_and_statuses_are_counted_apart() -> None:
    found = metrics()
    found.observe("GET", "/x", 200, 0.01)
    found.observe("GET", "/x", 404, 0.01)
    found.observe("POST", "/x", 200, 0.01)
    found.observe("GET", "/x", 200, 0.01)
    text = found.exposition("", [])[0].decode()
    assert 'switchboard_http_requests_total{method="GET",route="/x",status="200"} 2.0' in text
    assert 'switchboard_http_requests_total{method="GET",route="/x",status="404"} 1.0' in text
    assert 'switchboard_http_request_seconds_count{method="GET",route="/x"} 3.0' in text
    assert 'switchboard_http_request_seconds_count{method="POST",route="/x"} 1.0' in text


def test_each_app_counts_its_own_requests() -> None:
    first, second = metrics(), metrics()
    first.observe("GET", "/x", 200, 0.01)
    labels = {"method": "GET", "route": "/x", "status": "200"}
    key = ("switchboard_http_requests_total", frozenset(labels.items()))
    assert samples(first)[key] == 1
    assert key not in samples(second)


def test_the_standard_format_by_default_and_openmetrics_when_asked() -> None:
    found = metrics()
    found.observe("GET", "/x", 200, 0.01)
    body, content_type = found.exposition("", [])
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert "process_cpu_seconds_total" in body.decode()  # the process's own metrics
    assert "python_gc_collections_total" in body.decode()
    body, content_type = found.exposition(
        "application/openmetrics-text; version=1.0.0,text/plain;version=0.0.4;q=0.5", []
    )
    assert content_type.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith(b"# EOF\n")
    names = {family.name for family in openmetrics_families(body.decode())}
    assert {"switchboard_http_requests", "switchboard_http_request_seconds"} <= names
