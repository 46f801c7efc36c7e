"""bench/serve.py's process handling: a server that does not start, or does not stop on
SIGTERM, is not left running (bench/run.py stops every server it started on any failure)."""

from __future__ import annotations

import socket
import subprocess
import sys

import psutil
import pytest

from bench.serve import free_port, spawn, stop


def test_stop_kills_a_process_that_ignores_sigterm() -> None:
    ignores = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)"
    )
    process = subprocess.Popen([sys.executable, "-c", ignores], stdout=subprocess.PIPE)  # noqa: S603
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    stop(process, timeout=0.5)
    assert process.returncode == -9
    process.stdout.close()


def test_a_server_that_cannot_start_is_reaped() -> None:
    port = free_port()
    taken = socket.socket()
    taken.bind(("127.0.0.1", port))
    taken.listen()
    try:
        with pytest.raises(RuntimeError, match="did not start"):
            spawn("ceiling", port, {"CEILING_DATABASE_URL": "postgresql://127.0.0.1:9/none"})
    finally:
        taken.close()
    assert not psutil.Process().children()  # waited for, not a zombie either
