"""Prometheus-style metrics at ``GET /metrics``: requests by route and status with a latency
histogram, database pool use, circuit breaker states and the last run of every job.
In memory and per process, like every Prometheus client; no extra dependency."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections import defaultdict
from itertools import accumulate
from typing import Any

from litestar import Controller, Response, get
from litestar.di import NamedDependency
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from app.coordination.breakers import BreakerRegistry
from app.db.pool import Database
from app.maintenance.service import MaintenanceService

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_BREAKER_STATES = ("closed", "open", "half_open", "forced_open")


class RequestMetrics:
    """Counters and a latency histogram per (method, route template, status)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str, int], int] = defaultdict(int)
        self.buckets: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0] * len(BUCKETS))
        self.sums: dict[tuple[str, str], float] = defaultdict(float)
        self.observations: dict[tuple[str, str], int] = defaultdict(int)

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        """Record one finished request."""
        self.counts[(method, route, status)] += 1
        key = (method, route)
        self.sums[key] += seconds
        self.observations[key] += 1
        # One bucket per observation here; ``lines`` sums them into Prometheus's cumulative
        # ``le`` buckets. Past the last bound, only ``+Inf`` (the observation count) has it.
        # The route's row exists from its first observation, even one past every bound.
        counts = self.buckets[key]
        index = bisect_left(BUCKETS, seconds)
        if index < len(BUCKETS):
            counts[index] += 1

    def lines(self) -> list[str]:
        """The request metrics in Prometheus text format."""
        out = [
            "# HELP switchboard_http_requests_total Requests answered, by route and status.",
            "# TYPE switchboard_http_requests_total counter",
        ]
        for (method, route, status), count in sorted(self.counts.items()):
            out.append(
                f'switchboard_http_requests_total{{method="{method}",route="{route}",'
                f'status="{status}"}} {count}'
            )
        out += [
            "# HELP switchboard_http_request_seconds Request latency, by route.",
            "# TYPE switchboard_http_request_seconds histogram",
        ]
        for (method, route), counts in sorted(self.buckets.items()):
            labels = f'method="{method}",route="{route}"'
            for bound, count in zip(BUCKETS, accumulate(counts), strict=True):
                out.append(
                    f'switchboard_http_request_seconds_bucket{{{labels},le="{bound}"}} {count}'
                )
            total = self.observations[(method, route)]
            out.append(f'switchboard_http_request_seconds_bucket{{{labels},le="+Inf"}} {total}')
            out.append(
                f"switchboard_http_request_seconds_sum{{{labels}}} {self.sums[(method, route)]:.6f}"
            )
            out.append(f"switchboard_http_request_seconds_count{{{labels}}} {total}")
        return out


def metrics_middleware(app: ASGIApp) -> ASGIApp:
    """Time every HTTP request and count it under its route template."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP:
            await app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def capture(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await app(scope, receive, capture)
        except Exception as exc:
            # Errors raised here become responses further out (the problem+json handlers).
            code: Any = getattr(exc, "status", None) or getattr(exc, "status_code", None)
            status = int(code) if isinstance(code, int) else 500
            raise
        finally:
            registry: RequestMetrics = scope["app"].state.request_metrics
            route = str(scope.get("path_template") or "unmatched")
            method = str(scope.get("method", "-"))
            registry.observe(method, route, status, time.perf_counter() - started)

    return middleware


class MetricsController(Controller):
    """``GET /metrics`` (no key; turn it off with SWITCHBOARD_METRICS_ENABLED=false)."""

    path = "/metrics"
    tags = ["health"]

    @get("/", summary="Prometheus metrics", media_type="text/plain")
    async def metrics(
        self,
        request_metrics: NamedDependency[RequestMetrics],
        database: NamedDependency[Database],
        breakers: NamedDependency[BreakerRegistry],
        maintenance: NamedDependency[MaintenanceService],
    ) -> Response[str]:
        """Requests, pool, breakers and jobs, in Prometheus text format."""
        lines = request_metrics.lines()
        pool = database.pool
        lines += [
            "# HELP switchboard_db_pool_connections Connections in the pool.",
            "# TYPE switchboard_db_pool_connections gauge",
            f'switchboard_db_pool_connections{{state="open"}} {pool.get_size()}',
            f'switchboard_db_pool_connections{{state="idle"}} {pool.get_idle_size()}',
            "# HELP switchboard_breaker_state 1 for the state each agent's breaker is in.",
            "# TYPE switchboard_breaker_state gauge",
        ]
        for snapshot in breakers.snapshots():
            for state in _BREAKER_STATES:
                value = int(snapshot.state == state)
                lines.append(
                    f'switchboard_breaker_state{{agent="{snapshot.name}",state="{state}"}} {value}'
                )
        lines += [
            "# HELP switchboard_job_last_run_rows Rows the last run of each job changed.",
            "# TYPE switchboard_job_last_run_rows gauge",
            "# HELP switchboard_job_last_run_succeeded 1 if the last run of each job succeeded.",
            "# TYPE switchboard_job_last_run_succeeded gauge",
        ]
        try:
            jobs: list[Any] = await maintenance.jobs()
        except Exception:  # metrics must answer even when the database does not
            jobs = []
        for job in jobs:
            if job.last_run is not None:
                rows = job.last_run.rows_affected
                lines.append(f'switchboard_job_last_run_rows{{job="{job.name}"}} {rows}')
                ok = int(job.last_run.status == "succeeded")
                lines.append(f'switchboard_job_last_run_succeeded{{job="{job.name}"}} {ok}')
        return Response(
            "\n".join(lines) + "\n", media_type="text/plain; version=0.0.4; charset=utf-8"
        )
