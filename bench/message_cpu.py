"""The server's CPU time per message on the breaker-open fallback path, in-process
(``python -m bench.message_cpu``, from the checkout to measure).

The app runs on this process's event loop behind httpx's ASGI transport: 40 sessions, 8
messages at a time, 80 warm-up messages, then ``ROUNDS`` windows of 400, each reported as
process CPU microseconds per message (and wall time). ``STEPS=100`` first gives every session
100 stored agent executions (the cap), as a long-running deployment's sessions have
(bench/seed.py). CPU time is what a busy shared host
disturbs least, so two checkouts run alternately (base, change, base, change, ...) compare
where wrk's req/s cannot; the client's share of the CPU is the same on both sides.
Needs ``SWITCHBOARD_BENCH_DATABASE_URL`` (a server where databases may be created).
"""

from __future__ import annotations

import asyncio
import os

import httpx

from app.asgi import create_app
from bench.inprocess import FALLBACK_PATH, bench_settings, measured, on_own_database, run
from bench.seed import seed_agent_sequences, steps_wanted
from tests.conftest import lifespan_of

ADMIN = "admin-key-for-the-message-cpu-bench-0123456789"
TEXT = "what is compound interest"


async def measure(url: str, rounds: int) -> list[tuple[float, float]]:
    """(CPU µs, wall µs) per message for each window."""
    settings = bench_settings(coordination=FALLBACK_PATH)
    app = create_app(
        settings, database_url=url, admin_key=ADMIN, run_scheduler=False, run_worker=False
    )
    transport = httpx.ASGITransport(app=app)
    admin_headers = {"Authorization": f"Bearer {ADMIN}"}
    async with (
        lifespan_of(app),
        httpx.AsyncClient(transport=transport, base_url="http://b", headers=admin_headers) as c,
    ):
        patched = await c.patch(
            "/v1/agents/Educate_Customer_Agent", json={"url": "http://192.0.2.1:9/none"}
        )
        patched.raise_for_status()
        opened = await c.post("/v1/agents/Educate_Customer_Agent/breaker", json={"state": "open"})
        opened.raise_for_status()
        created = await c.post(
            "/v1/agents", json={"name": "Orchestrator_Agent", "roles": ["coordination_manager"]}
        )
        key = created.json()["api_key"]
        sessions = []
        for _ in range(40):
            user = (await c.post("/v1/users", json={"external_ref": None})).json()["id"]
            session = await c.post("/v1/sessions", json={"user_id": user})
            session.raise_for_status()
            sessions.append(session.json()["session_id"])
        await seed_agent_sequences(url, steps_wanted())
        async with httpx.AsyncClient(
            transport=transport, base_url="http://b", headers={"X-API-Key": key}
        ) as agent:

            async def one(i: int) -> None:
                sid = sessions[i % len(sessions)]
                answer = await agent.post(f"/v1/sessions/{sid}/messages", json={"text": TEXT})
                assert answer.status_code == 200, answer.text

            async def burst(n: int) -> None:
                for k in range(0, n, 8):
                    await asyncio.gather(*(one(k + j) for j in range(8)))

            await burst(80)
            results = []
            for _ in range(rounds):
                window = await measured(400, lambda: burst(400))
                results.append((window.cpu_us, window.wall_us))
            return results


async def main() -> None:
    """Measure on a database of its own, then drop it."""

    async def report(url: str) -> None:
        results = await measure(url, int(os.environ.get("ROUNDS", "2")))
        print(" ".join(f"cpu {cpu:.0f} µs, wall {wall:.0f} µs;" for cpu, wall in results))

    await on_own_database("sbcpu", report)


if __name__ == "__main__":
    run(main, uvloop=False)
