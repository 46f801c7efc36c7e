"""What the in-process CPU benchmarks share (``bench/read_cpu.py``, ``bench/write_cpu.py``,
``bench/message_cpu.py``): a database of their own, a request handed to the app as uvicorn
hands it over, concurrent callers, and the measuring loop (process CPU and wall time per
request over a window, with the garbage collector's collections in it).

CPU time is what a busy shared host disturbs least, so two checkouts run alternately (base,
change, base, change) compare where wrk's req/s cannot.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import orjson

from app.db.migrate import upgrade
from app.settings import CoordinationSettings, DatabaseSettings, ServerSettings, Settings
from tests import dbutil

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


# The messages' fallback path, not escalations: as bench/run.py's messages row.
FALLBACK_PATH = CoordinationSettings(max_step_retries=1000, max_consecutive_fallbacks=1000)


def bench_settings(**groups: Any) -> Settings:
    """The app's settings for an in-process benchmark: a pool of 10, as served, and no
    rate limit on the benchmark's one key (as bench/serve.py); ``groups`` add to them."""
    return Settings(
        database=DatabaseSettings(pool_min_size=2, pool_max_size=10),
        server=ServerSettings(rate_limit_per_second=0),
        **groups,
    )


async def call(
    app: App, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, bytes]:
    """One request through the app's ASGI interface (``path`` may carry ``?query``), as
    uvicorn would hand it over; the status and body of the answer."""
    path_only, _, query = path.partition("?")
    raw = [(b"host", b"127.0.0.1:8080"), (b"user-agent", b"wrk")]
    raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    if body:
        raw.append((b"content-length", b"%d" % len(body)))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8080),
        "client": ("127.0.0.1", 40000),
        "scheme": "http",
        "method": method,
        "root_path": "",
        "path": path_only,
        "raw_path": path_only.encode(),
        "query_string": query.encode(),
        "headers": raw,
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
        await asyncio.Event().wait()  # a client that stays connected: the answer comes first
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def call_json(
    app: App, method: str, path: str, headers: dict[str, str], data: dict[str, Any]
) -> dict[str, Any]:
    """A JSON request that must succeed (set-up calls); its parsed answer."""
    status, body = await call(app, method, path, headers, orjson.dumps(data))
    assert status < 300, body
    parsed: dict[str, Any] = orjson.loads(body)
    return parsed


async def callers(n: int, concurrency: int, one: Callable[[int], Awaitable[None]]) -> None:
    """Requests ``0 .. n-1``, ``one(i)`` each, from ``concurrency`` concurrent callers."""
    numbers = iter(range(n))

    async def caller() -> None:
        for i in numbers:
            await one(i)

    await asyncio.gather(*(caller() for _ in range(concurrency)))


@dataclass(frozen=True, slots=True)
class Window:
    """One measured window: per request, process CPU and wall µs; the young (generation 0)
    and older collections the garbage collector started in it."""

    cpu_us: float
    wall_us: float
    young: int
    older: int


async def measured(requests: int, run: Callable[[], Awaitable[None]]) -> Window:
    """Run one window of ``requests`` requests (``run``) and measure it."""
    young = [0, 0]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            young[0 if info["generation"] == 0 else 1] += 1

    gc.callbacks.append(count)
    try:
        cpu, wall = time.process_time(), time.perf_counter()
        await run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        gc.callbacks.remove(count)
    return Window(cpu / requests * 1e6, wall / requests * 1e6, young[0], young[1])


async def on_own_database(prefix: str, measure: Callable[[str], Awaitable[None]]) -> None:
    """``measure(url)`` on a migrated database of its own, dropped afterwards, on
    ``SWITCHBOARD_BENCH_DATABASE_URL``'s server (else the test server)."""
    server = os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL") or dbutil.server_url()
    name = dbutil.unique_name(prefix)
    await dbutil.create_database(server, name)
    url = dbutil.with_database(server, name)
    try:
        await asyncio.to_thread(upgrade, url)
        await measure(url)
    finally:
        await dbutil.drop_database(server, name)


def run(main: Callable[[], Coroutine[Any, Any, None]], *, uvloop: bool = True) -> None:
    """Run ``main`` on uvloop when installed and asked for (as the server runs), else on
    asyncio's own loop."""
    if uvloop:
        try:
            import uvloop as loop
        except ImportError:
            pass
        else:
            loop.run(main())
            return
    asyncio.run(main())
