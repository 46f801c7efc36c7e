"""Drill: SIGKILL a process in the middle of an expiry sweep, then let another finish it.

Expectations: after the kill, archived + still live = original, with no session in both;
the run record stays 'running' and is taken over once its lease has passed; the next run
completes the sweep. Uses its own embedded PostgreSQL; bounded to about a minute.
    .venv/bin/python -m drills.kill_during_sweep
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402

SESSIONS = 60_000
BATCH = 500

SWEEP = """
import asyncio, sys
from app.clock import SystemClock
from app.db.pool import Database
from app.services import build_services
from app.settings import DatabaseSettings, SchedulerSettings, Settings

async def main():
    db = Database(sys.argv[1], DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await db.open()
    settings = SchedulerSettings(batch_size=int(sys.argv[2]), lease=__import__("datetime").timedelta(seconds=2))
    services = build_services(Settings(scheduler=settings), db, SystemClock(), replica=sys.argv[3])
    run = await services.jobs.run_scheduled("expiry_cleanup")
    print(run.claimed, run.run.status if run.run else None, run.run.rows_affected if run.run else None, flush=True)
    await services.aclose()
    await db.close()

asyncio.run(main())
"""


async def counts(conn: asyncpg.Connection) -> dict[str, int]:
    live = await conn.fetchval("SELECT count(*) FROM session_coordination")
    archived = await conn.fetchval("SELECT count(*) FROM session_archive")
    both = await conn.fetchval(
        "SELECT count(*) FROM session_archive a JOIN session_coordination s USING (session_id)"
    )
    events = await conn.fetchval("SELECT count(*) FROM outbox_events")
    return {"live": live, "archived": archived, "in_both": both, "events": events}


async def drill() -> dict[str, Any]:
    from app.db.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp))
        url = server.start()
        await asyncio.to_thread(upgrade, url)
        conn = await asyncpg.connect(url)
        await conn.execute(
            "INSERT INTO users (id) SELECT uuid_generate_v7() FROM generate_series(1, 100)"
        )
        await conn.execute(
            """INSERT INTO session_coordination (user_id, expires_at)
               SELECT (SELECT id FROM users ORDER BY id LIMIT 1 OFFSET g % 100), now() - interval '1 hour'
               FROM generate_series(1, $1) g""",
            SESSIONS,
        )
        env = {**os.environ}
        first = subprocess.Popen(
            [sys.executable, "-c", SWEEP, url, str(BATCH), "victim"], cwd=ROOT, env=env
        )
        # Kill it once some batches have committed, mid-sweep.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if await conn.fetchval("SELECT count(*) FROM session_archive") >= SESSIONS // 4:
                break
            await asyncio.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
        after_kill = await counts(conn)
        run_after_kill = dict(
            await conn.fetchrow("SELECT status, claimed_by, rows_affected FROM job_runs")
        )
        await asyncio.sleep(2.5)  # let the dead claim's lease (2 s) run out
        second = subprocess.run(
            [sys.executable, "-c", SWEEP, url, str(BATCH), "survivor"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        final = await counts(conn)
        run_final = dict(
            await conn.fetchrow("SELECT status, claimed_by, attempts, rows_affected FROM job_runs")
        )
        await conn.close()
        server.stop()
    return {
        "sessions": SESSIONS,
        "batch_size": BATCH,
        "after_kill": after_kill,
        "run_after_kill": run_after_kill,
        "second_run_output": second.stdout.strip(),
        "final": final,
        "run_final": run_final,
    }


def main() -> None:
    result = asyncio.run(drill())
    print(json.dumps(result, indent=2, default=str))
    kill, final = result["after_kill"], result["final"]
    ok = (
        kill["live"] + kill["archived"] == SESSIONS
        and kill["in_both"] == 0
        and kill["events"] == kill["archived"]
        and 0 < kill["archived"] < SESSIONS
        and final == {"live": 0, "archived": SESSIONS, "in_both": 0, "events": SESSIONS}
        and result["run_final"]["status"] == "succeeded"
        and result["run_final"]["claimed_by"] == "survivor"
    )
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
