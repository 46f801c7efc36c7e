"""The parts of ``serve --workers`` that need no process of their own: how many workers a
setting means, the metrics directory, the worker's mark on its log lines, and the supervisor
with a trivial worker body (real forked processes)."""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import values

from app.cli import build_parser
from app.logs import JsonFormatter, WorkerFilter
from app.settings import ServerSettings
from app.supervisor import (
    RestartBackoff,
    Supervisor,
    connections_needed,
    multiprocess_metrics,
    worker_count,
)


def test_auto_and_zero_mean_one_worker_per_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    cpus = len(os.sched_getaffinity(0))
    assert worker_count("auto") == cpus
    assert worker_count(0) == cpus
    assert worker_count(3) == 3
    monkeypatch.setenv("SWITCHBOARD_WORKERS", "auto")
    assert ServerSettings().workers == "auto"
    monkeypatch.setenv("SWITCHBOARD_WORKERS", "4")
    assert ServerSettings().workers == 4
    assert ServerSettings.model_fields["workers"].default == 1


def test_the_command_line_takes_a_count_or_auto() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--workers", "2"]).workers == 2
    assert parser.parse_args(["serve", "--workers", "auto"]).workers == "auto"
    assert parser.parse_args(["serve"]).workers is None  # the setting decides
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--workers", "-1"])


def test_connections_needed_counts_the_pool_and_the_dedicated_ones() -> None:
    assert connections_needed(1, 10) == 16
    assert connections_needed(4, 10) == 64


def test_a_private_metrics_directory_is_made_and_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    single = values.ValueClass
    with multiprocess_metrics() as path:
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == path
        assert list(Path(path).iterdir()) == []
        assert values.ValueClass is not single  # prometheus-client now writes files
    assert not Path(path).exists()
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
    assert values.ValueClass is single


def test_a_killed_supervisor_s_metrics_directory_is_removed_by_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    dead = os.fork()  # a pid that no longer runs
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    orphan = Path(tempfile.mkdtemp(prefix=f"switchboard-metrics-{dead}-"))
    alive = Path(tempfile.mkdtemp(prefix=f"switchboard-metrics-{os.getppid()}-"))
    try:
        with multiprocess_metrics() as path:
            assert Path(path).name.startswith(f"switchboard-metrics-{os.getpid()}-")
        assert not orphan.exists()
        assert alive.exists()  # its supervisor (here: any live process) still runs
    finally:
        shutil.rmtree(orphan, ignore_errors=True)
        shutil.rmtree(alive, ignore_errors=True)


def test_the_user_s_metrics_directory_is_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    (tmp_path / "keep").write_text("")
    single = values.ValueClass
    try:
        with multiprocess_metrics() as path:
            assert path == str(tmp_path)
            assert values.ValueClass is not single
    finally:
        values.ValueClass = single  # the rest of the test process counts in memory
    assert (tmp_path / "keep").exists()
    assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(tmp_path)


def test_a_worker_s_lines_say_which_worker() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(WorkerFilter(1))
    logger = logging.getLogger("switchboard.test_worker_mark")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("hello")
        logger.warning("about another", extra={"worker": 0})  # a supervisor's line
    finally:
        logger.removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["worker"] for line in lines] == [1, 0]


def supervise(
    count: int, body: Callable[[int, Callable[[], None]], None], *, signals: int = 1
) -> tuple[int, float]:
    """Run a supervisor in this process (its main thread) with ``body`` in each worker;
    SIGTERM it (``signals`` times, half a second apart) once ``count`` workers said they
    listen, or after 20 s."""
    supervisor = Supervisor(count, body)
    began = time.monotonic()
    done = threading.Event()

    def stop_later() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            sum(w.listening for w in supervisor._workers.values()) < count
        ):
            if done.wait(0.05):
                return  # it stopped by itself
        for n in range(signals):
            if n and done.wait(0.5):
                return
            os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_later)
    stopper.start()
    try:
        code = supervisor.run()
    finally:
        done.set()
        stopper.join()
    return code, time.monotonic() - began


def test_workers_that_listen_are_stopped_by_sigterm_and_the_exit_code_is_0() -> None:
    def body(_: int, listening: Callable[[], None]) -> None:
        listening()
        time.sleep(60)  # until SIGTERM

    code, took = supervise(2, body)
    assert code == 0
    assert took < 10


def test_a_second_sigterm_kills_workers_that_do_not_stop() -> None:
    """The grace period is for workers finishing their requests; an operator who asks
    twice does not wait for it."""

    def body(_: int, listening: Callable[[], None]) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a worker stuck in its shutdown
        listening()
        time.sleep(60)

    code, took = supervise(2, body, signals=2)
    assert code == 0
    assert took < 10  # not the 60 s grace


def test_a_worker_that_never_listens_fails_the_start_with_exit_code_1() -> None:
    def body(slot: int, listening: Callable[[], None]) -> None:
        if slot == 0:
            raise RuntimeError("the database is away")
        time.sleep(60)

    code, took = supervise(2, body)
    assert code == 1
    assert took < 15


def test_the_backoff_doubles_up_to_its_most_and_resets_after_a_long_run() -> None:
    backoff = RestartBackoff(first=1, most=30, reset_after=60)
    delays: list[float] = []
    previous = None
    for _ in range(7):
        previous = backoff.next_delay(previous, up_for=0.5)
        delays.append(previous)
    assert delays == [1, 2, 4, 8, 16, 30, 30]
    assert backoff.next_delay(30, up_for=59) == 30
    assert backoff.next_delay(30, up_for=60) == 1  # it stayed up: a fresh start


def test_a_worker_that_keeps_failing_at_start_up_is_restarted_ever_more_slowly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Slot 0 listens; slot 1 fails at start-up every time (once slot 0 listened, so it is
    not a failed start of the whole server): its starts come 0.2, 0.4, 0.8, 0.8 s apart."""
    starts, listened = tmp_path / "starts", tmp_path / "listened"

    def body(slot: int, listening: Callable[[], None]) -> None:
        if slot == 0:
            listening()
            listened.touch()
            time.sleep(60)
        while not listened.exists():
            time.sleep(0.01)
        with starts.open("a") as out:
            out.write(f"{time.monotonic()}\n")
        raise RuntimeError("a setting this worker cannot start with")

    supervisor = Supervisor(2, body, RestartBackoff(first=0.2, most=0.8, reset_after=60))
    done = threading.Event()

    def stop_later() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not done.is_set():
            if starts.exists() and len(starts.read_text().split()) >= 5:
                break
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    stopper = threading.Thread(target=stop_later)
    stopper.start()
    with caplog.at_level(logging.WARNING, logger="switchboard.supervisor"):
        try:
            code = supervisor.run()
        finally:
            done.set()
            stopper.join()
    assert code == 0
    times = [float(line) for line in starts.read_text().split()]
    assert len(times) >= 5
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for gap, least in zip(gaps, [0.2, 0.4, 0.8, 0.8], strict=False):
        assert gap >= least - 0.02, gaps
    assert gaps[2] > gaps[0] + 0.4, gaps  # slowing down, not once a second or as fast as it dies
    waits = [
        float(r.getMessage().rsplit("in ", 1)[1].split()[0])
        for r in caplog.records
        if "starting another" in r.getMessage()
    ]
    assert waits[:4] == pytest.approx([0.2, 0.4, 0.8, 0.8], abs=0.15)
