"""wrk scripts for the paths of issue 22: the file with the client's key, and answers
counted by kind inside wrk, for paths whose status code alone does not say what
happened (a 200 message answered by the agent or by its fallback, an A2A call that is a
JSON-RPC error, a write merged or written plainly).

``counting(classify)`` is Lua for a wrk script: ``classify(status, headers, body)`` (Lua
code the path supplies) names the kind of each answer; wrk's ``done`` prints one line
``counts: {...}`` (JSON) with every kind's number over the whole run, which ``parse`` reads
back from wrk's output. It adds a ``response`` callback, so wrk reads every body: a little
client work, the same for every window of the path.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DONE = """
threads = {}
setup = function(thread) table.insert(threads, thread) end
done = function(summary, latency, requests)
  local total = {}
  for _, thread in ipairs(threads) do
    for kind, n in pairs(thread:get("counts")) do total[kind] = (total[kind] or 0) + n end
  end
  local parts = {}
  for kind, n in pairs(total) do table.insert(parts, string.format('"%s": %d', kind, n)) end
  io.write("counts: {" .. table.concat(parts, ", ") .. "}\\n")
end
"""


def counting(classify: str) -> str:
    """Lua counting each answer by the kind ``classify`` (Lua defining a function
    ``classify(status, headers, body)`` returning a string) gives it."""
    return (
        classify
        + "\ncounts = {}\n"
        + "response = function(status, headers, body)\n"
        + "  local kind = classify(status, headers, body)\n"
        + "  counts[kind] = (counts[kind] or 0) + 1\nend\n"
        + DONE
    )


def parse(out: str) -> dict[str, Any]:
    """``{"counts": {...}}`` from wrk's output when its script counted, else ``{}``."""
    match = re.search(r"^counts: (\{.*\})\s*$", out, re.M)
    return {"counts": json.loads(match.group(1))} if match else {}


def share(counts: dict[str, int], kind: str) -> float | None:
    """The fraction of the answers counted that were of ``kind`` (None with none)."""
    total = sum(counts.values())
    return round(counts.get(kind, 0) / total, 3) if total else None


def file(name: str, body: str, directory: Path, key: str) -> Path:
    """A wrk script ``name``.lua sending ``key`` (an agent's, as run.py's client) and JSON."""
    path = directory / f"{name}.lua"
    path.write_text(
        f'wrk.headers["Authorization"] = "Bearer {key}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n' + body
    )
    return path


def lua_list(name: str, values: list[str]) -> str:
    """A Lua table of strings."""
    return f"{name} = {{" + ",".join(f'"{v}"' for v in values) + "}\n"
