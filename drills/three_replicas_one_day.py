"""Drill: three scheduler processes share one database through a simulated day.

Each process runs every job on its interval with an accelerated clock (one real second is
half an hour), as replicas would. Expectations: every job slot of the day ran exactly once
(one job_runs row per job and slot, and as many slots as the day holds), and no session
that a rule protects (preserve, a running process) was idled, archived or deleted.
Own embedded PostgreSQL; about a minute; talks to nobody.
    .venv/bin/python -m drills.three_replicas_one_day
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from app.jobs.table import JOBS  # noqa: E402
from app.settings import SchedulerSettings  # noqa: E402

SPEED = 1800.0  # simulated seconds per real second
DAY = timedelta(days=1)
REPLICAS = 3

REPLICA = """
import asyncio, sys, time
from datetime import datetime, timedelta, UTC
from app.db.pool import Database
from app.jobs.table import JOBS
from app.services import build_services
from app.settings import DatabaseSettings, Settings

class FastClock:
    def __init__(self, start, wall_start, speed):
        self.start, self.wall_start, self.speed = start, wall_start, speed
    def now(self):
        return self.start + timedelta(seconds=(time.time() - self.wall_start) * self.speed)

async def main():
    url, name, start, wall_start, speed, end = sys.argv[1:7]
    clock = FastClock(datetime.fromisoformat(start), float(wall_start), float(speed))
    stop = datetime.fromisoformat(end)
    db = Database(url, DatabaseSettings(pool_min_size=1, pool_max_size=3))
    await db.open()
    services = build_services(Settings(), db, clock, replica=name)
    service = services.jobs
    claimed = 0
    while clock.now() < stop:
        for job in JOBS:
            outcome = await service.run_scheduled(job)
            claimed += outcome.claimed
        await asyncio.sleep(0.02)
    print(claimed, flush=True)
    await services.aclose()
    await db.close()

asyncio.run(main())
"""


async def drill() -> dict[str, Any]:
    from app.db.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp))
        url = server.start()
        await asyncio.to_thread(upgrade, url)
        conn = await asyncpg.connect(url)
        # A simulated day starting at midnight UTC, so slots align with the day.
        start = datetime(2026, 11, 23, tzinfo=UTC)
        end = start + DAY
        user = await conn.fetchval(
            "INSERT INTO users (id) VALUES (uuid_generate_v7()) RETURNING id"
        )
        # Protected: preserved and expired; running a process and long inactive; expiring soon.
        protected = [
            await conn.fetchval(
                "INSERT INTO session_coordination (user_id, preserve, last_activity_at, expires_at,"
                " created_at, updated_at) VALUES ($1, true, $2, $2, $2, $2) RETURNING session_id",
                user,
                start - timedelta(days=2),
            ),
            await conn.fetchval(
                "INSERT INTO session_coordination (user_id, session_state, last_activity_at, expires_at,"
                ' created_at, updated_at) VALUES ($1, \'{"active_process": "plan"}\', $2, $2, $2, $2)'
                " RETURNING session_id",
                user,
                start - timedelta(days=2),
            ),
        ]
        # Unprotected: expires at noon of the simulated day.
        doomed = await conn.fetchval(
            "INSERT INTO session_coordination (user_id, last_activity_at, expires_at, created_at,"
            " updated_at) VALUES ($1, $2, $3, $2, $2) RETURNING session_id",
            user,
            start,
            start + timedelta(hours=12),
        )
        wall_start = time.time() + 1.0  # the day starts one real second from now, for all three
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    REPLICA,
                    url,
                    f"replica-{i}",
                    start.isoformat(),
                    str(wall_start),
                    str(SPEED),
                    end.isoformat(),
                ],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(REPLICAS)
        ]
        claims = [int((p.communicate(timeout=180)[0] or "0").strip() or 0) for p in procs]
        runs = await conn.fetch(
            "SELECT job_name, slot_start, count(*) AS n, min(status) AS status FROM job_runs"
            " WHERE trigger = 'schedule' GROUP BY 1, 2"
        )
        alive = {r[0] for r in await conn.fetch("SELECT session_id FROM session_coordination")}
        statuses = {
            str(r[0]): r[1]
            for r in await conn.fetch("SELECT session_id, status FROM session_coordination")
        }
        archived = {r[0] for r in await conn.fetch("SELECT session_id FROM session_archive")}
        await conn.close()
        server.stop()
    settings = SchedulerSettings()
    expected = {name: int(DAY / job.interval(settings)) for name, job in JOBS.items()}
    # The replicas' clocks start a moment before the day and can pass its end within one
    # loop (on a loaded machine one loop is many simulated minutes), so they may also run
    # slots just outside it: the day's own slots are what must each run once.
    per_job = {
        name: sum(1 for r in runs if r["job_name"] == name and start <= r["slot_start"] < end)
        for name in JOBS
    }
    return {
        "replicas": REPLICAS,
        "claims_per_replica": claims,
        "slots_run_per_job": per_job,
        "slots_in_the_day": expected,
        "slots_run": len(runs),
        "slots_run_more_than_once": sum(1 for r in runs if r["n"] > 1),
        "failed_runs": sum(1 for r in runs if r["status"] != "succeeded"),
        "protected_still_live": all(s in alive for s in protected),
        "protected_statuses": [statuses.get(str(s)) for s in protected],
        "unprotected_archived": doomed in archived,
    }


def main() -> None:
    result = asyncio.run(drill())
    print(json.dumps(result, indent=2, default=str))
    ok = (
        result["slots_run_more_than_once"] == 0
        and result["failed_runs"] == 0
        and all(
            abs(result["slots_run_per_job"][name] - expected) <= 1
            for name, expected in result["slots_in_the_day"].items()
        )
        and result["protected_still_live"]
        and result["unprotected_archived"]
        and sum(result["claims_per_replica"]) == result["slots_run"]
    )
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
