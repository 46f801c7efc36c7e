"""What running a message's agent call as a durable task adds: ``python -m bench.message_latency``.

The issue's target: a message with a fast agent costs under 5 ms more at p50 than the
inline call it replaced. Measured in one process against a real PostgreSQL and a real
agent on 127.0.0.1 (tests/agent_server.py, answering at once), in the same run:

- **agent step**: the routed agent's step as the message runs it now, ``AgentTasks.run``
  (submit run_here: one INSERT leased to this process, the attempt, the completion
  UPDATE, the wait's read) against the inline ``AgentClient.call`` it replaced, on the
  same agent, breaker and request; alternated call by call, so load and cache effects fall
  on both alike. The difference of the p50s is the added latency.
- **whole message**: ``POST /v1/sessions/{id}/messages`` through the ASGI app (httpx's
  in-process transport: no sockets on the client side), for context.

Uses SWITCHBOARD_BENCH_DATABASE_URL, else SWITCHBOARD_TEST_DATABASE_URL, else the
embedded PostgreSQL; it creates and drops a database of its own. docs/benchmarks.md
records the figures ("Durable agent tasks: added latency of a message").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.asgi import create_app  # noqa: E402
from app.clock import SystemClock  # noqa: E402
from app.coordination.dispatch import agent_request  # noqa: E402
from app.coordination.intents import DetectedIntent  # noqa: E402
from app.coordination.outcome import decided_intent  # noqa: E402
from app.coordination.tasks import TaskTurn, task_input  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.pool import Database  # noqa: E402
from app.services import build_services  # noqa: E402
from app.settings import DatabaseSettings, OutboundSettings, Settings  # noqa: E402
from app.tasks.schemas import NewTask  # noqa: E402
from tests import dbutil  # noqa: E402
from tests.agent_server import AgentServer  # noqa: E402

ADMIN = "bench-admin-key-0123456789abcdef"
AGENT = "Make_Plan_Agent"
TEXT = "Please make a plan for my savings"
INTENT = DetectedIntent(
    intent="request_plan",
    clause=TEXT,
    position=0,
    matched=("make a plan",),
    base_weight=50,
    modifiers=(),
    score=50,
)


def percentile(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of ``values``, in ms."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000


def summary(values: list[float]) -> dict[str, float]:
    """p50, p95, p99 and mean in ms."""
    return {
        "p50_ms": round(percentile(values, 0.5), 3),
        "p95_ms": round(percentile(values, 0.95), 3),
        "p99_ms": round(percentile(values, 0.99), 3),
        "mean_ms": round(statistics.fmean(values) * 1000, 3),
    }


async def measure(url: str, rounds: int) -> dict[str, Any]:
    settings = Settings(
        database=DatabaseSettings(pool_min_size=2, pool_max_size=5),
        outbound=OutboundSettings(allow_loopback=True),
    )
    app = create_app(
        settings, database_url=url, admin_key=ADMIN, run_scheduler=False, run_worker=False
    )
    agent = await AgentServer().start()
    agent.reply = {"success": True, "output_data": {"response": "Here is your plan"}}
    headers = {"X-API-Key": ADMIN}
    transport = httpx.ASGITransport(app=app)
    try:
        async with (
            app.lifespan(),
            httpx.AsyncClient(transport=transport, base_url="http://bench", headers=headers) as c,
        ):
            database = Database(url, settings.database)
            await database.open()
            services = build_services(settings, database, SystemClock(), admin_key=ADMIN)
            await services.tasks.start()
            patched = await c.patch(f"/v1/agents/{AGENT}", json={"url": agent.url})
            patched.raise_for_status()
            user = (await c.post("/v1/users", json={})).json()["id"]
            session = (await c.post("/v1/sessions", json={"user_id": user})).json()
            record = await services.sessions.get_session(uuid.UUID(session["session_id"]))
            registered = await services.agents.get_agent(AGENT)
            breaker = services.breakers.breaker_for(registered)
            turn = TaskTurn(
                message=TEXT,
                context_flags=[],
                classifier="rules",
                intent=decided_intent(INTENT),
                routed_by="intent",
            )

            async def tasked() -> None:
                request = agent_request(registered, record, TEXT, INTENT, (), [], str(uuid.uuid4()))
                new = NewTask(
                    agent_name=AGENT,
                    kind="message",
                    input=task_input(request, turn),
                    session_id=record.session_id,
                    user_id=str(record.user_id),
                )
                waited = await services.agent_tasks.run(
                    new, "admin", request.request_id, 8.0, registered
                )
                assert waited.call.ok, waited.call.error

            async def inline() -> None:
                request = agent_request(registered, record, TEXT, INTENT, (), [], str(uuid.uuid4()))
                call = await services.agent_client.call(registered, breaker, request)
                assert call.ok, call.error

            for _ in range(50):  # warm-up: connections, prepared statements, caches
                await tasked()
                await inline()
            by_task: list[float] = []
            by_call: list[float] = []
            for _ in range(rounds):
                for path, into in ((tasked, by_task), (inline, by_call)):
                    started = time.perf_counter()
                    await path()
                    into.append(time.perf_counter() - started)

            messages: list[float] = []
            sid = session["session_id"]
            for index in range(rounds // 2):
                if index % 50 == 0:  # a fresh session now and then: versions do not pile up
                    sid = (await c.post("/v1/sessions", json={"user_id": user})).json()[
                        "session_id"
                    ]
                started = time.perf_counter()
                answer = await c.post(f"/v1/sessions/{sid}/messages", json={"text": TEXT})
                messages.append(time.perf_counter() - started)
                assert answer.status_code == 200, answer.text
                assert not answer.json()["degraded"], answer.text
            await services.tasks.stop()
            await services.aclose()
            await database.close()
    finally:
        await agent.stop()
    task_step, inline_step = summary(by_task), summary(by_call)
    return {
        "rounds": rounds,
        "agent step, as a task (ms)": task_step,
        "agent step, inline call (ms)": inline_step,
        "added at p50 (ms)": round(task_step["p50_ms"] - inline_step["p50_ms"], 3),
        "added at p95 (ms)": round(task_step["p95_ms"] - inline_step["p95_ms"], 3),
        "whole message, POST .../messages (ms)": summary(messages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=1000, help="calls of each path")
    args = parser.parse_args()
    server = (
        os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL")
        or os.environ.get("SWITCHBOARD_TEST_DATABASE_URL")
        or dbutil.server_url()
    )
    name = dbutil.unique_name("sbbench")
    asyncio.run(dbutil.create_database(server, name))
    url = dbutil.with_database(server, name)
    try:
        upgrade(url)
        result = asyncio.run(measure(url, args.rounds))
    finally:
        asyncio.run(dbutil.drop_database(server, name))
    width = max(len(key) for key in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")


if __name__ == "__main__":
    main()
