"""Drill: unauthenticated header floods and slow headers against a server at its defaults.

``--connections`` clients (5) each open a connection and send one request head of 100,000
header lines (about 21 MB) as fast as they can; ``--slow`` clients (2) send a request head
one byte per second. Meanwhile a probe asks ``GET /health`` every 0.1 s and the server's
resident memory is sampled every 20 ms.

Expectations: every flood is answered 431 and closed long before its last line (the client's
writes fail); the slow heads are closed after the header timeout (10 s) with a 408; the
server's RSS during the floods stays within 20 MiB of before; every probe answers 200.

Runs against its own embedded PostgreSQL in a temporary folder (or ``--database-url``, a
migrated database); talks only to 127.0.0.1; about 15 s (the slow heads' 10 s).
    .venv/bin/python -m drills.header_flood [--connections N] [--slow N] [--lines N]
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from bench.serve import memory_kib, spawn  # noqa: E402

ADMIN = "drill-admin-key-0123456789abcdef"
HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
LINE = b"X-Flood-%06d: " + b"f" * 190 + b"\r\n"  # 212 bytes, as in the report
SLOW_BOUND_S = 30.0  # a slow client gives up waiting for the server after this long
MIB = 1024 * 1024


def flood_size(lines: int = 100_000) -> int:
    """The bytes of one flood's request head."""
    return len(HEAD) + lines * len(LINE % 0) + 2


def status_of(raw: bytes) -> int:
    """The status code of the first answer in ``raw`` (0 if there is none)."""
    parts = raw.split(b" ", 2)
    return int(parts[1]) if raw.startswith(b"HTTP/") and len(parts) > 1 else 0


@dataclass
class Flooded:
    """What one flooding client saw."""

    status: int  # of the answer read back (0: none)
    sent: int  # header bytes the client managed to write
    write_error: str | None  # why its writes stopped before the end (the server closed)
    writes_failed_after_s: float | None


def flood(port: int, lines: int = 100_000) -> Flooded:
    """Send one request head of ``lines`` header lines as fast as the socket takes them,
    without stopping for an answer, then read whatever came back."""
    started = time.monotonic()
    sent, write_error, failed_after = 0, None, None
    raw = b""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            sock.sendall(HEAD)
            for first in range(0, lines, 500):
                block = b"".join(LINE % n for n in range(first, min(first + 500, lines)))
                sock.sendall(block)
                sent += len(block)
            sock.sendall(b"\r\n")
        except OSError as error:  # the server closed: BrokenPipeError, ConnectionResetError
            write_error = type(error).__name__
            failed_after = round(time.monotonic() - started, 3)
        try:
            while chunk := sock.recv(65536):
                raw += chunk
        except OSError:
            pass  # a reset after the answer: what was read before it is kept
    return Flooded(status_of(raw), sent, write_error, failed_after)


@dataclass
class SlowHead:
    """What one client sending its head slowly saw."""

    status: int  # of the answer read back (0: none)
    sent: int  # bytes of the head written
    closed_by_server: bool  # false: the client gave up first
    closed_after_s: float


def slow_head(port: int, interval: float = 1.0, give_up_after: float = 30.0) -> SlowHead:
    """Send a request head one byte per ``interval`` until the server answers or closes."""
    head = HEAD + b"X-Slow: " + b"s" * 60 + b"\r\n\r\n"
    started = time.monotonic()
    raw, sent, closed = b"", 0, False
    with socket.create_connection(("127.0.0.1", port), timeout=give_up_after) as sock:
        try:
            while time.monotonic() - started < give_up_after:
                if sent < len(head):
                    sock.sendall(head[sent : sent + 1])
                    sent += 1
                if select.select([sock], [], [], interval)[0]:
                    while chunk := sock.recv(65536):
                        raw += chunk
                    closed = True
                    break
        except OSError:
            closed = True
    return SlowHead(status_of(raw), sent, closed, round(time.monotonic() - started, 1))


