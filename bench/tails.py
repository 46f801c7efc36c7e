"""Where the 64-connection tails come from (issue 22): a served target records, per request,
when it started and ended in the app, and beside that every event-loop stall (a 1 ms
ticker's overshoot), every garbage collection, every pool acquire's wait and every agent-key
lookup; the driver drives it with wrk as ``bench/run.py`` does and says which stalls the
slow requests overlapped.

    python -m bench.tails [--seconds 15] [--rounds 2] [--connections 64] [--floor]

The recorder is installed by ``bench/serve.py`` when ``SWITCHBOARD_BENCH_TAILS`` names a
file (written at the process's exit); it wraps asyncpg's ``Pool._acquire`` and the agent
repository's key lookup for the served process only, to observe them, and is never part of
a measured benchmark run. Printed, never recorded.
"""

from __future__ import annotations

import argparse
import array
import asyncio
import bisect
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

TAILS_ENV = "SWITCHBOARD_BENCH_TAILS"


class _Recorder:
    """What happened in the served process, on ``time.perf_counter`` seconds."""

    def __init__(self) -> None:
        self.requests = array.array("d")  # start, end, start, end, ...
        self.stalls: list[tuple[float, float]] = []  # (when the tick was due, overshoot s)
        self.gcs: list[
            tuple[float, float, int, int]
        ] = []  # (start, duration, generation, collected)
        self.acquires = array.array("d")  # start, wait, ...
        self.lookups: list[tuple[float, float]] = []  # agent-key lookups: (start, duration)
        self.connection_waits = array.array("d")  # Database.connection(): start, wait, ...
        self._gc_start = 0.0
        self._ticker: asyncio.Task[None] | None = None

    def on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gcs.append(
                (
                    self._gc_start,
                    time.perf_counter() - self._gc_start,
                    info["generation"],
                    info["collected"],
                )
            )

    async def tick(self) -> None:
        while True:
            due = time.perf_counter() + 0.001
            await asyncio.sleep(0.001)
            late = time.perf_counter() - due
            if late > 0.002:
                self.stalls.append((due, late))

    def start_ticker(self) -> None:
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self.tick())

    def dump(self, path: str) -> None:
        partial = Path(path + ".part")
        partial.write_text(
            json.dumps(
                {
                    "requests": list(self.requests),
                    "stalls": self.stalls,
                    "gcs": self.gcs,
                    "acquires": list(self.acquires),
                    "lookups": self.lookups,
                    "connection_waits": list(self.connection_waits),
                }
            )
        )
        partial.replace(path)


