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

import asyncio
import gc
import json
import os
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.asgi import create_app
from app.db.migrate import upgrade
from app.settings import DatabaseSettings, Settings
from bench.run import seed_http
from tests import dbutil
from tests.conftest import lifespan_of

ADMIN = "admin-key-for-the-read-cpu-bench-0123456789"
CALLERS = int(os.environ.get("CALLERS", "16"))
REQUESTS = int(os.environ.get("REQUESTS", "3200"))
ROUNDS = int(os.environ.get("ROUNDS", "2"))

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


async def call(
    app: App, method: str, path: str, key: str, query: str = "", body: bytes = b""
) -> tuple[int, bytes]:
    """One request as uvicorn would hand it over; the status and body of the answer."""
    headers = [
        (b"host", b"127.0.0.1:8080"),
        (b"user-agent", b"wrk"),
        (b"authorization", b"Bearer " + key.encode()),
    ]
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8080),
        "client": ("127.0.0.1", 40000),
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": headers,
        "state": {},
    }
    sent = False
    status = 0
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # never: the answer comes first
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        else:
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


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
            ADMIN,
            body=json.dumps(
                {"name": "Orchestrator_Agent", "roles": ["coordination_manager"]}
            ).encode(),
        )
        assert status == 201, created
        key = json.loads(created)["api_key"]
        rng = random.Random(7)
        targets: dict[str, Callable[[], tuple[str, str]]] = {
            "session": lambda: (f"/v1/sessions/{rng.choice(seed['sessions'])}", ""),
            "list": lambda: ("/v1/memories", f"session_id={rng.choice(seed['memory_sessions'])}"),
            "context": lambda: (f"/v1/sessions/{rng.choice(seed['memory_sessions'])}/context", ""),
        }
        young = [0, 0]

        def count(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                young[0 if info["generation"] == 0 else 1] += 1

        gc.callbacks.append(count)
        for name in paths:
            target = targets[name]

            async def caller(n: int, target: Callable[[], tuple[str, str]] = target) -> None:
                for _ in range(n):
                    path, query = target()
                    status, body = await call(app, "GET", path, key, query)
                    assert status == 200, (status, body)

            async def window(total: int) -> None:
                await asyncio.gather(*(caller(total // CALLERS) for _ in range(CALLERS)))

            await window(CALLERS * 20)
            for _ in range(ROUNDS):
                young[:] = [0, 0]
                cpu, wall = time.process_time(), time.perf_counter()
                await window(REQUESTS)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                print(
                    f"{name:8} cpu {cpu / REQUESTS * 1e6:6.0f} µs  wall {wall / REQUESTS * 1e6:6.0f}"
                    f" µs  gc young {young[0]:4} older {young[1]:3}",
                    flush=True,
                )
        gc.callbacks.remove(count)


async def main() -> None:
    """Measure on a database of its own, then drop it."""
    server = os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL") or dbutil.server_url()
    name = dbutil.unique_name("sbread")
    await dbutil.create_database(server, name)
    url = dbutil.with_database(server, name)
    try:
        await asyncio.to_thread(upgrade, url)
        paths = os.environ.get("PATHS", "session,list,context").split(",")
        await measure(url, paths)
    finally:
        await dbutil.drop_database(server, name)


if __name__ == "__main__":
    try:
        import uvloop

        uvloop.run(main())
    except ImportError:
        asyncio.run(main())