class Sampler(threading.Thread):
    """The server's VmRSS every 20 ms, and a /health probe every 0.1 s, until stopped."""

    def __init__(self, pid: int, port: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.port = pid, port
        self.stop = threading.Event()
        self.peak_rss_kib = 0
        self.probes: list[tuple[int, float]] = []

    def run(self) -> None:
        last_probe = 0.0
        with httpx.Client(base_url=f"http://127.0.0.1:{self.port}") as client:
            while not self.stop.wait(0.02):
                self.peak_rss_kib = max(self.peak_rss_kib, memory_kib(self.pid, "VmRSS"))
                if time.monotonic() - last_probe >= 0.1:
                    last_probe = time.monotonic()
                    try:
                        status = client.get("/health", timeout=5).status_code
                    except httpx.HTTPError:
                        status = 0
                    self.probes.append((status, time.monotonic() - last_probe))


def drill(url: str, connections: int, slow: int, lines: int) -> dict[str, Any]:
    """Flood a server on ``url``'s database and report what it cost and what still worked."""
    server, port = spawn(
        "switchboard", {"SWITCHBOARD_DATABASE_URL": url, "SWITCHBOARD_ADMIN_KEY": ADMIN}
    )
    try:
        for _ in range(20):  # warm the request path before the baseline
            httpx.get(f"http://127.0.0.1:{port}/health").raise_for_status()
        before = memory_kib(server.pid, "VmRSS")
        sampler = Sampler(server.pid, port)
        sampler.start()
        with ThreadPoolExecutor(connections + slow) as pool:
            slow_jobs = [pool.submit(slow_head, port) for _ in range(slow)]
            floods = list(pool.map(lambda _: flood(port, lines), range(connections)))
            slow_heads = [job.result() for job in slow_jobs]
        sampler.stop.set()
        sampler.join()
        after = memory_kib(server.pid, "VmRSS")
        peak = memory_kib(server.pid, "VmHWM")
    finally:
        server.terminate()
        server.wait(timeout=10)
    statuses: dict[str, int] = {}
    for status, _ in sampler.probes:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    return {
        "floods": connections,
        "flood_bytes_each": flood_size(lines),
        "flood_answers": sorted({f.status for f in floods}),
        "most_header_bytes_sent": max(f.sent for f in floods),
        "flood_writes_failed": sum(1 for f in floods if f.write_error),
        "slowest_refusal_s": max((f.writes_failed_after_s or 0.0) for f in floods),
        "slow_heads": [asdict(s) for s in slow_heads],
        "rss_before_mib": round(before / 1024, 1),
        "rss_peak_during_mib": round(sampler.peak_rss_kib / 1024, 1),
        "rss_after_mib": round(after / 1024, 1),
        "peak_rss_ever_mib": round(peak / 1024, 1),
        "health_probes": statuses,
        "slowest_health_probe_s": round(max((t for _, t in sampler.probes), default=0.0), 3),
    }


def passed(result: dict[str, Any]) -> bool:
    """The expectations of the module docstring."""
    return (
        result["flood_answers"] == [431]
        and result["flood_writes_failed"] == result["floods"]
        and result["most_header_bytes_sent"] < result["flood_bytes_each"]
        and all(s["status"] == 408 and s["closed_by_server"] for s in result["slow_heads"])
        and result["rss_peak_during_mib"] - result["rss_before_mib"] < 20
        and set(result["health_probes"]) == {"200"}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--connections", type=int, default=5)
    parser.add_argument("--slow", type=int, default=2)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--database-url", help="a migrated database (default: embedded)")
    args = parser.parse_args()
    if args.database_url:
        result = drill(args.database_url, args.connections, args.slow, args.lines)
    else:
        from app.db.embedded import EmbeddedPostgres

        with tempfile.TemporaryDirectory() as tmp:
            pg = EmbeddedPostgres(Path(tmp))
            url = pg.start()
            upgrade(url)
            result = drill(url, args.connections, args.slow, args.lines)
            pg.stop()
    print(json.dumps(result, indent=2))
    ok = passed(result)
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
