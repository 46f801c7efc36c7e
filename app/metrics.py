"""Prometheus metrics at ``GET /metrics``, through prometheus-client: requests by route and
status with a latency histogram, database pool use, circuit breaker states, the last run
of every job, and the process's own metrics (CPU, memory, file descriptors, GC).

Each app has a registry of its own (a test process builds hundreds of apps; the library's
global default registry would mix them). With ``PROMETHEUS_MULTIPROC_DIR`` set, several
worker processes serve one port: prometheus-client then keeps each process's counts in
files under that directory and a scrape answered by any worker sums them all (its
multiprocess mode; ``switchboard serve --workers N`` sets it up itself, app/supervisor.py).
The answer is in the format the scraper asks for: Prometheus text 0.0.4 by default,
OpenMetrics when ``Accept`` names it.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from litestar import Controller, Request, Response, get
from litestar.di import NamedDependency
from prometheus_client import (
    CollectorRegistry,
    Counter,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from app.coordination.breakers import BreakerRegistry
from app.db.pool import Database

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BREAKER_STATES = ("closed", "open", "half_open", "forced_open")


def multiprocess_dir() -> str | None:
    """Where worker processes keep their counts, if several serve one port.

    prometheus-client reads ``PROMETHEUS_MULTIPROC_DIR`` itself, once, when it is imported,
    and from then on writes every count to files there; the app must agree with it, so
    the variable is read here too rather than being a setting of its own."""
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None


class LiveState(Collector):
    """What is read when scraped rather than counted: pool use, breaker states, job runs.

    Breakers and jobs are shared by every replica (PostgreSQL holds them), so any worker
    tells the same; the pool figures are those of the process that answers."""

    def __init__(self, database: Database, breakers: BreakerRegistry) -> None:
        self._database = database
        self._breakers = breakers
        # Set by the /metrics handler just before a scrape (reading them needs a query).
        self.jobs: Sequence[Any] = ()

    def collect(self) -> Iterator[Metric]:
        """The current values, as metric families."""
        pool = GaugeMetricFamily(
            "switchboard_db_pool_connections", "Connections in the pool.", labels=["state"]
        )
        try:
            connections = self._database.pool
        except RuntimeError:  # not open (yet, or any more)
            pass
        else:
            pool.add_metric(["open"], connections.get_size())
            pool.add_metric(["idle"], connections.get_idle_size())
        yield pool
        breakers = GaugeMetricFamily(
            "switchboard_breaker_state",
            "1 for the state each agent's breaker is in.",
            labels=["agent", "state"],
        )
        for snapshot in self._breakers.snapshots():
            for state in _BREAKER_STATES:
                breakers.add_metric([snapshot.name, state], int(snapshot.state == state))
        yield breakers
        rows = GaugeMetricFamily(
            "switchboard_job_last_run_rows",
            "Rows the last run of each job changed.",
            labels=["job"],
        )
        succeeded = GaugeMetricFamily(
            "switchboard_job_last_run_succeeded",
            "1 if the last run of each job succeeded.",
            labels=["job"],
        )
        for job in self.jobs:
            if job.last_run is not None:
                rows.add_metric([job.name], job.last_run.rows_affected)
                succeeded.add_metric([job.name], int(job.last_run.status == "succeeded"))
        yield rows
        yield succeeded


class Metrics:
    """One app's metrics: the request counters it updates and the registry it exposes."""

    def __init__(
        self,
        database: Database,
        breakers: BreakerRegistry,
        jobs: Callable[[], Awaitable[Sequence[Any]]],
    ) -> None:
        self.registry = CollectorRegistry()
        self._jobs = jobs
        self._requests = Counter(
            "switchboard_http_requests",
            "Requests answered, by route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._latency = Histogram(
            "switchboard_http_request_seconds",
            "Request latency, by route.",
            ["method", "route"],
            buckets=BUCKETS,
            registry=self.registry,
        )
        self.live = LiveState(database, breakers)
        self._multiprocess_dir = multiprocess_dir()
        if self._multiprocess_dir is None:
            self.registry.register(self.live)
            # Process metrics describe this process; summed over workers they would
            # mean nothing, so multiprocess mode has none (as prometheus-client says).
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        # The labelled children per (method, route, status): looking them up through
        # ``labels()`` on every request costs more than the counting itself.
        self._children: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one finished request."""
        key = (method, route, status)
        children = self._children.get(key)
        if children is None:
            children = (
                self._requests.labels(method, route, str(status)),
                self._latency.labels(method, route),
            )
            self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def scrape_registry(self) -> CollectorRegistry:
        """What a scrape exposes: this app's registry, or with several workers, every
        worker's counts merged from the multiprocess directory plus this one's live state."""
        if self._multiprocess_dir is None:
            return self.registry
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self._multiprocess_dir)  # type: ignore[no-untyped-call]
        registry.register(self.live)
        return registry

    async def scrape(self, accept: str) -> tuple[bytes, str]:
        """A scrape's answer: the jobs' last runs read now (none when the database does not
        answer: metrics must answer then too), in the format ``accept`` asks for."""
        try:
            jobs = await self._jobs()
        except Exception:
            jobs = []
        return self.exposition(accept, jobs)

    def exposition(self, accept: str, jobs: Sequence[Any]) -> tuple[bytes, str]:
        """The metrics in the format ``accept`` asks for, and its content type."""
        encode, content_type = choose_encoder(accept)
        registry = self.scrape_registry()
        # Set and read without an await in between: a concurrent scrape cannot interleave.
        self.live.jobs = jobs
        return encode(registry), content_type


class MetricsController(Controller):
    """``GET /metrics`` (no key; turn it off with SWITCHBOARD_METRICS_ENABLED=false)."""

    path = "/metrics"
    tags = ["health"]

    @get("/", summary="Prometheus metrics", media_type="text/plain")
    async def metrics(
        self, request: Request[Any, Any, Any], metrics: NamedDependency[Metrics]
    ) -> Response[bytes]:
        """Requests, pool, breakers, jobs and the process, in Prometheus text format (or
        OpenMetrics when the ``Accept`` header asks for it)."""
        body, content_type = await metrics.scrape(request.headers.get("accept", ""))
        if content_type.startswith("text/"):  # Litestar adds the charset to a text/ type
            content_type = content_type.replace("; charset=utf-8", "")
        return Response(body, media_type=content_type)
