"""bench/serve.py's process handling: a server that does not start, or does not stop on
SIGTERM, is not left running (bench/run.py stops every server it started on any failure)."""

from __future__ import annotations

import errno
import socket
import subprocess
import sys
import time

import psutil
import pytest

from bench.serve import ROOT, reserve_port, spawn, stop


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
    with pytest.raises(RuntimeError, match="did not start"):
        spawn("ceiling", {"CEILING_DATABASE_URL": "postgresql://127.0.0.1:9/none"})
    assert not psutil.Process().children()  # waited for, not a zombie either


def test_a_reserved_port_is_never_handed_out_again_until_served() -> None:
    """Between choosing a port and serving on it nobody else can take it: the socket that
    chose it is bound all along (two pytest-xdist processes once got the same port from
    free_port, which lets it go before the server binds it)."""
    with reserve_port() as reserved:
        port = reserved.getsockname()[1]
        for reuse in (0, 1):  # app.server.bind sets SO_REUSEADDR
            with socket.socket() as taker:
                taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, reuse)
                with pytest.raises(OSError, match="in use") as refused:
                    taker.bind(("127.0.0.1", port))
                assert refused.value.errno == errno.EADDRINUSE


def test_a_spawned_server_serves_on_the_socket_it_inherited() -> None:
    """The child serves on the socket spawn reserved (``fd:N``): the port spawn reports is
    the one that answers, and it is bound while the child runs."""
    answer = (
        "import socket, sys; from bench.serve import inherited; "
        "s = inherited(sys.argv[1]); s.listen(); c, _ = s.accept(); c.sendall(b'here'); c.close()"
    )
    with reserve_port() as sock:
        port = sock.getsockname()[1]
        fd = sock.fileno()
        process = subprocess.Popen(  # noqa: S603
            [sys.executable, "-c", answer, f"fd:{fd}"], cwd=ROOT, pass_fds=(fd,)
        )
    try:
        deadline = time.monotonic() + 30
        while True:  # refused until the child listens
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=10)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "the child never listened"
                time.sleep(0.05)
        with client:
            assert client.recv(4) == b"here"
    finally:
        stop(process)
