"""CPU profiles of the server under wrk load (``python -m bench.run --profile``): py-spy
samples the Switchboard process while wrk drives one path, and the top costs are counted
from its collapsed stacks. Needs py-spy (the ``bench`` extra) and the right to trace the
process (root, or ptrace allowed)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

FRAME = re.compile(r"^(?P<function>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def executable() -> str | None:
    """py-spy beside this Python (the venv's, installed by the bench extra), else on the
    PATH; None if neither has it."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def available() -> bool:
    """True if py-spy can be run."""
    return executable() is not None


def record(pid: int, seconds: int, output: Path) -> None:
    """Sample ``pid`` for ``seconds`` into ``output`` (collapsed stacks). Non-blocking: the
    process is not paused to be read, so the profile does not slow what it measures."""
    subprocess.run(
        [
            executable() or "py-spy",
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


def _split(frame: str) -> tuple[str, str]:
    """A py-spy frame as (function, file), the file relative to its package root."""
    match = FRAME.match(frame.strip())
    if not match:
        return frame.strip(), ""
    file = match.group("file")
    for marker in ("site-packages/", "lib/python3.11/", "lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    if "/app/" in file:
        file = "app/" + file.split("/app/", 1)[1]
    return match.group("function"), file


def _component(file: str) -> str:
    """Where a file belongs: ``app/<feature>`` for Switchboard, else its top package."""
    parts = file.split("/")
    if parts[0] == "app" and len(parts) > 2:
        return "/".join(parts[:2])
    return parts[0].removesuffix(".py") if parts[0] else "(native)"


def top_costs(collapsed: Path, n: int = 5) -> dict[str, Any]:
    """The ``n`` functions with most time of their own (self time, where the CPU was) and
    the ``n`` components (``app/<feature>``, or a library) with most self time, as shares
    of all samples."""
    own: Counter[str] = Counter()
    components: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        function, file = _split(stack.split(";")[-1])
        total += count
        own[f"{function} ({file})"] += count
        components[_component(file)] += count

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * c / max(total, 1), 1)] for name, c in counter.most_common(n)]

    return {"samples": total, "self %": share(own), "components %": share(components)}
