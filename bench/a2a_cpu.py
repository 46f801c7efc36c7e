"""The server's CPU time per A2A ``SendMessage``, with and without a messageId, beside the
REST message, in-process (``python -m bench.a2a_cpu``, from the checkout to measure).

What a messageId costs: an A2A message that carries one (the a2a-sdk always sends one) is
run under an idempotency key (app/a2a/messages.py): the key's claim, and its answer sealed
in the transaction that writes the coordinator's turn. Three paths, all routed to
Make_Plan_Agent at ``bench/fast_agent.py`` (its own process, answering at once) through
its durable task, each on 200 sessions of its own, as the agent-less admin key:

- ``message``: ``POST /v1/sessions/{id}/messages`` (the REST message; Issue 22's yardstick
  for A2A is ≥ 0.8 of its req/s);
- ``a2a``: ``SendMessage`` whose message has no messageId (run once, no key);
- ``a2a_keyed``: ``SendMessage`` with a fresh messageId (claim + seal).

The app runs on this process's event loop, driven through its ASGI interface by 8
concurrent callers (under the agent's 10 concurrent tasks: none queues), so the process's
CPU time is the app's and the driver's; the agent's is its own process's. After a
warm-up, ``ROUNDS`` rounds of ``REQUESTS`` requests per path, the paths interleaved
(message, a2a, a2a_keyed, message, ...); each window reports process CPU µs per request
and wall µs per request. Every answer must be the agent's, through its completed task.
Needs ``SWITCHBOARD_BENCH_DATABASE_URL`` (a server where databases may be created).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from typing import Any

import orjson
from litestar import Litestar

from app.asgi import create_app
from app.settings import (
    OutboundSettings,
)
from bench.fast_agent import FastAgent
from bench.inprocess import bench_settings, call, call_json, callers, measured, on_own_database, run
from bench.message_task import AGENT, TEXT
from bench.write_cpu import Request
from tests.conftest import lifespan_of

ADMIN = "admin-key-for-the-a2a-cpu-bench-0123456789"
CONCURRENCY = 8
SESSIONS = 200
AGENT_PORT = int(os.environ.get("AGENT_PORT", "18766"))


async def prepare(app: Litestar, agent_url: str) -> dict[str, list[str]]:
    """The planning agent at the fast agent; sessions of their own for each path."""
    admin = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}

    async def admin_call(method: str, path: str, data: dict[str, Any]) -> dict[str, Any]:
        return await call_json(app, method, path, admin, data)

    await admin_call("PATCH", f"/v1/agents/{AGENT}", {"url": agent_url})
    sessions: dict[str, list[str]] = {}
    for path in ("message", "a2a", "a2a_keyed"):
        sessions[path] = []
        for _ in range(SESSIONS):
            user = (await admin_call("POST", "/v1/users", {"external_ref": None}))["id"]
            opened = await admin_call("POST", "/v1/sessions", {"user_id": user})
            sessions[path].append(opened["session_id"])
    return sessions


def requests(sessions: dict[str, list[str]]) -> dict[str, Callable[[int], Request]]:
    """Each path's i-th request."""
    headers = {"authorization": f"Bearer {ADMIN}", "content-type": "application/json"}
    a2a_headers = {**headers, "a2a-version": "1.0"}
    ids = itertools.count()

    def message(i: int) -> Request:
        sid = sessions["message"][i % SESSIONS]
        body = orjson.dumps({"text": TEXT})
        return "POST", f"/v1/sessions/{sid}/messages", headers, body

    def send(path: str, keyed: bool) -> Callable[[int], Request]:
        def make(i: int) -> Request:
            n = next(ids)
            msg: dict[str, Any] = {
                "role": "ROLE_USER",
                "contextId": sessions[path][i % SESSIONS],
                "parts": [{"text": TEXT}],
            }
            if keyed:
                msg["messageId"] = f"m-{os.getpid()}-{n}"
            body = orjson.dumps(
                {"jsonrpc": "2.0", "id": n, "method": "SendMessage", "params": {"message": msg}}
            )
            return "POST", "/a2a", a2a_headers, body

        return make

    return {"message": message, "a2a": send("a2a", False), "a2a_keyed": send("a2a_keyed", True)}


def answered(path: str, body: bytes) -> bool:
    """True if the answer is the agent's, through its completed task."""
    if path == "message":
        return b'"degraded":false' in body and AGENT.encode() in body
    return b'"error"' not in body and b"TASK_STATE_COMPLETED" in body


async def window(app: Litestar, path: str, make: Callable[[int], Request], n: int) -> None:
    """``n`` requests from CONCURRENCY callers; every answer must be the agent's."""

    async def one(i: int) -> None:
        status, body = await call(app, *make(i))
        assert status < 300, body[:500]
        assert answered(path, body), body[:500]

    await callers(n, CONCURRENCY, one)


async def measure(url: str, rounds: int, n: int) -> None:
    """Warm up, then print CPU and wall µs per request per window, paths interleaved."""
    # The fast agent is on 127.0.0.1.
    settings = bench_settings(outbound=OutboundSettings(allow_loopback=True))
    app = create_app(
        settings, database_url=url, admin_key=ADMIN, run_scheduler=False, run_worker=False
    )
    agent = FastAgent(AGENT_PORT)
    try:
        async with lifespan_of(app):
            paths = requests(await prepare(app, agent.url))
            for name, make in paths.items():
                await window(app, name, make, 80)
            cpu_us: dict[str, list[float]] = {name: [] for name in paths}
            wall_us: dict[str, list[float]] = {name: [] for name in paths}
            for _ in range(rounds):
                for name, make in paths.items():
                    measurement = await measured(
                        n, lambda name=name, make=make: window(app, name, make, n)
                    )
                    cpu_us[name].append(measurement.cpu_us)
                    wall_us[name].append(measurement.wall_us)
            for name in paths:
                print(
                    f"{name:9} cpu "
                    + " / ".join(f"{v:,.0f}" for v in cpu_us[name])
                    + " µs; wall "
                    + " / ".join(f"{v:,.0f}" for v in wall_us[name])
                    + " µs per request"
                )
    finally:
        agent.stop()


async def main() -> None:
    """Measure on a database of its own, then drop it."""

    async def rounds(url: str) -> None:
        await measure(
            url, int(os.environ.get("ROUNDS", "3")), int(os.environ.get("REQUESTS", "200"))
        )

    await on_own_database("sba2acpu", rounds)


if __name__ == "__main__":
    run(main)
