"""What the ``switchboard`` processes log, run as a user runs them (real subprocesses, stderr
not a terminal unless a test gives them one): JSON lines, nothing periodic in steady state,
nothing at all from a chore, one line for migrations applied, and "listening" only once
the port is bound."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import PROJECT_ROOT
from tests import dbutil

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def environment(database_url: str, tmp_path: Path, **overrides: str) -> dict[str, str]:
    """A user's environment: no test-wide SWITCHBOARD_* settings, default log level."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD_")}
    return env | {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": "cli-logs-admin-key-0123456789",
        "SWITCHBOARD_DATA_DIR": str(tmp_path / "data"),
        **overrides,
    }


async def run(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    # From the repository, as `make run` does (alembic finds the migrations from there).
    process = await asyncio.create_subprocess_exec(
        str(SWITCHBOARD),
        *args,
        env=env,
        cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line as the JSON object it must be (a line that is not fails the test)."""
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
async def empty_database(server_url: str) -> AsyncIterator[str]:
    name = dbutil.unique_name("sbtest_empty")
    await dbutil.create_database(server_url, name)
    try:
        yield dbutil.with_database(server_url, name)
    finally:
        await dbutil.drop_database(server_url, name)


async def test_a_chore_prints_its_answer_and_nothing_on_stderr(
    database_url: str, tmp_path: Path
) -> None:
    """With the admin key in its file (read at INFO by a service) and the chores at the
    default level."""
    env = environment(database_url, tmp_path)
    del env["SWITCHBOARD_ADMIN_KEY"]
    code, out, _ = await run(env, "admin-key-path")  # generates the key (a warning)
    assert code == 0
    key_file = out.strip()
    code, out, err = await run(env, "agents", "list")
    assert (code, err) == (0, "")
    assert out.startswith("NAME ")
    assert (await run(env, "admin-key-path")) == (0, key_file + "\n", "")


async def test_migrate_says_one_line_when_it_applies_and_nothing_otherwise(
    empty_database: str, tmp_path: Path
) -> None:
    env = environment(empty_database, tmp_path)
    code, out, err = await run(env, "migrate")
    assert (code, out) == (0, "")
    (line,) = json_lines(err)
    assert line["logger"] == "switchboard.migrate"
    assert line["level"] == "INFO"
    assert line["message"].startswith(f"applied {line['migrations']} migrations: ")
    assert line["migrations"] > 1
    assert (await run(env, "migrate")) == (0, "", "")  # nothing to apply: nothing to say


async def test_on_a_terminal_the_lines_are_text(empty_database: str, tmp_path: Path) -> None:
    main, terminal = pty.openpty()
    try:
        process = await asyncio.create_subprocess_exec(
            str(SWITCHBOARD),
            "migrate",
            env=environment(empty_database, tmp_path),
            cwd=PROJECT_ROOT,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=terminal,
        )
        assert await asyncio.wait_for(process.wait(), timeout=60) == 0
        written = os.read(main, 65536).decode()
    finally:
        os.close(main)
        os.close(terminal)
    assert " INFO  switchboard.migrate  applied " in written
    assert not written.lstrip().startswith("{")


def listening_url(line: dict[str, Any]) -> str | None:
    if line["logger"] == "switchboard.server" and "listening on" in line["message"]:
        url: str = line["url"]
        return url
    return None


@pytest.mark.slow
async def test_serve_is_quiet_in_steady_state_and_logs_requests_with_their_trace(
    database_url: str, tmp_path: Path
) -> None:
    """Serve on a port the system picks, the scheduler on (its event delivery runs every
    5 s): after start-up, 12 s without a request write nothing; a request writes one
    access line carrying the trace it came with."""
    process = await asyncio.create_subprocess_exec(
        str(SWITCHBOARD),
        "serve",
        "--port",
        "0",
        env=environment(database_url, tmp_path, SWITCHBOARD_SCHEDULER_ENABLED="true"),
        cwd=PROJECT_ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stderr is not None
    start_up: list[dict[str, Any]] = []
    try:
        url = None
        while url is None:
            raw = await asyncio.wait_for(process.stderr.readline(), timeout=30)
            assert raw, f"serve exited during start-up: {start_up}"
            start_up.append(json.loads(raw))
            url = listening_url(start_up[-1])
        assert {line["level"] for line in start_up} <= {"INFO"}, start_up
        assert any(line["logger"] == "switchboard.scheduler" for line in start_up), start_up

        try:
            extra = await asyncio.wait_for(process.stderr.readline(), timeout=12)
        except TimeoutError:
            extra = b""
        assert extra == b"", f"a line in steady state: {extra!r}"

        async with httpx.AsyncClient() as client:
            response = await client.get(
                f"{url}/health", headers={"traceparent": f"00-{PARENT_TRACE}-00f067aa0ba902b7-01"}
            )
        assert response.headers["x-trace-id"] == PARENT_TRACE
        access = json.loads(await asyncio.wait_for(process.stderr.readline(), timeout=10))
        assert access["logger"] == "switchboard.access"
        assert (access["path"], access["status"], access["trace_id"]) == (
            "/health",
            200,
            PARENT_TRACE,
        )
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
        out, rest = await asyncio.wait_for(process.communicate(), timeout=30)
    assert out == b""  # everything a service says is a log line on stderr
    json_lines(rest.decode())


async def test_a_port_in_use_is_one_error_line_and_never_listening(
    database_url: str, tmp_path: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, out, err = await run(
            environment(database_url, tmp_path), "serve", "--port", str(port)
        )
    assert code == 1
    assert "listening" not in out + err
    assert err.splitlines() == [
        f"switchboard: error: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
