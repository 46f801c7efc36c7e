"""Merged writes against strict ones: ``python -m bench.merge_writes``.

N agents (asyncio tasks) each write their own key of ``session_state.agent_outputs`` W
times to one session, each from the version its previous write returned (stale: the
others wrote since), through the app in-process (httpx ASGI transport, no network):

- auto: ``Prefer: merge=auto``; every write lands first time, merged three-way;
- strict: a 409 makes the agent take ``current_version`` from the problem and retry.

Reported per mode: wall time, writes per second, requests sent (writes + retries), 409s.
Uses SWITCHBOARD_BENCH_DATABASE_URL, else SWITCHBOARD_TEST_DATABASE_URL, else the embedded
PostgreSQL; it creates and drops a database of its own. Short (seconds); figures go to
docs/benchmarks.md ("Auto-merge"), not to a results file.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from app.asgi import create_app  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.settings import DatabaseSettings, ServerSettings, Settings  # noqa: E402
from tests import dbutil  # noqa: E402

ADMIN = "bench-admin-key-0123456789abcdef"


async def run(url: str, agents: int, writes: int) -> dict[str, dict[str, Any]]:
    """Both modes on fresh sessions of one app; the figures of each."""
    app = create_app(
        # One key sending thousands of requests a second: no rate limit.
        Settings(
            database=DatabaseSettings(pool_min_size=2, pool_max_size=8),
            server=ServerSettings(rate_limit_per_second=0),
        ),
        database_url=url,
        admin_key=ADMIN,
        run_scheduler=False,
    )
    results: dict[str, dict[str, Any]] = {}
    async with app.lifespan():
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {ADMIN}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://bench", headers=headers
        ) as client:
            user = (await client.post("/v1/users", json={})).json()["id"]
            for mode in ("strict", "auto", "strict", "auto"):  # warm both, keep the second
                session = (await client.post("/v1/sessions", json={"user_id": user})).json()
                results[mode] = await one_mode(
                    client, f"/v1/sessions/{session['session_id']}", mode, agents, writes
                )
    return results


async def one_mode(
    client: httpx.AsyncClient, url: str, mode: str, agents: int, writes: int
) -> dict[str, Any]:
    """Run the agents in one mode; wall time, throughput, requests and 409s."""
    requests = conflicts = 0

    async def agent(index: int) -> None:
        nonlocal requests, conflicts
        version = 1
        for write in range(writes):
            while True:
                requests += 1
                response = await client.patch(
                    url,
                    json={"session_state": {"agent_outputs": {f"a{index}": write}}},
                    headers={"If-Match": f'"{version}"', "Prefer": f"merge={mode}"},
                )
                if response.status_code == 200:
                    version = response.json()["version"]
                    break
                if response.status_code != 409:
                    raise RuntimeError(response.text)
                conflicts += 1
                version = response.json()["current_version"]

    started = time.perf_counter()
    await asyncio.gather(*(agent(i) for i in range(agents)))
    elapsed = time.perf_counter() - started
    return {
        "seconds": round(elapsed, 2),
        "writes_per_s": round(agents * writes / elapsed, 1),
        "requests": requests,
        "conflicts_409": conflicts,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--writes", type=int, default=50)
    args = parser.parse_args()
    server = (
        os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL")
        or os.environ.get("SWITCHBOARD_TEST_DATABASE_URL")
        or dbutil.server_url()
    )
    name = dbutil.unique_name("sbbench_merge")
    asyncio.run(dbutil.create_database(server, name))
    url = dbutil.with_database(server, name)
    try:
        upgrade(url)
        results = asyncio.run(run(url, args.agents, args.writes))
    finally:
        asyncio.run(dbutil.drop_database(server, name))
    print(f"{args.agents} agents x {args.writes} writes each, one session, from stale versions")
    print("| mode | seconds | writes/s | requests | 409s |")
    print("|---|---|---|---|---|")
    for mode, figures in results.items():
        print(
            f"| {mode} | {figures['seconds']} | {figures['writes_per_s']} | "
            f"{figures['requests']} | {figures['conflicts_409']} |"
        )


if __name__ == "__main__":
    main()
