"""Drill: 10,000 durable tasks, three worker processes, agents that fail 20% of the time,
and a worker SIGKILLed every few seconds (and restarted).

Expectations: every task ends completed or dead-lettered, exactly once (one terminal
transition per task, one dead letter per failed task, none lost), and no task ever runs
twice at the same time (the agents record every execution in flight by task and count
overlaps). Own embedded PostgreSQL (or DRILL_DATABASE_URL: an empty database); agents on
127.0.0.1; a few minutes at most.
    .venv/bin/python -m drills.task_queue [--tasks N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.clock import SystemClock  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.pool import Database  # noqa: E402
from app.services import build_services  # noqa: E402
from app.settings import DatabaseSettings, Settings  # noqa: E402
from app.tasks.schemas import NewTask  # noqa: E402
from tests.agent_server import AgentServer  # noqa: E402

WORKERS = 3
FAILURE_RATE = 0.2
KILL_EVERY = 3.0  # seconds
AGENTS = ("Drill_Agent_A", "Drill_Agent_B")
RANDOM = random.Random()  # noqa: S311 - failures and victims, not secrets
# The workers' settings (small retry base and lease, so the drill ends in minutes; the
# production defaults are 1 s and 30 s).
WORKER_ENV = {
    "SWITCHBOARD_TASKS_LEASE_SECONDS": "2",
    "SWITCHBOARD_TASKS_POLL_INTERVAL": "0.2",
    "SWITCHBOARD_TASKS_RETRY_BASE_SECONDS": "0.05",
    "SWITCHBOARD_TASKS_RETRY_CAP_SECONDS": "1",
    "SWITCHBOARD_TASKS_WORKER_CONCURRENCY": "20",
    "SWITCHBOARD_TASKS_AGENT_CONCURRENCY_DEFAULT": "40",
    "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",
    "SWITCHBOARD_LOG_LEVEL": "ERROR",
}


class FlakyAgent:
    """An agent that fails a fifth of its calls (HTTP 500) and records, per task, how many
    of its executions are in flight: two at once is a task run twice concurrently."""

    def __init__(self) -> None:
        self.server = AgentServer()
        self.server.before_reply = self._work
        self.in_flight: Counter[int] = Counter()
        self.overlaps: list[int] = []
        self.calls: Counter[int] = Counter()
        self.successes: Counter[int] = Counter()

    async def _work(self) -> None:
        n = int(self.server.requests[-1]["n"])
        self.calls[n] += 1
        self.in_flight[n] += 1
        if self.in_flight[n] > 1:
            self.overlaps.append(n)
        try:
            await asyncio.sleep(RANDOM.uniform(0.001, 0.02))
        finally:
            self.in_flight[n] -= 1
        # Decided after the last await: the server reads it at once (one event loop).
        failing = RANDOM.random() < FAILURE_RATE
        self.server.behaviour = "fail" if failing else "ok"
        if not failing:
            self.successes[n] += 1
        # Requests are kept for the drill's counts only; bodies are not needed.
        self.server.bodies.clear()
        self.server.headers.clear()


def start_worker(url: str, name: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, **WORKER_ENV, "SWITCHBOARD_DATABASE_URL": url}
    return subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def submit_all(url: str, count: int) -> float:
    """Submit ``count`` tasks through TaskService, 50 at a time; seconds it took."""
    settings = Settings(database=DatabaseSettings(pool_min_size=1, pool_max_size=10))
    database = Database(url, settings.database)
    await database.open()
    services = build_services(settings, database, SystemClock(), replica="drill-submitter")
    started = time.monotonic()
    try:
        for first in range(0, count, 50):
            await asyncio.gather(
                *(
                    services.tasks.submit(
                        NewTask(
                            agent_name=AGENTS[n % len(AGENTS)],
                            kind="agent_call",
                            input={"n": n},
                            priority=1 + n % 10,
                            idempotency_key=f"drill-{n}",
                        ),
                        "drill",
                    )
                    for n in range(first, min(first + 50, count))
                )
            )
    finally:
        await services.aclose()
        await database.close()
    return time.monotonic() - started


async def drill(url: str, count: int) -> dict[str, Any]:
    await asyncio.to_thread(upgrade, url)
    agents = {name: FlakyAgent() for name in AGENTS}
    for agent in agents.values():
        await agent.server.start()
    conn = await asyncpg.connect(url)
    for name, agent in agents.items():
        await conn.execute(
            "INSERT INTO agents (name, url, timeout_ms, fail_max) VALUES ($1, $2, 5000, 1000)",
            name,
            agent.server.url,
        )
    workers = [start_worker(url, f"w{i}") for i in range(WORKERS)]
    kills = 0
    started = time.monotonic()
    stop_killing = asyncio.Event()

    async def killer() -> None:
        nonlocal kills
        while not stop_killing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop_killing.wait(), timeout=KILL_EVERY)
            if stop_killing.is_set():
                return
            victim = RANDOM.randrange(WORKERS)
            workers[victim].send_signal(signal.SIGKILL)
            await asyncio.to_thread(workers[victim].wait)
            kills += 1
            workers[victim] = start_worker(url, f"w{victim}")

    killing = asyncio.create_task(killer())
    submit_seconds = await submit_all(url, count)
    deadline = time.monotonic() + 600
    terminal = 0
    while time.monotonic() < deadline:
        terminal = await conn.fetchval(
            "SELECT count(*) FROM agent_tasks WHERE status IN ('completed', 'failed')"
        )
        if terminal == count:
            break
        await asyncio.sleep(0.5)
    elapsed = time.monotonic() - started
    stop_killing.set()
    await killing
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            await asyncio.to_thread(worker.wait, 15)
        except subprocess.TimeoutExpired:
            worker.kill()

    statuses = dict(await conn.fetch("SELECT status, count(*) FROM agent_tasks GROUP BY status"))
    terminal_transitions = await conn.fetch(
        """SELECT task_id, count(*) AS n FROM agent_task_transitions
           WHERE to_status IN ('completed', 'failed', 'canceled', 'rejected')
           GROUP BY task_id HAVING count(*) <> 1"""
    )
    without_terminal = await conn.fetchval(
        """SELECT count(*) FROM agent_tasks t WHERE NOT EXISTS (
               SELECT 1 FROM agent_task_transitions x
               WHERE x.task_id = t.task_id AND x.to_status IN ('completed', 'failed'))"""
    )
    failed_without_letter = await conn.fetchval(
        """SELECT count(*) FROM agent_tasks t WHERE t.status = 'failed'
           AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.task_id = t.task_id)"""
    )
    letters = await conn.fetchval("SELECT count(*) FROM dead_letters")
    reasons = dict(
        await conn.fetch(
            "SELECT failure_reason, count(*) FROM dead_letters GROUP BY failure_reason"
        )
    )
    lease_expired = await conn.fetchval(
        "SELECT count(*) FROM agent_task_transitions WHERE reason = 'lease expired'"
    )
    attempts = dict(
        await conn.fetch("SELECT attempt, count(*) FROM agent_tasks GROUP BY attempt ORDER BY 1")
    )
    await conn.close()
    for agent in agents.values():
        await agent.server.stop()
    calls = sum(sum(agent.calls.values()) for agent in agents.values())
    duplicate_successes = sum(
        max(0, n - 1) for agent in agents.values() for n in agent.successes.values()
    )
    return {
        "tasks": count,
        "workers": WORKERS,
        "kills": kills,
        "seconds": round(elapsed, 1),
        "submit_seconds": round(submit_seconds, 1),
        "statuses": statuses,
        "tasks_with_other_than_one_terminal_transition": len(terminal_transitions),
        "tasks_without_terminal_transition": without_terminal,
        "dead_letters": letters,
        "dead_letter_reasons": reasons,
        "failed_without_dead_letter": failed_without_letter,
        "leases_expired_and_requeued": lease_expired,
        "attempts_histogram": attempts,
        "agent_calls": calls,
        "concurrent_overlaps": sum(len(agent.overlaps) for agent in agents.values()),
        # A worker killed after the agent answered but before the answer was stored: the
        # task ran again (at-least-once towards agents), never at the same time.
        "tasks_answered_twice_by_agents": duplicate_successes,
    }


def passed(result: dict[str, Any]) -> bool:
    statuses = result["statuses"]
    return (
        set(statuses) <= {"completed", "failed"}
        and sum(statuses.values()) == result["tasks"]
        and result["tasks_with_other_than_one_terminal_transition"] == 0
        and result["tasks_without_terminal_transition"] == 0
        and result["failed_without_dead_letter"] == 0
        and result["dead_letters"] == statuses.get("failed", 0)
        and result["concurrent_overlaps"] == 0
        and result["kills"] > 0
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=10_000)
    args = parser.parse_args()
    url = os.environ.get("DRILL_DATABASE_URL")
    if url:
        result = asyncio.run(drill(url, args.tasks))
    else:
        from app.db.embedded import EmbeddedPostgres

        with tempfile.TemporaryDirectory() as tmp:
            server = EmbeddedPostgres(Path(tmp))
            try:
                result = asyncio.run(drill(server.start(), args.tasks))
            finally:
                server.stop()
    print(json.dumps(result, indent=2, default=str))
    ok = passed(result)
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
