"""Serve one benchmark target the same way for every target, and as ``switchboard serve``
does (app/server.py: uvicorn, uvloop, httptools with the head limits; one process, or N
workers under app/supervisor.py as ``serve --workers N``), with no access log.
``python -m bench.serve ceiling|switchboard PORT [WORKERS]``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def memory_kib(pid: int, field: str = "VmRSS") -> int:
    """A memory figure of a process from /proc/<pid>/status, in KiB: ``VmRSS`` (resident
    now) or ``VmHWM`` (the peak resident set so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(f"no {field} in /proc/{pid}/status")


def spawn(
    target: str, port: int, env: dict[str, str], cpu: int | None = None, workers: int = 1
) -> subprocess.Popen[bytes]:
    """Start ``target`` in a process of its own (pinned to ``cpu`` if given; ``workers``
    processes behind the port) and wait until it answers; used by the benchmarks, the
    drills and the fuzz smoke test."""
    command = [sys.executable, "-m", "bench.serve", target, str(port), str(workers)]
    if cpu is not None and shutil.which("taskset"):
        command = ["taskset", "-c", str(cpu), *command]
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, **env})
    probe = f"http://127.0.0.1:{port}" + ("/constant" if target == "ceiling" else "/ready")
    # A deadline, not a wait: on a loaded host (CI, several suites at once) a start takes long.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(probe, timeout=1).status_code == 200:
                return process
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
    target, port = sys.argv[1], int(sys.argv[2])
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    from app.logs import configure_logging
    from app.server import bind, run, uvicorn_config
    from app.settings import Settings
    from app.supervisor import Supervisor, multiprocess_metrics

    settings = Settings()
    settings.logging.level, settings.logging.access = "WARNING", False
    configure_logging(settings.logging)
    sock = bind("127.0.0.1", port)

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
