"""``switchboard serve --workers N``: N server processes accepting on one port.

The supervisor (the process ``switchboard serve`` started as) binds the port (``bind`` in
app/server.py), runs the migrations, then forks N workers. Each worker builds its own app
after the fork (its own event loop, pool and LISTEN connections: the supervisor opens none,
so nothing of the kind crosses a fork) and serves the inherited socket exactly as a single
process does (``run``: uvicorn, the head limits, streams ended on shutdown). The kernel
hands each new connection to one of the processes waiting on the socket.

uvicorn's own supervisor (``uvicorn.supervisors.Multiprocess``) does not fit: it starts its
workers with multiprocessing's *spawn*, so the app must be an import string and the
protocol class importable by name, while ours is built from the settings (the head
limits); ``_Server``'s shutdown (ending event streams) would be lost; and it cannot tell a
worker that never started (the database is away: stop, exit 1) from one that died later
(start another). Fork and wait are enough:

- a worker writes its pid to a pipe once it listens; the supervisor logs which did;
- a worker that ends while the supervisor is not stopping is started again in the same
  slot, at most once a second, then backing off (``RestartBackoff``: a slot whose workers
  keep dying is started 1, 2, 4 ... at most 30 s apart, and again at once after one stayed
  up a minute), so a worker that cannot start does not fork a process a second; if one
  ends without having listened while no worker ever has, start-up failed: the others are
  stopped and the exit code is 1;
- SIGTERM or SIGINT: SIGTERM to every worker (each ends its event streams and finishes
  its requests, as one process does), wait for them (``STOP_GRACE`` seconds, then SIGKILL),
  exit 0 if a worker ever listened, else 1;
- a worker gets SIGTERM from the kernel when the supervisor dies (Linux
  ``PR_SET_PDEATHSIG``), so none outlives a killed supervisor.

The scheduler runs in worker 0 only (and again in its replacement), the task worker in
every worker: docs/design.md, "Serving", says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import select
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

logger = logging.getLogger("switchboard.supervisor")

STOP_GRACE = 60.0  # seconds a worker gets to finish after SIGTERM (a message waits up to 55)
NEVER_LISTENED = 3  # a worker's exit code when it ended without having listened
# Connections a worker may hold outside its pool: the presence lock, and the LISTEN
# connections of the breakers, the agent list, the task worker, task waits and event streams.
DEDICATED_CONNECTIONS = 6

ServeOne = Callable[[int, Callable[[], None]], None]
"""What a worker runs: ``serve(slot, listening)`` serves until told to stop (SIGTERM) and
calls ``listening()`` once it listens."""


def worker_count(value: int | str) -> int:
    """``--workers`` / ``SWITCHBOARD_WORKERS`` as a number of processes: 0 or ``auto`` is
    one per CPU this process may run on."""
    if value in (0, "auto"):
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    return int(value)


def connections_needed(workers: int, pool_max: int) -> int:
    """The most connections ``workers`` processes open to PostgreSQL."""
    return workers * (pool_max + DEDICATED_CONNECTIONS)


_METRICS_PREFIX = "switchboard-metrics-"


@contextlib.contextmanager
def multiprocess_metrics() -> Iterator[str]:
    """A ``PROMETHEUS_MULTIPROC_DIR`` for the workers: the user's if set (left as it is),
    else a private empty one, removed at exit (and, should the supervisor be killed, by the
    next one: the directory is named after its pid). prometheus-client is told now, before
    any worker builds a metric, whatever was imported before (it reads the variable once)."""
    given = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not given:
        _remove_orphaned_metrics()
    path = given or tempfile.mkdtemp(prefix=f"{_METRICS_PREFIX}{os.getpid()}-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    from prometheus_client import values

    values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    try:
        yield path
    finally:
        if not given:
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
            values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
            shutil.rmtree(path, ignore_errors=True)


def _remove_orphaned_metrics() -> None:
    """Remove the private metrics directories of supervisors that no longer run."""
    for path in Path(tempfile.gettempdir()).glob(f"{_METRICS_PREFIX}*-*"):
        pid = path.name.removeprefix(_METRICS_PREFIX).split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except PermissionError:
            pass  # another user's process: alive


class _Stop(Exception):
    """SIGTERM in a worker once uvicorn no longer handles it (before it starts, or the
    signal uvicorn raises again after its graceful shutdown)."""


def _raise_stop(_: int, __: FrameType | None) -> None:
    raise _Stop


def _die_with_parent(parent: int) -> None:
    """SIGTERM to this process when its parent dies (Linux; elsewhere nothing)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the request took effect
        raise _Stop


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


