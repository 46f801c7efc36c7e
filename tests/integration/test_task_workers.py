"""Workers as separate replicas: a worker process killed with SIGKILL mid-task (the task
completes exactly once on another worker), and several workers racing for one queue (no
task ever runs twice, none at the same time)."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import UUID

import asyncpg

from app.clock import SystemClock
from app.db.pool import Database
from app.services import Services, build_services
from app.settings import DatabaseSettings, Settings, TaskSettings
from app.tasks.schemas import NewTask, Task
from app.tasks.worker import TaskWorker
from tests.agent_server import AgentServer
from tests.conftest import LOOPBACK_ALLOWED

SWITCHBOARD = Path(sys.executable).with_name("switchboard")
TASKS = TaskSettings(
    retry_base_seconds=0.05, poll_interval=0.05, lease_seconds=1.5, worker_concurrency=10
)


def worker_settings(database_url: str, tasks: TaskSettings = TASKS) -> Settings:
    return Settings(
        database=DatabaseSettings(url=database_url, pool_min_size=1, pool_max_size=6),
        outbound=LOOPBACK_ALLOWED,
        tasks=tasks,
    )


@asynccontextmanager
async def worker(
    database_url: str, name: str, *, work: bool = True, tasks: TaskSettings = TASKS
) -> AsyncIterator[Services]:
    """A replica in this process: its own pool, services and replica name; its worker
    claims tasks unless ``work`` is false (then ``start_worker`` starts it)."""
    settings = worker_settings(database_url, tasks)
    database = Database(database_url, settings.database)
    await database.open()
    services = build_services(settings, database, SystemClock(), replica=name)
    running = TaskWorker(database, services.tasks)
    await services.tasks.start()
    if work:
        await running.start()
    started[services.replica] = running
    try:
        yield services
    finally:
        started.pop(services.replica, None)
        await running.stop()
        await services.tasks.stop()
        await services.aclose()
        await database.close()


started: dict[str, TaskWorker] = {}


async def register(database_url: str, name: str, server: AgentServer) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "INSERT INTO agents (name, url, timeout_ms, fail_max) VALUES ($1, $2, 5000, 1000)",
            name,
            server.url,
        )
    finally:
        await conn.close()


async def until(predicate: object, seconds: float = 20) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def test_a_task_whose_worker_is_killed_completes_exactly_once_on_another(
    database_url: str, tmp_path: Path
) -> None:
    agent = await AgentServer(behaviour="hang").start()
    await register(database_url, "Slow_Agent", agent)
    process = await asyncio.create_subprocess_exec(
        str(SWITCHBOARD),
        "worker",
        env={
            **os.environ,
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_DATA_DIR": str(tmp_path / "data"),
            "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",
            "SWITCHBOARD_TASKS_LEASE_SECONDS": "1.5",
            "SWITCHBOARD_TASKS_POLL_INTERVAL": "0.05",
            "SWITCHBOARD_LOG_LEVEL": "WARNING",
        },
        cwd=tmp_path,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with worker(database_url, "submitter", work=False) as services:
            # Submitted by a replica whose worker does not run yet: the process claims it.
            task = await services.tasks.submit(
                NewTask(agent_name="Slow_Agent", kind="agent_call", input={"n": 1}), "test"
            )
            await until(lambda: len(agent.requests) == 1)
            first = await services.tasks.get(task.task_id)
            assert first.lease_owner is not None
            assert first.lease_owner.startswith(first.lease_owner.split("-")[0])
            assert first.lease_owner != "submitter"
            process.send_signal(signal.SIGKILL)
            await process.wait()
            agent.behaviour = "ok"
            await started["submitter"].start()
            done = await services.tasks.wait(task.task_id, 20)
        conn = await asyncpg.connect(database_url)
        try:
            steps = await conn.fetch(
                "SELECT to_status, attempt, actor, reason FROM agent_task_transitions"
                " WHERE task_id = $1 ORDER BY at",
                task.task_id,
            )
        finally:
            await conn.close()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await agent.stop()

    assert done.status == "completed"
    assert done.attempt == 2
    assert len(agent.requests) == 2
    completed = [s for s in steps if s["to_status"] == "completed"]
    assert len(completed) == 1
    assert completed[0]["actor"] == "submitter"
    assert [s["reason"] for s in steps] == [
        "submitted",
        "claimed",  # by the killed process
        "lease expired",  # the reaper gave it back as a new attempt
        "claimed",
        "completed",
    ]
    assert steps[1]["actor"] == first.lease_owner


async def test_concurrent_workers_never_run_one_task_twice(database_url: str) -> None:
    running: set[int] = set()
    overlaps: list[int] = []
    agent = AgentServer()

    async def work() -> None:
        n = int(agent.requests[-1]["n"])
        if n in running:
            overlaps.append(n)
        running.add(n)
        await asyncio.sleep(random.uniform(0, 0.01))
        running.discard(n)

    agent.before_reply = work
    await agent.start()
    await register(database_url, "Echo_Agent", agent)
    count = 300
    try:
        async with (
            worker(database_url, "w1") as one,
            worker(database_url, "w2") as two,
            worker(database_url, "w3") as three,
        ):
            replicas = [one, two, three]
            ids: list[UUID] = []
            for n in range(count):
                task = await replicas[n % 3].tasks.submit(
                    NewTask(
                        agent_name="Echo_Agent",
                        kind="agent_call",
                        input={"n": n},
                        priority=1 + n % 10,
                    ),
                    "test",
                )
                ids.append(task.task_id)
            results = [await one.tasks.wait(task_id, 60) for task_id in ids]
        conn = await asyncpg.connect(database_url)
        try:
            finishers = await conn.fetch(
                "SELECT actor, count(*) AS n FROM agent_task_transitions"
                " WHERE to_status = 'completed' GROUP BY actor"
            )
        finally:
            await conn.close()
    finally:
        await agent.stop()

    assert {task.status for task in results} == {"completed"}
    assert sorted(int(r["n"]) for r in agent.requests) == list(range(count))
    assert overlaps == []
    assert {task.attempt for task in results} == {1}
    assert sum(row["n"] for row in finishers) == count
    assert len(finishers) >= 2, finishers  # the replicas shared the queue


async def test_an_agent_at_its_limit_is_skipped_not_waited_for(database_url: str) -> None:
    slow = await AgentServer(behaviour="hang").start()
    fast = await AgentServer().start()
    await register(database_url, "Slow_Agent", slow)
    await register(database_url, "Fast_Agent", fast)
    limits = TASKS.model_copy(update={"agent_concurrency": {"Slow_Agent": 2}})
    try:
        async with (
            worker(database_url, "w1", tasks=limits) as one,
            worker(database_url, "w2", tasks=limits) as two,
        ):
            stuck = [
                await one.tasks.submit(
                    NewTask(agent_name="Slow_Agent", kind="agent_call", input={}, priority=10),
                    "test",
                )
                for _ in range(5)
            ]
            quick = [
                await two.tasks.submit(
                    NewTask(agent_name="Fast_Agent", kind="agent_call", input={}, priority=1),
                    "test",
                )
                for _ in range(5)
            ]
            done = [await one.tasks.wait(task.task_id, 20) for task in quick]
            await asyncio.sleep(0.3)  # several more claim rounds
            waiting = [await one.tasks.get(task.task_id) for task in stuck]
            running = one.tasks.running_count + two.tasks.running_count
            # Counted before the workers stop: a stopping worker gives its attempts back,
            # and the other one, still running, may claim them.
            slow_calls = len(slow.requests)
    finally:
        await slow.stop()
        await fast.stop()
    assert {task.status for task in done} == {"completed"}
    # The more urgent tasks of the agent at its limit did not hold the others up.
    assert slow_calls == 2
    assert sorted(task.lease_owner is not None for task in waiting) == [False] * 3 + [True] * 2
    assert running == 2


async def test_every_finished_task_runs_its_hook_while_leases_are_renewed(
    database_url: str,
) -> None:
    """An attempt whose result is being stored has released its lease: a renewal running
    meanwhile must not take that for a lost lease (and skip the task's on_finished)."""
    hooked: list[UUID] = []
    fast = TASKS.model_copy(update={"lease_seconds": 0.5, "worker_concurrency": 20})

    async def noop(task: Task) -> dict[str, object]:
        await asyncio.sleep(random.uniform(0, 0.2))
        return {}

    async def on_finished(task: Task) -> None:
        hooked.append(task.task_id)

    async with worker(database_url, "w1", tasks=fast) as one:
        one.tasks.register("classify", noop, on_finished)
        ids = [
            (
                await one.tasks.submit(NewTask(agent_name="A", kind="classify", input={}), "t")
            ).task_id
            for _ in range(300)
        ]
        done = [await one.tasks.wait(task_id, 30) for task_id in ids]
        await until(lambda: len(hooked) == len(ids))
    assert {task.status for task in done} == {"completed"}
    assert sorted(hooked) == sorted(ids)


async def test_a_task_claimed_again_here_stops_its_earlier_attempt(database_url: str) -> None:
    """A replica whose renewals failed until its lease ran out may claim the same task
    again (a new attempt) while the earlier attempt still runs here: the earlier one stops,
    so that the task never runs twice at once, and the renewals follow the new attempt."""
    slow = await AgentServer(behaviour="hang").start()
    await register(database_url, "Slow_Agent", slow)
    conn = await asyncpg.connect(database_url)
    try:
        async with worker(database_url, "w1") as one:
            task = await one.tasks.submit(
                NewTask(agent_name="Slow_Agent", kind="agent_call", input={}), "test"
            )
            await until(lambda: len(slow.requests) == 1)
            # What the reaper does once a lease ran out: the task is due again, unleased.
            await conn.execute(
                "UPDATE agent_tasks SET lease_owner = NULL, lease_expires_at = NULL,"
                " scheduled_at = now() WHERE task_id = $1",
                task.task_id,
            )
            await until(lambda: len(slow.requests) == 2)
            # The first attempt was stopped: one attempt of the task runs in this process.
            name = f"task-{task.task_id}"
            await until(lambda: sum(t.get_name() == name for t in asyncio.all_tasks()) == 1)
            assert one.tasks.running_count == 1
            await asyncio.sleep(TASKS.lease_seconds * 1.5)  # renewals ran meanwhile
            row = await conn.fetchrow(
                "SELECT attempt, lease_owner FROM agent_tasks WHERE task_id = $1", task.task_id
            )
            assert (row["attempt"], row["lease_owner"]) == (2, "w1")
            assert one.tasks.running_count == 1
            assert len(slow.requests) == 2
    finally:
        await conn.close()
        await slow.stop()
