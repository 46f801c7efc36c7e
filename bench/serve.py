"""Serve one benchmark target the same way for every target, and as ``switchboard serve``
does (app/server.py: uvicorn, uvloop, httptools with the head limits; one process, or N
workers under app/supervisor.py as ``serve --workers N``), with no access log.
``python -m bench.serve ceiling|switchboard PORT [WORKERS]``; PORT ``fd:N`` serves on a
socket already bound and inherited as file descriptor N (``spawn``: the port stays taken
from the moment it is chosen, so two test processes are never handed the same one)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now; another process may be
    handed it before it is bound. Only for a program that can neither inherit a socket
    (``reserve_port``) nor say which port it took (``switchboard serve --port 0`` logs
    it): the n8n drill's n8n, which runs alone."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def reserve_port() -> socket.socket:
    """A TCP socket bound to a free port on 127.0.0.1, not yet listening, for a child
    process to inherit (``subprocess.Popen(pass_fds=...)``) and serve on: the port is
    never free between being chosen and being served on. Without SO_REUSEADDR, so that
    not even a socket with it (``app.server.bind``'s) can bind the port beside it."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
    except OSError:
        sock.close()
        raise
    return sock


def inherited(port_argument: str) -> socket.socket | None:
    """The socket a ``fd:N`` argument names (inherited from ``reserve_port``'s caller),
    or None for a port number."""
    if not port_argument.startswith("fd:"):
        return None
    sock = socket.socket(fileno=int(port_argument.removeprefix("fd:")))
    sock.set_inheritable(True)  # the workers of ``serve --workers`` share it
    return sock


class Spawned(NamedTuple):
    """A process ``spawn`` started and the port it serves on."""

    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        """Its base URL."""
        return f"http://127.0.0.1:{self.port}"


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of a process from /proc/<pid>/status, in KiB: ``VmRSS`` (resident
    now) or ``VmHWM`` (the peak resident set so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(f"no {field} in /proc/{pid}/status")


def spawn(target: str, env: dict[str, str], cpu: int | None = None, workers: int = 1) -> Spawned:
    """Start ``target`` in a process of its own (pinned to ``cpu`` if given; ``workers``
    processes behind the port) on a port reserved for it, and wait until it answers; used
    by the benchmarks, the drills and the tests."""
    with reserve_port() as sock:
        port: int = sock.getsockname()[1]
        fd = sock.fileno()
        command = [sys.executable, "-m", "bench.serve", target, f"fd:{fd}", str(workers)]
        if cpu is not None and shutil.which("taskset"):
            command = ["taskset", "-c", str(cpu), *command]
        process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env}, pass_fds=(fd,))
    # Our copy is closed; the child's holds the port until it ends.
    probe = f"http://127.0.0.1:{port}" + ("/constant" if target == "ceiling" else "/ready")
    # A deadline, not a wait: on a loaded host (CI, several suites at once) a start takes long.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(probe, timeout=1).status_code == 200:
                return Spawned(process, port)
        except httpx.HTTPError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.2)
    stop(process)
    raise RuntimeError(f"{target} did not start on port {port}")


def stop(process: subprocess.Popen[bytes], timeout: float = 10) -> None:
    """Stop a process ``spawn`` started: SIGTERM, then SIGKILL if it is still there after
    ``timeout`` seconds; reaped either way."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main() -> None:
    """Start the named target on 127.0.0.1:PORT."""
    target = sys.argv[1]
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    from app.auth.ratelimit import HostBuckets
    from app.logs import configure_logging
    from app.server import bind, run, uvicorn_config
    from app.settings import Settings
    from app.supervisor import Supervisor, multiprocess_metrics

    settings = Settings()
    settings.logging.level, settings.logging.access = "WARNING", False
    configure_logging(settings.logging)
    sock = inherited(sys.argv[2]) or bind("127.0.0.1", int(sys.argv[2]))
    port: int = sock.getsockname()[1]
    # As ``serve --workers N`` (app/cli.py): the workers share the keys' rate-limit buckets.
    rate_buckets = HostBuckets() if workers > 1 else None

    def serve(_: int = 0, listening: Callable[[], None] | None = None) -> bool:
        if target == "ceiling":
            from bench.ceiling import app
        else:
            from app.asgi import create_app

            app = create_app(
                settings,
                database_url=os.environ["SWITCHBOARD_DATABASE_URL"],
                admin_key=os.environ["SWITCHBOARD_ADMIN_KEY"],
                run_scheduler=False,
                rate_buckets=rate_buckets,
            )
            capture = os.environ.get("SWITCHBOARD_BENCH_CAPTURE")
            if capture:
                # A capture server (bench/floors.py): never the one that is measured.
                from bench.floors import install_capture

                app = install_capture(app, capture)
        tails = os.environ.get("SWITCHBOARD_BENCH_TAILS")
        if tails:
            # Per-request times and the process's stalls (bench/tails.py): never in a
            # measured run, which does not set it.
            from bench.tails import install_tails

            app = install_tails(app, tails)
        config = uvicorn_config(app, settings.server, host="127.0.0.1", port=port)
        return run(config, sock, listening)

    if workers == 1:
        sys.exit(0 if serve() else 1)
    with multiprocess_metrics():
        sys.exit(Supervisor(workers, serve).run())


if __name__ == "__main__":
    main()
