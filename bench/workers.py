"""Throughput with 1 and 2 worker processes (``switchboard serve --workers N``) against the
ceiling and the one-query floor served the same way (``bench.serve ... WORKERS``: the same
supervisor, N processes on one socket).

Unlike the HTTP table (server on CPU 0, wrk on CPU 1), nothing is pinned here: N workers
are meant to use the machine's cores, so the servers may run on both and wrk (one thread)
shares them. Every target gets the same, so the ratios compare like with like; the
absolute figures are what one host serves with its load generator on board.
``python -m bench.run --only workers [--quick]``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.serve import spawn, stop

WORKER_COUNTS = (1, 2)


class _Target:
    def __init__(self, target: str, env: dict[str, str], workers: int) -> None:
        self.proc, self.port = spawn(target, env, workers=workers)

    def stop(self) -> None:
        stop(self.proc, timeout=70)


def measure(
    url: str,
    env: dict[str, str],
    scripts: dict[str, Path],
    floor: Path,
    connections: int,
    warmup_s: int,
    window_s: int,
    wrk: Callable[[int, str, int, int, Path | None], dict[str, Any]],
    settle: Callable[[str], None],
) -> dict[str, Any]:
    """For each worker count: the ceiling's constant GET, the floor, then each of
    ``scripts`` on Switchboard, at ``connections``; each path's ratio to the ceiling and the
    floor with the same number of workers, and its speed-up over one worker."""
    results: dict[str, Any] = {}
    for workers in WORKER_COUNTS:
        rows: dict[str, Any] = {}
        ceiling = _Target("ceiling", {"CEILING_DATABASE_URL": url}, workers)
        try:
            wrk(ceiling.port, "/constant", connections, warmup_s, None)
            rows["ceiling GET"] = wrk(ceiling.port, "/constant", connections, window_s, None)
            settle(url)
            wrk(ceiling.port, "/", connections, warmup_s, floor)
            rows["floor: one query"] = wrk(ceiling.port, "/", connections, window_s, floor)
        finally:
            ceiling.stop()
        switchboard = _Target("switchboard", env, workers)
        try:
            for name, script in scripts.items():
                settle(url)
                wrk(switchboard.port, "/", connections, warmup_s, script)
                measured = wrk(switchboard.port, "/", connections, window_s, script)
                measured["ratio"] = round(measured["rps"] / rows["ceiling GET"]["rps"], 3)
                measured["to_floor"] = round(measured["rps"] / rows["floor: one query"]["rps"], 3)
                rows[name] = measured
        finally:
            switchboard.stop()
        results[f"{workers} worker{'s' if workers > 1 else ''}"] = rows
    one, two = results["1 worker"], results["2 workers"]
    results["2 workers / 1"] = {name: round(two[name]["rps"] / one[name]["rps"], 2) for name in one}
    return results
