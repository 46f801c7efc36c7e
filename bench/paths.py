"""A benchmarked HTTP path as data: its request with per-request values, rendered as a wrk
script for Switchboard, as a wrk script for the path's own floor (the same values, in the
query string of ``/own-floor/{slug}``), and as concrete requests for capturing its SQL.

A new path in bench/run.py is one ``HttpPath`` entry; its own floor follows from it."""

from __future__ import annotations

import pickle
import re
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench import floors

PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class Pick:
    """One of ``choices`` at random per request (ids the workload owns)."""

    name: str
    choices: tuple[str, ...]

    def lua(self) -> tuple[str, str]:
        table = f"choices_{self.name} = {{" + ",".join(f'"{c}"' for c in self.choices) + "}\n"
        return table, f"choices_{self.name}[math.random(#choices_{self.name})]"

    def sample(self, index: int) -> str:
        return self.choices[index % len(self.choices)]


@dataclass(frozen=True, slots=True)
class Number:
    """A random integer from 1 to ``high`` per request."""

    name: str
    high: int

    def lua(self) -> tuple[str, str]:
        return "", f"tostring(math.random({self.high}))"

    def sample(self, index: int) -> str:
        return str((self.high // 2 + 7919 * (index + 1)) % self.high + 1)


@dataclass(frozen=True, slots=True)
class Unique:
    """A text no other request sends: ``prefix``, a counter and a random number."""

    name: str
    prefix: str

    def lua(self) -> tuple[str, str]:
        # A nonce per wrk run, read from the kernel: the counter restarts with every run and
        # wrk's math.random is never seeded, so "counter and a random number" repeated the
        # warm-up's texts in the window and one connection count's in the next (the
        # idempotent webhook then measured replays, and refusals of a key reused).
        nonce = f"nonce_{self.name}"
        table = (
            f'local urandom_{self.name} = io.open("/dev/urandom", "rb")\n'
            f'{nonce} = string.gsub(urandom_{self.name}:read(8), ".", function(c)\n'
            '  return string.format("%02x", string.byte(c))\n'
            "end)\n"
            f"urandom_{self.name}:close()\n"
        )
        return table, f'"{self.prefix}" .. {nonce} .. "-" .. counter'

    def sample(self, index: int) -> str:
        return f"{self.prefix}capture{index}-{secrets.randbelow(10**9)}"


Value = Pick | Number | Unique


def _lua_text(template: str) -> str:
    """A Lua expression building ``template`` with its ``${name}`` placeholders filled."""
    parts: list[str] = []
    at = 0
    for match in PLACEHOLDER.finditer(template):
        if match.start() > at:
            parts.append(f"[==[{template[at : match.start()]}]==]")
        parts.append(f"v_{match.group(1)}")
        at = match.end()
    if at < len(template):
        parts.append(f"[==[{template[at:]}]==]")
    return " .. ".join(parts) or '""'


def _fill(template: str, values: Mapping[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


@dataclass(frozen=True, slots=True)
class HttpPath:
    """One measured path: ``url``, ``body`` and ``headers`` may hold ``${name}`` for the
    per-request ``values``."""

    method: str
    url: str
    values: tuple[Value, ...] = ()
    body: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def lua(self, directory: Path, name: str, key: str, floor: str | None = None) -> Path:
        """The wrk script for Switchboard, or with ``floor`` (a slug) for that path's own
        floor on the ceiling server: same values, same body, no checks."""
        lines = [
            f'wrk.headers["Authorization"] = "Bearer {key}"',
            'wrk.headers["Content-Type"] = "application/json"',
            "counter = 0",
        ]
        draws = []
        for value in self.values:
            table, expression = value.lua()
            if table:
                lines.append(table.rstrip("\n"))
            draws.append(f"  local v_{value.name} = {expression}")
        if floor is None:
            target = _lua_text(self.url)
        else:
            query = "&".join(f"{v.name}=${{{v.name}}}" for v in self.values)
            target = _lua_text(f"/own-floor/{floor}?{query}" if query else f"/own-floor/{floor}")
        body = "nil" if self.body is None else _lua_text(self.body)
        lines += ["request = function()", "  counter = counter + 1", *draws]
        lines += [f'  wrk.headers["{h}"] = {_lua_text(v)}' for h, v in self.headers.items()]
        lines += [f'  return wrk.format("{self.method}", {target}, nil, {body})', "end", ""]
        path = directory / f"{name}.lua"
        path.write_text("\n".join(lines))
        return path

    def sample(self, index: int) -> dict[str, str]:
        """Concrete values for a capture request (``index`` picks which ids)."""
        return {v.name: v.sample(index) for v in self.values}

    def request(self, values: Mapping[str, str]) -> tuple[str, str, dict[str, str], str | None]:
        """Method, URL, headers and body of one request with ``values``."""
        headers = {h: _fill(v, values) for h, v in self.headers.items()}
        body = None if self.body is None else _fill(self.body, values)
        return self.method, _fill(self.url, values), headers, body


# -- capturing the paths' SQL from a capture server -----------------------------------------


def _send(
    client: httpx.Client,
    path: HttpPath,
    values: Mapping[str, str],
    directory: Path,
    tag: str | None,
) -> list[floors.Call]:
    method, url, headers, body = path.request(values)
    if tag is not None:
        headers[floors.CAPTURE_HEADER] = tag
    answer = client.request(method, url, headers=headers, content=body)
    if answer.status_code >= 300:
        raise RuntimeError(f"{method} {url} answered {answer.status_code}: {answer.text[:200]}")
    if tag is None:
        return []
    written = directory / f"{tag}.pickle"
    deadline = time.monotonic() + 10
    while not written.exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"no capture written for {method} {url}")
        time.sleep(0.01)
    # Written by the capture server this run started, into this run's temporary directory.
    calls: list[floors.Call] = pickle.loads(written.read_bytes())  # noqa: S301
    return calls


def capture(
    port: int, paths: Mapping[str, HttpPath], key: str, directory: Path
) -> dict[str, floors.Plan | str]:
    """Each path's replay plan, from a capture server on ``port``
    (``bench.serve`` with ``SWITCHBOARD_BENCH_CAPTURE=directory``); a text saying why where
    a path could not be captured. Per path: one warm-up request (caches filled, as under
    load), then two captured requests with different values; the two must send the same
    statements (up to three tries: a cache refresh can fall into one)."""
    out: dict[str, floors.Plan | str] = {}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=30) as client:
        for number, (name, path) in enumerate(paths.items()):
            reason = "not captured"
            for attempt in range(3):
                try:
                    _send(client, path, path.sample(0), directory, None)
                    a, b = path.sample(0), path.sample(1)
                    calls_a = _send(client, path, a, directory, f"p{number}-{attempt}-a")
                    calls_b = _send(client, path, b, directory, f"p{number}-{attempt}-b")
                    out[name] = floors.build_plan(calls_a, calls_b, a, b)
                    break
                except (floors.CaptureMismatch, RuntimeError) as exc:
                    reason = f"capture failed: {exc}"
            else:
                out[name] = reason
    return out


async def verify(
    url: str, plans: dict[str, floors.Plan | str], paths: Mapping[str, HttpPath]
) -> None:
    """Replay each plan once with checks (statuses and row counts as captured); a plan
    that does not do what its path did is replaced by the reason."""
    pool = await floors.open_pool(url, max_size=2)
    try:
        for name, plan in plans.items():
            if isinstance(plan, str):
                continue
            try:
                await floors.replay(pool, plan, paths[name].sample(2), check=True)
            except (floors.ReplayMismatch, asyncpg.PostgresError) as exc:
                plans[name] = f"replay differs from the path: {exc}"
    finally:
        await pool.close()


def slugs(paths: Mapping[str, Any]) -> dict[str, str]:
    """The own floor's URL slug of each path."""
    return {name: f"p{i}" for i, name in enumerate(paths)}
