"""What the next-step decision's counters cost per message: ``python -m bench.next_step_counters``.

Every coordinated turn (and every late task answer) reads its counters with one query,
``next_step_counters`` (sql/queries/coordination.sql), over the session's decisions and
versions since its last resolution. This times that query alone, against a real
PostgreSQL, for sessions of 10 to 5,000 turns (a decision and a version each; a third of
the turns fallbacks, every seventh version a handoff). docs/benchmarks.md records the
figures ("Next step: the counters' cost").

Uses SWITCHBOARD_BENCH_DATABASE_URL, else SWITCHBOARD_TEST_DATABASE_URL, else the
embedded PostgreSQL; it creates and drops a database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from app.db.queries import QUERIES  # noqa: E402
from tests import dbutil  # noqa: E402

VERSIONS = """
INSERT INTO session_state_versions (session_id, version, session_state, agent_sequence,
    coordination_metadata, progress_percentage, status, priority, changed_by, change_reason,
    created_at)
SELECT $1, g, '{}', '[]', '{}', 0, 'active', 'normal', 'bench',
       CASE WHEN g % 7 = 0 THEN 'handoff to Make_Plan_Agent: bench' ELSE 'message' END,
       now() - make_interval(secs => $2 - g)
FROM generate_series(1, $2) g
"""
DECISIONS = """
INSERT INTO coordination_decisions (session_id, session_version, message, classifier, intents,
    primary_intent, chosen_agent, outcome, degraded, error, response, execution_time_ms,
    created_by, created_at)
SELECT $1, g, 'bench', 'rules', '[]', 'request_plan', 'Make_Plan_Agent',
       CASE WHEN g % 3 = 0 THEN 'fallback' ELSE 'agent' END, g % 3 = 0,
       CASE WHEN g % 3 = 0 THEN 'agent answered HTTP 500' END,
       '{"text": "t", "output_data": null, "next_agent_suggestions": []}', 1, 'bench',
       now() - make_interval(secs => $2 - g)
FROM generate_series(1, $2) g
"""


async def measure(url: str, sizes: list[int], rounds: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        user = await conn.fetchval("INSERT INTO users DEFAULT VALUES RETURNING id")
        for size in sizes:
            sid = await conn.fetchval(
                "INSERT INTO session_coordination (user_id) VALUES ($1) RETURNING session_id",
                user,
            )
            await conn.execute(VERSIONS, sid, size)
            await conn.execute(DECISIONS, sid, size)
            await conn.execute("ANALYZE")
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                await conn.fetchrow(
                    QUERIES.coordination.next_step_counters,
                    sid,
                    "request_plan",
                    "Make_Plan_Agent",
                    datetime.now(UTC),
                )
                times.append((time.perf_counter() - started) * 1000)
            times.sort()
            p95 = times[int(len(times) * 0.95) - 1]
            print(f"{size:6d} turns: p50 {statistics.median(times):.2f} ms, p95 {p95:.2f} ms")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=200, help="queries per session size")
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
        asyncio.run(measure(url, [10, 100, 1000, 5000], args.rounds))
    finally:
        asyncio.run(dbutil.drop_database(server, name))


if __name__ == "__main__":
    main()
