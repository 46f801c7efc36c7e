"""``switchboard serve --workers 2`` as a user runs it: real processes on one port, the
test database, its logs and exit code."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.integration.helpers import create_session, eventually, listening_port
from tests.integration.test_event_streams import open_stream, patch
from tests.integration.test_metrics import requests_total

pytestmark = pytest.mark.slow

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Served:
    process: asyncio.subprocess.Process
    base: str
    log: Path

    def lines(self) -> list[dict[str, Any]]:
        """What the supervisor and its workers logged so far (JSON lines)."""
        text = self.log.read_text(errors="replace")
        return [json.loads(line) for line in text.splitlines() if line.startswith("{")]

    def workers(self) -> list[int]:
        """The pids of the worker processes now."""
        pid = self.process.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return sorted(int(child) for child in children)


async def until(check: Callable[[], bool], within: float = 20) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.1)


async def ready(base: str, process: asyncio.subprocess.Process) -> None:
    async with httpx.AsyncClient(timeout=2) as client:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert process.returncode is None, "switchboard serve ended"
            try:
                if (await client.get(f"{base}/ready")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            await asyncio.sleep(0.2)
    raise AssertionError("switchboard serve did not start")


@pytest.fixture
async def serve(database_url: str, tmp_path: Path) -> AsyncIterator[Any]:
    """Start ``switchboard serve --workers 2`` on a free port (stopped at the end)."""
    started: list[asyncio.subprocess.Process] = []

    async def start(**overrides: str) -> Served:
        log = tmp_path / f"serve-{len(started)}.log"
        env = {
            **os.environ,
            "SWITCHBOARD_DATABASE_URL": database_url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
            "SWITCHBOARD_DATA_DIR": str(tmp_path / "data"),
            "SWITCHBOARD_LOG_FORMAT": "json",
            "SWITCHBOARD_DATABASE_POOL_MAX_SIZE": "5",
            **overrides,
        }
        env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        with log.open("wb") as out:
            process = await asyncio.create_subprocess_exec(
                str(SWITCHBOARD),
                *("serve", "--workers", "2", "--port", "0"),
                env=env,
                cwd=tmp_path,
                stdout=out,
                stderr=asyncio.subprocess.STDOUT,
            )
        started.append(process)

        async def port_said() -> int | None:
            assert process.returncode is None, "switchboard serve ended"
            return listening_port(log)

        port = await eventually(port_said, within=60)
        served = Served(process, f"http://127.0.0.1:{port}", log)
        await ready(served.base, process)
        # Both workers listen (the first one may answer /ready alone).
        await until(lambda: len(listening(served)) == 2)
        return served

    yield start
    for process in started:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def listening(served: Served) -> set[int]:
    return {
        line["worker"]
        for line in served.lines()
        if line["message"].startswith("Switchboard listening on")
    }


async def test_requests_spread_over_the_workers_and_metrics_sum_them(serve: Any) -> None:
    served = await serve()
    assert listening(served) == {0, 1}
    requests = 60

    async def one() -> None:
        # A connection each: the kernel hands each to whichever worker accepts first.
        async with httpx.AsyncClient(base_url=served.base) as client:
            assert (await client.get("/health")).status_code == 200

    for _ in range(requests // 10):
        await asyncio.gather(*(one() for _ in range(10)))
    async with httpx.AsyncClient(base_url=served.base) as client:
        scrapes = [(await client.get("/metrics")).text for _ in range(4)]
    # Whichever worker answers the scrape, it counts every worker's requests.
    for text in scrapes:
        assert requests_total(text, "/health") == requests
        assert "process_resident_memory_bytes" not in text  # one worker's, summed: no sense
    await until(lambda: sum(access_by_worker(served).values()) == requests)
    by_worker = access_by_worker(served)
    assert set(by_worker) == {0, 1}, by_worker  # both took their share


def access_by_worker(served: Served) -> Counter[int]:
    return Counter(
        line["worker"]
        for line in served.lines()
        if line["logger"] == "switchboard.access" and line.get("route") == "/health"
    )


async def test_a_keys_rate_limit_is_the_hosts_not_each_workers(serve: Any) -> None:
    """Two workers, one key: the 429s start once the host has answered the key's burst,
    wherever its requests landed (a worker's own buckets let each worker answer a burst,
    up to twice as many)."""
    burst = 20
    served = await serve(
        SWITCHBOARD_RATE_LIMIT_PER_SECOND="0.001", SWITCHBOARD_RATE_LIMIT_BURST=str(burst)
    )
    statuses: list[int] = []

    async def one() -> None:
        # A connection each: the kernel hands each to whichever worker accepts first.
        async with httpx.AsyncClient(base_url=served.base, headers=ADMIN) as client:
            statuses.append((await client.get("/v1/agents")).status_code)

    for _ in range(6):
        await asyncio.gather(*(one() for _ in range(10)))

    assert Counter(statuses) == {200: burst, 429: 60 - burst}
    await until(lambda: len(answers_by_worker(served)) == 60)
    answered = answers_by_worker(served)
    # Both workers answered the key: with a bucket each, more than the burst would have
    # been answered (up to 2 x 20 of the 60).
    assert {worker for worker, _ in answered} == {0, 1}, answered


def answers_by_worker(served: Served) -> list[tuple[int, int]]:
    return [
        (line["worker"], line["status"])
        for line in served.lines()
        if line["logger"] == "switchboard.access" and line.get("path") == "/v1/agents"
    ]


async def test_the_scheduler_runs_in_one_worker_each_slot_once(
    serve: Any, database_url: str
) -> None:
    served = await serve(SWITCHBOARD_SCHEDULER_INACTIVITY_INTERVAL="PT1S")
    started = [line for line in served.lines() if line["message"].startswith("scheduler started")]
    assert [line["worker"] for line in started] == [0]
    await asyncio.sleep(4)
    conn = await asyncpg.connect(database_url)
    try:
        runs = await conn.fetch(
            "SELECT slot_start, claimed_by FROM job_runs"
            " WHERE job_name = 'inactivity_timeout' AND trigger = 'schedule' ORDER BY slot_start"
        )
    finally:
        await conn.close()
    assert len(runs) >= 3
    # Every slot was run by the one scheduler (worker 0's replica), one slot a second.
    assert len({run["claimed_by"] for run in runs}) == 1
    slots = [run["slot_start"].timestamp() for run in runs]
    assert all(b - a == 1 for a, b in itertools.pairwise(slots)), slots


async def test_a_killed_worker_is_replaced_and_worker_0_keeps_the_scheduler(
    serve: Any,
) -> None:
    served = await serve()
    before = served.workers()
    assert len(before) == 2
    slots = {
        line["worker"]: line["pid"]
        for line in served.lines()
        if line["message"].startswith("started worker")
    }
    assert sorted(slots.values()) == before
    os.kill(slots[0], signal.SIGKILL)  # the one running the scheduler
    await until(lambda: len(served.workers()) == 2 and served.workers() != before)
    after = served.workers()
    assert slots[1] in after
    assert slots[0] not in after
    await until(lambda: len(listening_lines(served)) == 3)  # the new one listens too
    ended = [line for line in served.lines() if "starting another" in line["message"]]
    assert len(ended) == 1
    assert "worker 0" in ended[0]["message"]
    assert "SIGKILL" in ended[0]["message"]
    # Its replacement runs the scheduler again: still one per host.
    schedulers = [
        line["worker"] for line in served.lines() if line["message"].startswith("scheduler started")
    ]
    assert schedulers == [0, 0]
    async with httpx.AsyncClient(base_url=served.base) as client:
        for _ in range(10):
            response = await client.get("/health", headers={"connection": "close"})
            assert response.status_code == 200


def listening_lines(served: Served) -> list[dict[str, Any]]:
    return [line for line in served.lines() if line["message"].startswith("Switchboard listening")]


async def test_sigterm_ends_open_streams_and_every_worker_exits_0(serve: Any) -> None:
    served = await serve(SWITCHBOARD_STREAM_KEEPALIVE_SECONDS="1")
    workers = served.workers()
    [metrics_dir] = [
        line["metrics_dir"] for line in served.lines() if line["message"].startswith("serving with")
    ]
    assert os.path.isdir(metrics_dir)  # noqa: ASYNC240
    async with httpx.AsyncClient(base_url=served.base, headers=ADMIN, timeout=10) as client:
        session = await create_session(client)
        response, stream = await open_stream(client, f"/v1/sessions/{session['session_id']}/events")
        try:
            await patch(client, session, 1)
            assert (await stream.next_event()).data["payload"]["version"] == 2
            began = time.monotonic()
            served.process.send_signal(signal.SIGTERM)
            with pytest.raises(EOFError):  # the stream ends cleanly: no error
                await stream.next_event(within=10)
        finally:
            await response.aclose()
    code = await asyncio.wait_for(served.process.wait(), 15)
    assert code == 0
    assert time.monotonic() - began < 10
    assert not any(os.path.exists(f"/proc/{pid}") for pid in workers)  # noqa: ASYNC240
    assert not os.path.exists(metrics_dir)  # noqa: ASYNC240  (private: removed at exit)
    assert any(line["message"] == "every worker stopped" for line in served.lines())


async def test_more_connections_than_postgresql_allows_is_refused_at_start(
    database_url: str, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
        "SWITCHBOARD_DATA_DIR": str(tmp_path / "data"),
        "SWITCHBOARD_LOG_LEVEL": "WARNING",
        "SWITCHBOARD_DATABASE_POOL_MAX_SIZE": "10000",
    }
    ran = await asyncio.to_thread(
        subprocess.run,
        [str(SWITCHBOARD), "serve", "--workers", "2", "--port", "0"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 1
    line = ran.stderr.strip().splitlines()[-1]
    assert line.startswith("switchboard: error: 2 workers may open 20012 connections"), ran.stderr
    assert "max_connections" in line


async def test_workers_must_be_a_number_or_auto(tmp_path: Path) -> None:
    ran = await asyncio.to_thread(
        subprocess.run,
        [str(SWITCHBOARD), "serve", "--workers", "many"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ran.returncode == 2
    assert "'many' is not a number of workers" in ran.stderr