@dataclass(frozen=True)
class RestartBackoff:
    """How long a slot waits between starts: ``first`` seconds, doubled each time its worker
    dies again, at most ``most``; back to ``first`` once a worker stayed up ``reset_after``."""

    first: float = 1.0
    most: float = 30.0
    reset_after: float = 60.0

    def next_delay(self, previous: float | None, up_for: float) -> float:
        """The wait before the next start of a slot whose worker ran ``up_for`` seconds and
        whose last restart waited ``previous`` (None: it has not been restarted)."""
        if previous is None or up_for >= self.reset_after:
            return self.first
        return min(previous * 2, self.most)


@dataclass
class _Worker:
    slot: int
    pid: int
    started_at: float
    listening: bool = False


_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD)


class Supervisor:
    """Starts ``count`` workers running ``serve`` and keeps them running until told to stop."""

    def __init__(
        self, count: int, serve: ServeOne, backoff: RestartBackoff = RestartBackoff()
    ) -> None:
        self._count = count
        self._serve = serve
        self._backoff = backoff
        self._workers: dict[int, _Worker] = {}  # by pid
        self._due: dict[int, float] = {}  # slot -> when to start it again
        self._delays: dict[int, float] = {}  # slot -> the wait before its last restart
        self._stop_signal: int | None = None
        self._stop_deadline: float | None = None
        self._hurry = False  # a second SIGTERM/SIGINT while stopping: kill now
        self._listened = False
        self._failed = False
        self._ready_r = -1

    def run(self) -> int:
        """Supervise until SIGTERM/SIGINT (0) or a failed start-up (1)."""
        ready_r, ready_w = os.pipe()
        wake_r, wake_w = os.pipe()
        self._ready_r = ready_r
        for fd in (ready_r, wake_r, wake_w):
            os.set_blocking(fd, False)
        previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        previous_wakeup = signal.set_wakeup_fd(wake_w)
        for sig in _SIGNALS:
            signal.signal(sig, self._on_signal)
        try:
            for slot in range(self._count):
                self._start(slot, (ready_r, ready_w, wake_r, wake_w))
            while self._workers or (self._due and self._stop_deadline is None):
                with contextlib.suppress(InterruptedError):
                    select.select([ready_r, wake_r], [], [], 0.5)
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                self._read_listening()
                self._reap()
                if self._stop_signal is not None and self._stop_deadline is None:
                    name = signal.Signals(self._stop_signal).name
                    logger.info("%s: stopping %d workers", name, len(self._workers))
                    self._stop()
                if self._stop_deadline is None:
                    self._start_due((ready_r, ready_w, wake_r, wake_w))
                elif self._hurry or time.monotonic() > self._stop_deadline:
                    self._kill()
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            for fd in (ready_r, ready_w, wake_r, wake_w):
                os.close(fd)
        if not self._failed:
            logger.info("every worker stopped")
        return 0 if self._listened and not self._failed else 1

    def _on_signal(self, signum: int, _: FrameType | None) -> None:
        if signum == signal.SIGCHLD:
            return
        if self._stop_signal is None:
            self._stop_signal = signum
        elif self._stop_deadline is not None and self._stop_deadline != float("inf"):
            self._hurry = True

    def _start(self, slot: int, fds: tuple[int, ...]) -> None:
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        parent = os.getpid()
        try:
            pid = os.fork()
        finally:  # a failed fork (EAGAIN, ENOMEM) must not leave the signals blocked
            if os.getpid() == parent:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        if pid == 0:  # the worker: never returns
            self._child(slot, parent, fds, blocked)
        self._workers[pid] = _Worker(slot, pid, time.monotonic())
        logger.info("started worker %d (pid %d)", slot, pid, extra={"worker": slot, "pid": pid})

    def _child(
        self, slot: int, parent: int, fds: tuple[int, ...], mask: set[int | signal.Signals]
    ) -> None:
        ready_r, ready_w, wake_r, wake_w = fds
        code = NEVER_LISTENED
        listened = False
        try:
            signal.set_wakeup_fd(-1)
            for fd in (ready_r, wake_r, wake_w):
                os.close(fd)
            signal.signal(signal.SIGTERM, _raise_stop)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            _die_with_parent(parent)

            def listening() -> None:
                nonlocal listened
                listened = True
                os.write(ready_w, f"{os.getpid()}\n".encode())

            self._serve(slot, listening)
        except (_Stop, KeyboardInterrupt):
            pass
        except BaseException:
            with contextlib.suppress(BaseException):
                logger.exception("worker %d failed", slot, extra={"worker": slot})
        finally:
            if listened:
                code = 0
            with contextlib.suppress(BaseException):
                sys.stdout.flush()
                sys.stderr.flush()
            os._exit(code)

    def _read_listening(self) -> None:
        try:
            data = os.read(self._ready_r, 4096)
        except BlockingIOError:
            return
        for line in data.split():
            worker = self._workers.get(int(line))
            if worker is not None:
                worker.listening = True
                self._listened = True

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._read_listening()  # what it said before it ended
            worker = self._workers.pop(pid, None)
            if worker is None:
                continue
            self._forget(pid)
            code = os.waitstatus_to_exitcode(status)
            how = f"signal {_signal_name(-code)}" if code < 0 else f"exit code {code}"
            fields = {"worker": worker.slot, "pid": pid}
            if self._stop_deadline is not None:
                logger.debug("worker %d (pid %d) stopped (%s)", worker.slot, pid, how)
            elif not worker.listening and not self._listened:
                logger.error(
                    "worker %d (pid %d) ended before it listened (%s): stopping",
                    worker.slot,
                    pid,
                    how,
                    extra=fields,
                )
                self._failed = True
                self._stop()
            else:
                now = time.monotonic()
                delay = self._backoff.next_delay(
                    self._delays.get(worker.slot), now - worker.started_at
                )
                self._delays[worker.slot] = delay
                # The wait counts from the start: a worker that lived longer restarts sooner.
                due = max(now, worker.started_at + delay)
                logger.warning(
                    "worker %d (pid %d) ended (%s): starting another in %.1f s",
                    worker.slot,
                    pid,
                    how,
                    due - now,
                    extra={**fields, "restart_in_seconds": round(due - now, 3)},
                )
                self._due[worker.slot] = due

    @staticmethod
    def _forget(pid: int) -> None:
        """Drop a dead worker's live-gauge files (prometheus-client's bookkeeping)."""
        path = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if path:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, path)  # type: ignore[no-untyped-call]

    def _start_due(self, fds: tuple[int, ...]) -> None:
        now = time.monotonic()
        for slot, when in list(self._due.items()):
            if when <= now:
                del self._due[slot]
                try:
                    self._start(slot, fds)
                except OSError as exc:  # no process to be had now: try the slot again
                    logger.warning(
                        "worker %d could not be started again: %s",
                        slot,
                        exc,
                        extra={"worker": slot},
                    )
                    self._due[slot] = now + 1.0

    def _stop(self) -> None:
        self._due.clear()
        self._stop_deadline = time.monotonic() + STOP_GRACE
        for pid in self._workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def _kill(self) -> None:
        for worker in self._workers.values():
            logger.warning(
                "worker %d (pid %d) killed: %s",
                worker.slot,
                worker.pid,
                "asked twice to stop" if self._hurry else f"not stopped within {STOP_GRACE:g} s",
                extra={"worker": worker.slot},
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGKILL)
        self._stop_deadline = float("inf")
