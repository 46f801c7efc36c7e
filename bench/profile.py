"""CPU profiles of the server under wrk load (``python -m bench.run --profile``): py-spy
samples the Switchboard process while wrk drives one path, and the top costs are counted
from its collapsed stacks. Needs py-spy (the ``bench`` extra) and the right to trace the
process (root, or ptrace allowed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")
# Where a path's cost is its own: the event loop and server frames sit under everything.
CONTAINERS = ("asyncio/", "uvloop", "uvicorn/", "bench/serve.py", "app/server.py", "<module>")


def available() -> bool:
    """True if py-spy is on the PATH or beside this Python."""
    return shutil.which("py-spy") is not None


def record(pid: int, seconds: int, output: Path) -> None:
    """Sample ``pid`` for ``seconds`` into ``output`` (collapsed stacks). Non-blocking: the
    process is not paused to be read, so the profile does not slow what it measures."""
    subprocess.run(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(seconds),
            "--rate",
            "250",
            "--format",
            "raw",
            "--nonblocking",
            "--output",
            str(output),
        ],
        check=True,
        capture_output=True,
    )


def _name(frame: str) -> str:
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    file = match.group("file")
    for marker in ("site-packages/", "/app/", "/bench/", "lib/python3"):
        if marker in file:
            file = (
                file.split(marker, 1)[1] if marker != "/app/" else "app/" + file.split(marker, 1)[1]
            )
            break
    return f"{match.group('function')} ({file})"


def top_costs(collapsed: Path, n: int = 5) -> dict[str, Any]:
    """The ``n`` functions with most time of their own (self) and the ``n`` most inclusive
    frames below the server and the event loop, as shares of all samples."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_name(f) for f in stack.split(";") if f]
        # py-spy's first frame may be the thread ("process 123:...", "Thread ..."): skip it.
        frames = [f for f in frames if not f.startswith(("process ", "Thread "))]
        if not frames:
            continue
        total += count
        own[frames[-1]] += count
        for frame in set(frames):
            if not any(c in frame for c in CONTAINERS):
                inclusive[frame] += count

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * c / max(total, 1), 1)] for name, c in counter.most_common(n)]

    return {"samples": total, "self %": share(own), "inclusive %": share(inclusive)}
