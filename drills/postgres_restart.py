"""Drill: PostgreSQL stops in the middle of a write load and comes back.

Expectations: requests during the outage get 503 problem+json quickly (no hangs, no 500),
/ready says 503, the service recovers by itself within 5 s of the database being back, and
every write acknowledged with 201 is in the database afterwards.

Runs against its own embedded PostgreSQL in a temporary folder, so it never
touches a shared server; bounded to about 20 s; talks only to 127.0.0.1.
    .venv/bin/python -m drills.postgres_restart
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.embedded import EmbeddedPostgres  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from bench.serve import spawn  # noqa: E402

ADMIN = "drill-admin-key-0123456789abcdef"
WRITERS = 8
OUTAGE_AT, OUTAGE_FOR, TOTAL = 3.0, 4.0, 14.0


def start_postgres(data: Path) -> EmbeddedPostgres:
    server = EmbeddedPostgres(data.parent)
    server.start()
    return server


async def load(base: str, log: list[dict[str, Any]], stop_at: float) -> None:
    async with httpx.AsyncClient(
        base_url=base, headers={"Authorization": f"Bearer {ADMIN}"}
    ) as client:
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                response = await client.post("/v1/users", json={}, timeout=15)
                status = response.status_code
                body = response.json() if response.content else {}
                media = response.headers.get("content-type", "")
            except httpx.HTTPError as exc:
                status, body, media = 0, {"error": type(exc).__name__}, ""
            log.append(
                {
                    "at": started,
                    "took": time.monotonic() - started,
                    "status": status,
                    "id": body.get("id") if status == 201 else None,
                    "problem": media.startswith("application/problem+json"),
                }
            )
            if status != 201:
                await asyncio.sleep(0.05)


async def drill() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "pg"
        server = start_postgres(data)
        url = server.url
        await asyncio.to_thread(upgrade, url)
        env = {
            "SWITCHBOARD_DATABASE_URL": url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN,
            "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
            "SWITCHBOARD_DATABASE_COMMAND_TIMEOUT": "2",
            "SWITCHBOARD_DATABASE_ACQUIRE_TIMEOUT": "2",
        }
        app, port = spawn("switchboard", env)
        base = f"http://127.0.0.1:{port}"
        try:
            t0 = time.monotonic()
            log: list[dict[str, Any]] = []
            writers = [asyncio.create_task(load(base, log, t0 + TOTAL)) for _ in range(WRITERS)]
            await asyncio.sleep(OUTAGE_AT)
            await asyncio.to_thread(server.stop)  # stop PostgreSQL
            stopped = time.monotonic()
            await asyncio.sleep(1.0)
            async with httpx.AsyncClient() as probe:
                ready_during = (await probe.get(f"{base}/ready", timeout=5)).status_code
            await asyncio.sleep(OUTAGE_FOR - 1.0)
            server = await asyncio.to_thread(start_postgres, data)  # start it again
            restarted = time.monotonic()
            await asyncio.gather(*writers)
            async with httpx.AsyncClient() as probe:
                ready_after = (await probe.get(f"{base}/ready", timeout=5)).status_code
        finally:
            app.terminate()
            app.wait(timeout=10)
        acknowledged = {entry["id"] for entry in log if entry["id"]}
        conn = await asyncpg.connect(url)
        try:
            stored = {str(r[0]) for r in await conn.fetch("SELECT id FROM users")}
        finally:
            await conn.close()
        server.stop()
    during = [e for e in log if stopped <= e["at"] < restarted]
    after_ok = [e["at"] + e["took"] for e in log if e["at"] >= restarted and e["status"] == 201]
    statuses: dict[str, int] = {}
    for entry in during:
        statuses[str(entry["status"])] = statuses.get(str(entry["status"]), 0) + 1
    return {
        "requests": len(log),
        "acknowledged_writes": len(acknowledged),
        "acknowledged_found_after": len(acknowledged & stored),
        "lost_writes": len(acknowledged - stored),
        "outage_statuses": statuses,
        "outage_answers_all_problem_json": all(e["problem"] for e in during if e["status"] != 201),
        "slowest_answer_during_outage_s": round(max((e["took"] for e in during), default=0.0), 2),
        "ready_during_outage": ready_during,
        "ready_after": ready_after,
        "recovered_after_s": round(min(after_ok) - restarted, 2) if after_ok else None,
    }


def main() -> None:
    result = asyncio.run(drill())
    print(json.dumps(result, indent=2))
    ok = (
        result["lost_writes"] == 0
        and set(result["outage_statuses"]) <= {"503", "201"}
        and result["outage_answers_all_problem_json"]
        and result["ready_during_outage"] == 503
        and result["recovered_after_s"] is not None
        and result["recovered_after_s"] <= 5
    )
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