def install_tails(app: Any, path: str) -> Any:
    """``app`` wrapped to record its requests and the process's stalls into ``path``."""
    import asyncpg.pool

    recorder = _Recorder()
    gc.callbacks.append(recorder.on_gc)
    # Written when the driver asks (SIGUSR1), before it stops the server.
    signal.signal(signal.SIGUSR1, lambda *_: recorder.dump(path))

    original_acquire = asyncpg.pool.Pool._acquire

    async def timed_acquire(self: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original_acquire(self, *args)
        finally:
            recorder.acquires.extend((started, time.perf_counter() - started))

    asyncpg.pool.Pool._acquire = timed_acquire  # type: ignore[method-assign]
    try:
        from contextlib import asynccontextmanager

        from app.agents import repository
        from app.db import pool

        original_connection = pool.Database.connection

        @asynccontextmanager
        async def timed_connection(self: Any) -> Any:
            # The whole wait for a connection, wherever it happens (a gate before the pool).
            started = time.perf_counter()
            async with original_connection(self) as conn:
                recorder.connection_waits.extend((started, time.perf_counter() - started))
                yield conn

        pool.Database.connection = timed_connection  # type: ignore[method-assign,assignment]

        original_lookup = repository.find_active_agent_by_key_hash

        async def timed_lookup(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await original_lookup(*args, **kwargs)
            finally:
                recorder.lookups.append((started, time.perf_counter() - started))

        repository.find_active_agent_by_key_hash = timed_lookup  # type: ignore[assignment]
    except ImportError:
        pass

    async def recording(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        recorder.start_ticker()
        started = time.perf_counter()
        try:
            await app(scope, receive, send)
        finally:
            recorder.requests.extend((started, time.perf_counter()))

    return recording


# -- the driver -------------------------------------------------------------------------------


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _overlaps(starts: list[float], spans: list[tuple[float, float]], t0: float, t1: float) -> bool:
    """True if any (start, duration) span in ``spans`` (sorted by start) overlaps [t0, t1]."""
    i = bisect.bisect_right(starts, t1)
    for j in range(max(0, i - 200), i):
        s, d = spans[j]
        if s + d >= t0:
            return True
    return False


def analyse(record: dict[str, Any], label: str) -> dict[str, Any]:
    """The server-side latencies and what the slowest 1 % overlapped."""
    req = record["requests"]
    pairs = sorted((req[i], req[i + 1]) for i in range(0, len(req), 2))
    # Only the measured window: drop the warm-up (the first third of the process's requests
    # comes from it when warm-up and window follow each other: cut on time instead).
    lat = [e - s for s, e in pairs]
    p50, p99 = _pct(lat, 0.5), _pct(lat, 0.99)
    slow = [(s, e) for s, e in pairs if e - s >= p99]
    stalls = sorted((t, d) for t, d in record["stalls"])
    gcs = sorted((s, d) for s, d, _g, _c in record["gcs"])
    lookups = sorted(record["lookups"])
    acq = record["acquires"]
    waits = [acq[i + 1] for i in range(0, len(acq), 2)]
    cw = record.get("connection_waits", [])
    connection_waits = [cw[i + 1] for i in range(0, len(cw), 2)]
    big_stalls = [(t, d) for t, d in stalls if d >= 0.005]
    out: dict[str, Any] = {
        "label": label,
        "requests": len(lat),
        "server p50 ms": round(p50 * 1e3, 2),
        "server p99 ms": round(p99 * 1e3, 2),
        "server p99/p50": round(p99 / p50, 2) if p50 else None,
        "loop stalls >= 5 ms": len(big_stalls),
        "loop stall ms, total / longest": (
            round(sum(d for _, d in big_stalls) * 1e3, 1),
            round(max((d for _, d in stalls), default=0) * 1e3, 1),
        ),
        "gc by generation": {
            g: (
                sum(1 for *_x, gen, _c in record["gcs"] if gen == g),
                round(sum(d for _s, d, gen, _c in record["gcs"] if gen == g) * 1e3, 1),
                round(max((d for _s, d, gen, _c in record["gcs"] if gen == g), default=0) * 1e3, 1),
            )
            for g in (0, 1, 2)
        },
        "acquire wait p50 / p99 / max ms": (
            round(_pct(waits, 0.5) * 1e3, 2),
            round(_pct(waits, 0.99) * 1e3, 2),
            round(max(waits, default=0) * 1e3, 2),
        ),
        "Database.connection() wait p50 / p99 / max ms": (
            round(_pct(connection_waits, 0.5) * 1e3, 2),
            round(_pct(connection_waits, 0.99) * 1e3, 2),
            round(max(connection_waits, default=0) * 1e3, 2),
        ),
        "key lookups": len(lookups),
    }
    if slow:
        for name, spans in (("stall", big_stalls), ("gc", gcs), ("key lookup", lookups)):
            starts = [s for s, _ in spans]
            hit = sum(1 for s, e in slow if _overlaps(starts, spans, s, e))
            everyone = sum(1 for s, e in pairs if _overlaps(starts, spans, s, e))
            out[f"slowest 1 % overlapping a {name}"] = (
                f"{hit}/{len(slow)} (all requests: {everyone}/{len(pairs)})"
            )
        # When the slow requests ended, relative to the first request: clusters tell periodic
        # work from noise.
        t_first = pairs[0][0]
        ends = sorted(round(e - t_first, 2) for _, e in slow)
        clusters: list[list[float]] = []
        for t in ends:
            if clusters and t - clusters[-1][-1] < 0.05:
                clusters[-1].append(t)
            else:
                clusters.append([t])
        big = sorted(clusters, key=len, reverse=True)[:8]
        out["largest clusters of slow ends (s from start: count)"] = sorted(
            (c[0], len(c)) for c in big
        )
        out["key lookups at (s from start)"] = [round(s - t_first, 2) for s, _ in lookups][:20]
    return out


def main() -> None:
    from bench import run as bench_run
    from bench.serve import spawn, stop
    from tests import dbutil

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument(
        "--path", action="append", default=None, help="GET session (default), context, memories"
    )
    parser.add_argument("--floor", action="store_true", help="also the one-query floor")
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for the server")
    args = parser.parse_args()
    server = os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL") or dbutil.server_url()
    name = dbutil.unique_name("sbtails")
    asyncio.run(dbutil.create_database(server, name))
    url = dbutil.with_database(server, name)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp_dir:
            tmp = Path(tmp_dir)
            bench_run.upgrade(url)
            seed = asyncio.run(bench_run._seed(url))
            extra = dict(item.split("=", 1) for item in args.env)
            env = {
                "SWITCHBOARD_DATABASE_URL": url,
                "SWITCHBOARD_ADMIN_KEY": bench_run.ADMIN,
                "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
                **extra,
            }
            scripts = bench_run.http_scripts(seed)
            chosen = {
                "session": "GET /v1/sessions/{id}",
                "context": "GET /v1/sessions/{id}/context",
                "memories": "GET /v1/memories?session_id= (20 rows)",
            }
            results = []
            for rnd in range(args.rounds):
                targets: list[tuple[str, str, Path | None]] = []
                sb_record = tmp / f"sb-{rnd}.json"
                served = spawn("switchboard", {**env, TAILS_ENV: str(sb_record)}, cpu=0)
                sb, sb_port = served.process, served.port
                procs.append(sb)
                key = bench_run._prepare_client(sb_port)
                for p in args.path or ["session"]:
                    targets.append((p, chosen[p], scripts[chosen[p]].lua(tmp, f"{p}-{rnd}", key)))
                for _p, path_name, script in targets:
                    bench_run.settle(url)
                    bench_run.wrk(sb_port, "/", args.connections, args.warmup, script)
                    t_mark = time.perf_counter()
                    measured = bench_run.wrk(sb_port, "/", args.connections, args.seconds, script)
                    results.append((f"round {rnd} {path_name}", measured, t_mark))
                _dump(sb, sb_record)
                stop(sb)
                procs.remove(sb)
                record = json.loads(sb_record.read_text())
                _report(record, results[-len(targets) :], args)
                if args.floor:
                    fl_record = tmp / f"floor-{rnd}.json"
                    floor_served = spawn(
                        "ceiling",
                        {"CEILING_DATABASE_URL": url, TAILS_ENV: str(fl_record)},
                        cpu=0,
                    )
                    fl, fl_port = floor_served.process, floor_served.port
                    procs.append(fl)
                    floor = bench_run.lua(
                        f"floor-{rnd}",
                        bench_run.lua_list("ids", seed["sessions"])
                        + 'request = function() return wrk.format("GET", "/one-query/" .. ids[math.random(#ids)]) end\n',
                        tmp,
                        key,
                    )
                    bench_run.settle(url)
                    bench_run.wrk(fl_port, "/", args.connections, args.warmup, floor)
                    t_mark = time.perf_counter()
                    measured = bench_run.wrk(fl_port, "/", args.connections, args.seconds, floor)
                    _dump(fl, fl_record)
                    stop(fl)
                    procs.remove(fl)
                    _report(
                        json.loads(fl_record.read_text()),
                        [(f"round {rnd} floor one-query", measured, t_mark)],
                        args,
                    )
    finally:
        for proc in procs:
            stop(proc)
        asyncio.run(dbutil.drop_database(server, name))


def _dump(process: subprocess.Popen[bytes], record: Path) -> None:
    """Ask the served process for its record and wait until it is written."""
    process.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if record.exists():
            return
        time.sleep(0.1)
    raise RuntimeError(f"no record at {record}")


def _report(
    record: dict[str, Any], measured: list[tuple[str, dict[str, Any], float]], args: Any
) -> None:
    """Print wrk's figures and the analysis of the server's record, one window at a time
    (the requests that started in the window wrk measured)."""
    req = record["requests"]
    t0 = min(req[0::2], default=0.0)
    # perf_counter is CLOCK_MONOTONIC here: the driver's marks are the server's times.
    windows = [(t_mark, t_mark + args.seconds) for _, _, t_mark in measured]
    for (label, wrk_result, _), window in zip(measured, windows, strict=True):
        lo, hi = window
        acq = record["acquires"]
        cw = record["connection_waits"]
        cut = {
            "requests": [
                x for i in range(0, len(req), 2) if lo <= req[i] <= hi for x in (req[i], req[i + 1])
            ],
            "stalls": [s for s in record["stalls"] if lo <= s[0] <= hi],
            "gcs": [g for g in record["gcs"] if lo <= g[0] <= hi],
            "acquires": [
                x for i in range(0, len(acq), 2) if lo <= acq[i] <= hi for x in (acq[i], acq[i + 1])
            ],
            "lookups": [k for k in record["lookups"] if lo <= k[0] <= hi],
            "connection_waits": [
                x for i in range(0, len(cw), 2) if lo <= cw[i] <= hi for x in (cw[i], cw[i + 1])
            ],
        }
        print(
            f"== {label}: wrk {wrk_result.get('rps')} req/s, p50 {wrk_result.get('p50_ms')} ms, "
            f"p99 {wrk_result.get('p99_ms')} ms (window {lo - t0:.1f}-{hi - t0:.1f} s)"
        )
        for k, v in analyse(cut, label).items():
            print(f"   {k}: {v}")
    print(f"   (whole record: {len(req) // 2} requests)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
