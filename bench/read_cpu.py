"""The server's CPU time per request on the read paths, in-process (``python -m
bench.read_cpu``, from the checkout to measure).

The app is driven as uvicorn drives it: raw ASGI scopes on this process's event loop
(uvloop when installed), no HTTP client in between, so nearly all the CPU measured is the
server's. Seeded as ``bench/run.py`` seeds its HTTP part (sessions, 20 memories on 200 of
them), an agent key as the caller (as the benchmark's), the access log and rate limit
off (as ``bench.run`` serves), objects frozen after start-up (as the server). Per path: a warm-up, then
``ROUNDS`` windows of ``REQUESTS`` requests from ``CALLERS`` concurrent callers, each
reported as process CPU µs per request, wall µs per request and the garbage collector's
young (and older) collections. Two checkouts run alternately (base, change, base, change)
compare where wrk's req/s cannot on a busy host. ``PATHS`` (comma-separated: session,
list, context) picks paths. Needs ``SWITCHBOARD_BENCH_DATABASE_URL`` or the test server.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from typing import Any

import asyncpg

from app.asgi import create_app
from app.settings import DatabaseSettings, Settings
from bench.inprocess import call, callers, measured, on_own_database, run
from bench.run import seed_http
from tests.conftest import lifespan_of

ADMIN = "admin-key-for-the-read-cpu-bench-0123456789"
CALLERS = int(os.environ.get("CALLERS", "16"))
REQUESTS = int(os.environ.get("REQUESTS", "3200"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))


async def measure(url: str, paths: list[str]) -> None:
    """Print one line per path and window."""
    settings = Settings(database=DatabaseSettings(pool_min_size=2, pool_max_size=10))
    settings.logging.access = False
    settings.server.rate_limit_per_second = 0  # as bench/run.py serves it
    app: Any = create_app(
        settings, database_url=url, admin_key=ADMIN, run_scheduler=False, run_worker=False
    )
    conn = await asyncpg.connect(url)
    try:
        seed = await seed_http(conn, 300, 2)
    finally:
        await conn.close()
    async with lifespan_of(app):
        status, created = await call(
            app,
            "POST",
            "/v1/agents",
            {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"},
            json.dumps({"name": "Orchestrator_Agent", "roles": ["coordination_manager"]}).encode(),
        )
        assert status == 201, created
        headers = {"authorization": f"Bearer {json.loads(created)['api_key']}"}
        rng = random.Random(7)
        targets: dict[str, Callable[[], str]] = {
            "session": lambda: f"/v1/sessions/{rng.choice(seed['sessions'])}",
            "list": lambda: f"/v1/memories?session_id={rng.choice(seed['memory_sessions'])}",
            "context": lambda: f"/v1/sessions/{rng.choice(seed['memory_sessions'])}/context",
        }
        for name in paths:
            target = targets[name]

            async def one(_: int, target: Callable[[], str] = target) -> None:
                status, body = await call(app, "GET", target(), headers)
                assert status == 200, (status, body)

            await callers(CALLERS * 20, CALLERS, one)
            for _ in range(ROUNDS):
                window = await measured(REQUESTS, lambda: callers(REQUESTS, CALLERS, one))
                print(
                    f"{name:8} cpu {window.cpu_us:6.0f} µs  wall {window.wall_us:6.0f}"
                    f" µs  gc young {window.young:4} older {window.older:3}",
                    flush=True,
                )


async def main() -> None:
    """Measure on a database of its own, then drop it."""
    paths = os.environ.get("PATHS", "session,list,context").split(",")
    await on_own_database("sbread", lambda url: measure(url, paths))


if __name__ == "__main__":
    run(main)
