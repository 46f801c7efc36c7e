"""Task queue throughput, Switchboard's durable tasks against pgqueuer, in one run on the
same machine and the same PostgreSQL: ``python -m bench.task_queue`` (pgqueuer comes with
the ``bench`` extra: ``pip install -e '.[bench]'``; it is no runtime dependency).

Each system gets the same work: ``--tasks`` no-op tasks, submitted one per call by
``--submitters`` concurrent producers, run by ``--workers`` workers (each with its own
connections, as separate replicas would have), each task's completion recorded in
PostgreSQL. Two shapes:

- flow: producers submit while the workers run (submit -> claim -> complete);
- drain: the queue is filled first, then the workers are started (claim -> complete).

A figure is tasks per second from the first submit (flow) or the workers' start (drain)
until every task's completion is in the database: for Switchboard, until every task's
``on_finished`` ran (it runs after the completion committed); for pgqueuer, until every
entrypoint ran and then its queue table is empty (it deletes a finished job through a
buffer). Nothing polls the database during the run. Switchboard's tasks run through
``TaskService`` (a no-op handler, worker concurrency ``--concurrency``); pgqueuer's through
its ``QueueManager`` with its own benchmark's defaults (``batch_size`` 10, its async
entrypoint, completion logged through its buffers). Best of ``--rounds`` rounds; the
systems alternate within a round. Own embedded PostgreSQL unless BENCH_DATABASE_URL names
an empty database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.clock import SystemClock  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.pool import Database  # noqa: E402
from app.services import Services, build_services  # noqa: E402
from app.settings import DatabaseSettings, Settings, TaskSettings  # noqa: E402
from app.tasks.schemas import NewTask, Task  # noqa: E402
from app.tasks.worker import TaskWorker  # noqa: E402


async def until_zero(url: str, query: str, started: float) -> float:
    """Seconds from ``started`` until ``query`` counts 0 (polled every 10 ms)."""
    conn = await asyncpg.connect(url)
    try:
        while await conn.fetchval(query):  # noqa: ASYNC110 - the database is what is watched
            await asyncio.sleep(0.01)
        return time.perf_counter() - started
    finally:
        await conn.close()


async def produce(submit: Callable[[int], Awaitable[None]], tasks: int, producers: int) -> None:
    """Submit ``tasks`` one call each from ``producers`` concurrent producers."""
    numbers = iter(range(tasks))

    async def producer() -> None:
        for n in numbers:
            await submit(n)

    await asyncio.gather(*(producer() for _ in range(producers)))


# -- Switchboard ----------------------------------------------------------------------------


async def noop(task: Task) -> dict[str, Any]:
    """The handler measured around: nothing."""
    return {}


class Finished:
    """Counts tasks whose completion is stored; set once ``target`` are."""

    def __init__(self, target: int) -> None:
        self.count = 0
        self.target = target
        self.all = asyncio.Event()

    def one(self) -> None:
        self.count += 1
        if self.count >= self.target:
            self.all.set()


async def replica(url: str, name: str, concurrency: int, pool: int) -> tuple[Services, Database]:
    settings = Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=pool),
        tasks=TaskSettings(worker_concurrency=concurrency, agent_concurrency_default=10_000),
    )
    database = Database(url, settings.database)
    await database.open()
    services = build_services(settings, database, SystemClock(), replica=name)
    return services, database


async def switchboard(url: str, args: argparse.Namespace, shape: str) -> float:
    submitter, submit_db = await replica(url, "bench-submitter", 1, args.submitters)
    replicas = [
        await replica(url, f"bench-worker-{i}", args.concurrency, 4) for i in range(args.workers)
    ]
    workers = [TaskWorker(database, services.tasks) for services, database in replicas]
    finished = Finished(args.tasks)

    async def stored(task: Task) -> None:
        # on_finished runs after the completion was committed.
        finished.one()

    for services, _ in replicas:
        services.tasks.register("agent_call", noop, stored)

    async def submit(n: int) -> None:
        await submitter.tasks.submit(
            NewTask(agent_name="Noop_Agent", kind="agent_call", input={"n": n}), "bench"
        )

    try:
        for services, _ in replicas:
            await services.tasks.start()
        if shape == "drain":
            await produce(submit, args.tasks, args.submitters)
            started = time.perf_counter()
            for worker in workers:
                await worker.start()
        else:
            for worker in workers:
                await worker.start()
            started = time.perf_counter()
            await produce(submit, args.tasks, args.submitters)
        await asyncio.wait_for(finished.all.wait(), timeout=600)
        seconds = time.perf_counter() - started
    finally:
        for worker in workers:
            await worker.stop()
        for services, database in [*replicas, (submitter, submit_db)]:
            await services.tasks.stop()
            await services.aclose()
            await database.close()
        conn = await asyncpg.connect(url)
        await conn.execute("TRUNCATE agent_tasks CASCADE")
        await conn.close()
    return args.tasks / seconds


# -- pgqueuer -------------------------------------------------------------------------------


async def pgqueuer(url: str, args: argparse.Namespace, shape: str) -> float:
    from pgqueuer import AsyncpgDriver, Job, Queries, QueueManager

    producers = [Queries(AsyncpgDriver(await asyncpg.connect(url))) for _ in range(args.submitters)]
    managers = [
        QueueManager(Queries(AsyncpgDriver(await asyncpg.connect(url))))
        for _ in range(args.workers)
    ]
    ran = Finished(args.tasks)
    for manager in managers:

        @manager.entrypoint("noop")
        async def run(job: Job) -> None:
            """Nothing, as pgqueuer's own benchmark's async entrypoint (and a count)."""
            ran.one()

    turn = iter(range(10**9))

    async def submit(n: int) -> None:
        await producers[next(turn) % len(producers)].enqueue("noop", str(n).encode())

    # A job is done once its queue row is gone: pgqueuer deletes it (and logs it) through
    # its buffer after the entrypoint returned. Polled only once every entrypoint ran.
    pending = "SELECT count(*) FROM pgqueuer"
    runs: list[asyncio.Task[None]] = []

    def check(runs: list[asyncio.Task[None]]) -> None:
        for done in runs:
            if done.done() and done.exception() is not None:
                raise RuntimeError("a pgqueuer worker stopped") from done.exception()

    try:
        if shape == "drain":
            await produce(submit, args.tasks, args.submitters)
            started = time.perf_counter()
            runs = [asyncio.create_task(m.run(batch_size=args.pgqueuer_batch)) for m in managers]
        else:
            runs = [asyncio.create_task(m.run(batch_size=args.pgqueuer_batch)) for m in managers]
            await asyncio.sleep(0.5)  # let them listen
            check(runs)
            started = time.perf_counter()
            await produce(submit, args.tasks, args.submitters)
        await asyncio.wait_for(ran.all.wait(), timeout=600)
        seconds = await until_zero(url, pending, started)
    finally:
        for manager in managers:
            manager.shutdown.set()
        await asyncio.gather(*runs, return_exceptions=True)
        conn = await asyncpg.connect(url)
        await conn.execute("TRUNCATE pgqueuer, pgqueuer_log, pgqueuer_statistics")
        await conn.close()
    return args.tasks / seconds


async def install_pgqueuer(url: str) -> None:
    from pgqueuer import AsyncpgDriver, Queries

    conn = await asyncpg.connect(url)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def bench(url: str, args: argparse.Namespace) -> dict[str, Any]:
    await asyncio.to_thread(upgrade, url)
    await install_pgqueuer(url)
    results: dict[str, Any] = {}
    for shape in args.shapes:
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(args.rounds):
            ours.append(await switchboard(url, args, shape))
            theirs.append(await pgqueuer(url, args, shape))
        results[shape] = {
            "switchboard_tasks_per_s": round(max(ours)),
            "pgqueuer_jobs_per_s": round(max(theirs)),
            "ratio": round(max(ours) / max(theirs), 2),
            "rounds": {
                "switchboard": [round(v) for v in ours],
                "pgqueuer": [round(v) for v in theirs],
            },
        }
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--submitters", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    # pgqueuer's worker takes batches of 10 with no cap on the jobs it runs at once
    # (max_concurrent_tasks unset); 50 attempts per Switchboard worker is the nearer match.
    parser.add_argument("--concurrency", type=int, default=50, help="Switchboard's per worker")
    parser.add_argument("--pgqueuer-batch", type=int, default=10, help="pgqueuer's batch_size")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", choices=("flow", "drain"), default=["flow", "drain"])
    args = parser.parse_args()
    from importlib.metadata import version

    settings = {
        "tasks": args.tasks,
        "submitters": args.submitters,
        "workers": args.workers,
        "switchboard_worker_concurrency": args.concurrency,
        "pgqueuer_batch_size": args.pgqueuer_batch,
        "pgqueuer_version": version("pgqueuer"),
        "rounds": args.rounds,
    }
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        results = asyncio.run(bench(url, args))
    else:
        from app.db.embedded import EmbeddedPostgres

        with tempfile.TemporaryDirectory() as tmp:
            server = EmbeddedPostgres(Path(tmp))
            try:
                results = asyncio.run(bench(server.start(), args))
            finally:
                server.stop()
    print(json.dumps({"settings": settings, "results": results}, indent=2))


if __name__ == "__main__":
    main()
