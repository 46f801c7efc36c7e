"""The server's CPU time per request on the four write paths, in-process
(``python -m bench.write_cpu``, from the checkout to measure).

The app runs on this process's event loop (uvloop when installed, as served), driven
through its ASGI interface directly by 16 concurrent callers: no HTTP client and no
sockets between them, so nearly all the process's CPU time is the app's (and the driver's
share of its statements). Each path is measured as ``bench/run.py`` sends it: PATCH with
``If-Match: *``, a 1 KiB POST memory, a message on the breaker-open fallback path, the n8n
memory webhook with a fresh Idempotency-Key, all as the ``Orchestrator_Agent`` agent key.
After a warm-up, ``ROUNDS`` windows of ``REQUESTS`` requests per path, paths interleaved;
each window reports process CPU µs per request. Run two checkouts alternately (base,
change, base, change) to compare them: CPU time is what a busy shared host disturbs least.

``STEPS=100`` first gives every session 100 stored agent executions (the cap), as a
long-running deployment's sessions have (bench/seed.py); by default the PATCHed sessions
have none and the messages' a few.

``PROFILE=<path>`` (patch, memory, message, webhook) runs one window of that path under
cProfile instead and prints the top functions by own and by cumulative time.
Needs ``SWITCHBOARD_BENCH_DATABASE_URL`` (a server where databases may be created).
"""

from __future__ import annotations

import cProfile
import io
import itertools
import os
import pstats
from collections.abc import Callable
from typing import Any

import orjson
from litestar import Litestar

from app.asgi import create_app
from bench.inprocess import (
    FALLBACK_PATH,
    bench_settings,
    call,
    call_json,
    callers,
    measured,
    on_own_database,
    run,
)
from bench.seed import seed_agent_sequences, steps_wanted
from tests.conftest import lifespan_of

ADMIN = "admin-key-for-the-write-cpu-bench-0123456789"
CONCURRENCY = 16
ONE_KIB = "x" * 1000

Request = tuple[str, str, dict[str, str], bytes]


async def prepare(app: Litestar) -> tuple[str, list[str], list[str], list[str]]:
    """As bench/run.py: the educator's breaker open, an agent key; users, sessions to
    patch, and sessions of their own for messages (which grow the sessions they write)."""
    admin = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}

    async def admin_call(method: str, path: str, data: dict[str, Any]) -> dict[str, Any]:
        return await call_json(app, method, path, admin, data)

    await admin_call(
        "PATCH", "/v1/agents/Educate_Customer_Agent", {"url": "http://192.0.2.1:9/none"}
    )
    await admin_call("POST", "/v1/agents/Educate_Customer_Agent/breaker", {"state": "open"})
    created = await admin_call(
        "POST", "/v1/agents", {"name": "Orchestrator_Agent", "roles": ["coordination_manager"]}
    )
    users, sessions, talked_to = [], [], []
    for i in range(200):
        user = (await admin_call("POST", "/v1/users", {"external_ref": None}))["id"]
        opened = await admin_call("POST", "/v1/sessions", {"user_id": user})
        (sessions if i < 40 else talked_to).append(opened["session_id"])
        if i < 40:
            users.append(user)
    return str(created["api_key"]), users, sessions, talked_to


def requests(
    key: str, users: list[str], sessions: list[str], talked_to: list[str]
) -> dict[str, Callable[[int], Request]]:
    """Each path's i-th request."""
    headers = {"authorization": f"Bearer {key}", "content-type": "application/json"}
    keys = itertools.count()

    def patch(i: int) -> Request:
        body = b'{"session_state": {"agent_outputs": {"bench": %d}}}' % i
        return "PATCH", f"/v1/sessions/{sessions[i % 40]}", {**headers, "if-match": "*"}, body

    def memory(i: int) -> Request:
        body = orjson.dumps(
            {"user_id": users[i % 40], "memory_type": "orchestrator", "content": {"text": ONE_KIB}}
        )
        return "POST", "/v1/memories", headers, body

    def message(i: int) -> Request:
        body = b'{"text": "what is compound interest"}'
        return "POST", f"/v1/sessions/{talked_to[i % len(talked_to)]}/messages", headers, body

    def webhook(i: int) -> Request:
        body = orjson.dumps(
            {
                "user_id": users[i % 40],
                "agent_name": "Orchestrator_Agent",
                "memory_type": "orchestrator",
                "memory_content": {"n": 1},
            }
        )
        hook_headers = {**headers, "idempotency-key": f"k-{os.getpid()}-{next(keys)}"}
        return "POST", "/webhooks/n8n/memory", hook_headers, body

    return {"patch": patch, "memory": memory, "message": message, "webhook": webhook}


async def window(app: Litestar, make: Callable[[int], Request], n: int) -> None:
    """``n`` requests from CONCURRENCY callers; every answer must be a success."""

    async def one(i: int) -> None:
        status, body = await call(app, *make(i))
        assert status < 300, (status, body[:500])

    await callers(n, CONCURRENCY, one)


async def measure(url: str, rounds: int, n: int, profile: str | None) -> None:
    """Warm up, then print CPU µs per request per window (or one profiled window)."""
    settings = bench_settings(coordination=FALLBACK_PATH)
    app = create_app(
        settings, database_url=url, admin_key=ADMIN, run_scheduler=False, run_worker=False
    )
    async with lifespan_of(app):
        paths = requests(*await prepare(app))
        await seed_agent_sequences(url, steps_wanted())
        for make in paths.values():
            await window(app, make, 160)
        if profile is not None:
            profiler = cProfile.Profile()
            profiler.enable()
            await window(app, paths[profile], n)
            profiler.disable()
            for order in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(45)
                print(out.getvalue())
            return
        results: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, make in paths.items():
                measurement = await measured(n, lambda make=make: window(app, make, n))
                results[name].append(measurement.cpu_us)
        for name, values in results.items():
            print(f"{name:8} " + " / ".join(f"{v:,.0f}" for v in values) + " µs per request")


async def main() -> None:
    """Measure on a database of its own, then drop it."""
    rounds = int(os.environ.get("ROUNDS", "2"))
    n = int(os.environ.get("REQUESTS", "400"))
    await on_own_database("sbwcpu", lambda url: measure(url, rounds, n, os.environ.get("PROFILE")))


if __name__ == "__main__":
    run(main)
