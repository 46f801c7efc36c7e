"""Event streams under load: ``--streams`` concurrent SSE streams held by one server process
(one worker, pinned to CPU 0, as ``switchboard serve`` runs) while session writes go on:
``python -m bench.event_streams`` (also the ``streams`` part of ``bench/run.py``).

The streams are session streams (``GET /v1/sessions/{id}/events``), ``--per-session`` on
each session, opened over raw sockets by this process (pinned to CPU 1). A writer PATCHes
random sessions at ``--rate`` writes per second for ``--seconds``; every write is a
``session.version`` event delivered to the streams of its session. Reported:

- memory per stream: the server's RSS with every stream open (after the writes) minus
  its RSS before any stream (after one stream opened and closed, so the hub's LISTEN
  connection and pool are counted in neither), divided by the number of streams;
- delivery latency, from the writing transaction's timestamp (the event's
  ``created_at``, taken just before its commit) to the moment the client read the event,
  p50/p99/max over every delivery;
- deliveries expected and received (every write's event on each of its session's
  streams: a loss or a duplicate shows here).

Uses BENCH_DATABASE_URL (an empty database) or a database of its own on
SWITCHBOARD_BENCH_DATABASE_URL / SWITCHBOARD_TEST_DATABASE_URL's server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from bench.serve import spawn, stop  # noqa: E402
from tests import dbutil  # noqa: E402

ADMIN = "bench-admin-key-0123456789abcdef"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class StreamClient:
    """One SSE stream over a raw socket; records each event's delivery latency."""

    def __init__(
        self, port: int, session_id: str, latencies: list[float], key: str = ADMIN
    ) -> None:
        self._port = port
        self._key = key
        self._path = f"/v1/sessions/{session_id}/events"
        self._latencies = latencies
        self.received: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self._port)
        self._writer = writer
        writer.write(
            f"GET {self._path} HTTP/1.1\r\nHost: bench\r\n"
            f"Authorization: Bearer {self._key}\r\nAccept: text/event-stream\r\n\r\n".encode()
        )
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            raise RuntimeError(f"stream refused: {status!r}")
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        self._task = asyncio.create_task(self._read(reader))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        # The body is chunked (no Content-Length): only the data lines matter here.
        while True:
            line = await reader.readline()
            if not line:
                return
            if line.startswith(b"data: "):
                now = time.time()
                event = orjson.loads(line[6:])
                created = datetime.fromisoformat(event["created_at"]).timestamp()
                self._latencies.append(now - created)
                self.received.append(event["position"])

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


async def run_streams(
    port: int, pid: int, streams: int, per_session: int, seconds: float, rate: float
) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    server = psutil.Process(pid)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30
    ) as http:
        sessions: list[str] = []
        for _ in range(max(1, streams // per_session)):
            user = (await http.post("/v1/users", json={})).json()["id"]
            created = await http.post("/v1/sessions", json={"user_id": user})
            sessions.append(created.json()["session_id"])
        versions = dict.fromkeys(sessions, 1)
        # Start the hub (its LISTEN connection) and warm the route before the baseline.
        warm = StreamClient(port, sessions[0], [])
        await warm.open()
        await warm.close()
        await asyncio.sleep(1)
        rss_before = server.memory_info().rss
        latencies: list[float] = []
        clients = [
            StreamClient(port, sessions[i % len(sessions)], latencies) for i in range(streams)
        ]
        opened_at = time.monotonic()
        for start in range(0, streams, 100):
            await asyncio.gather(*(c.open() for c in clients[start : start + 100]))
        open_seconds = time.monotonic() - opened_at
        await asyncio.sleep(1)
        rss_open_idle = server.memory_info().rss
        writes: dict[str, int] = dict.fromkeys(sessions, 0)
        interval = 1 / rate
        deadline = time.monotonic() + seconds
        next_at = time.monotonic()
        write_latencies: list[float] = []
        while time.monotonic() < deadline:
            sid = random.choice(sessions)
            sent = time.monotonic()
            response = await http.patch(
                f"/v1/sessions/{sid}",
                json={"progress_percentage": versions[sid] % 100},
                headers={"If-Match": f'"{versions[sid]}"'},
            )
            write_latencies.append(time.monotonic() - sent)
            if response.status_code == 200:
                versions[sid] += 1
                writes[sid] += 1
            next_at += interval
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        expected = sum(writes[sessions[i % len(sessions)]] for i in range(streams))
        settle = time.monotonic() + 10
        while time.monotonic() < settle:  # polls the clients' counts
            if sum(len(c.received) for c in clients) >= expected:
                break
            await asyncio.sleep(0.1)
        rss_after = server.memory_info().rss
        received = sum(len(c.received) for c in clients)
        duplicates = sum(len(c.received) - len(set(c.received)) for c in clients)
        for client in clients:
            await client.close()
    ms = [latency * 1000 for latency in latencies]
    return {
        "streams": streams,
        "sessions": len(sessions),
        "writes": sum(writes.values()),
        "write_rate_per_s": rate,
        "seconds": seconds,
        "open_seconds": round(open_seconds, 2),
        "server_rss_before_mib": round(rss_before / 2**20, 1),
        "server_rss_streams_idle_mib": round(rss_open_idle / 2**20, 1),
        "server_rss_after_writes_mib": round(rss_after / 2**20, 1),
        "kib_per_stream_idle": round((rss_open_idle - rss_before) / 1024 / streams, 1),
        "kib_per_stream_after_writes": round((rss_after - rss_before) / 1024 / streams, 1),
        "deliveries_expected": expected,
        "deliveries_received": received,
        "duplicates": duplicates,
        "latency_ms": {
            "p50": round(percentile(ms, 0.5), 2) if ms else None,
            "p99": round(percentile(ms, 0.99), 2) if ms else None,
            "max": round(max(ms), 2) if ms else None,
        },
        "write_p50_ms": round(percentile(write_latencies, 0.5) * 1000, 2),
    }


def measure(url: str, streams: int = 1000, seconds: float = 20, rate: float = 50) -> dict[str, Any]:
    """Serve ``url`` in a process of its own (CPU 0) and measure; this process is on CPU 1."""
    cpus = os.sched_getaffinity(0)
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {1})
    server, port = spawn(
        "switchboard",
        {
            "SWITCHBOARD_DATABASE_URL": url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN,
            "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
            "SWITCHBOARD_STREAM_MAX_PER_KEY": str(streams + 10),
            "SWITCHBOARD_MAX_CONNECTIONS": str(streams + 200),
        },
        cpu=0,
    )
    try:
        return asyncio.run(run_streams(port, server.pid, streams, 10, seconds, rate))
    finally:
        stop(server)
        server.wait(timeout=30)
        os.sched_setaffinity(0, cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=50, help="session writes per second")
    args = parser.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        upgrade(url)
        print(json.dumps(measure(url, args.streams, args.seconds, args.rate), indent=2))
        return
    server = os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL") or dbutil.server_url()
    name = dbutil.unique_name("sbbench_streams")
    asyncio.run(dbutil.create_database(server, name))
    try:
        database = dbutil.with_database(server, name)
        upgrade(database)
        print(json.dumps(measure(database, args.streams, args.seconds, args.rate), indent=2))
    finally:
        asyncio.run(dbutil.drop_database(server, name))


if __name__ == "__main__":
    main()
