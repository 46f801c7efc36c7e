"""Switchboard benchmarks: every figure next to its ceiling, measured in the same run.

    make bench-quick   # under three minutes: 16 connections, 3 s windows, 30k-row sweeps,
                       # growth 10k/100k rows; a check, not a record
    make bench         # full: 16 and 64 connections, 1M-row sweeps, growth to 10M rows

Writes bench/results/<date>[-quick].json and prints a markdown table (docs/benchmarks.md
shows it). Needs wrk (Debian: apt-get install wrk). Uses SWITCHBOARD_BENCH_DATABASE_URL,
else SWITCHBOARD_TEST_DATABASE_URL, else the embedded PostgreSQL; it creates and drops a
database of its own. The server under test and the ceiling are both pinned to CPU 0, wrk to
CPU 1, so ratios compare like with like on this 2-core machine.

Every HTTP path is also measured against its own floor: its SQL, captured from the real
path at the start of the HTTP part and replayed by the bare app (bench/floors.py,
bench/paths.py). A new path is one ``HttpPath`` entry in ``http_scripts``. ``--profile``
adds py-spy profiles of the write paths (bench/profile.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pickle
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import timeit
import traceback
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.clock import SystemClock  # noqa: E402
from app.coordination.breaker import AsyncCircuitBreaker  # noqa: E402
from app.coordination.intents import detect_intents, prioritize  # noqa: E402
from app.db.migrate import upgrade  # noqa: E402
from app.db.pool import Database  # noqa: E402
from app.services import build_services  # noqa: E402
from app.settings import DatabaseSettings, Settings  # noqa: E402
from bench import event_streams, floors, new_paths, paths, profile, workers, wrk_scripts  # noqa: E402
from bench.paths import HttpPath, Number, Pick, Unique  # noqa: E402
from bench.serve import free_port, spawn, stop  # noqa: E402
from tests import dbutil  # noqa: E402

ADMIN = "bench-admin-key-0123456789abcdef"
PYTHON = sys.executable


@dataclass(frozen=True, slots=True)
class Mode:
    """How long and how large each part of a run is."""

    name: str
    connections: tuple[int, ...]
    warmup_s: int  # every wrk measurement is preceded by a warm-up of this length
    window_s: int  # the measured wrk window of the HTTP paths
    database_s: float  # each raw-driver loop
    cleanup_rows: int  # expired sessions, and expired memories, per sweep
    growth_sizes: tuple[int, ...]
    growth_window_s: int


FULL = Mode("full", (16, 64), 2, 15, 10, 1_000_000, (10_000, 1_000_000, 10_000_000), 4)
QUICK = Mode("quick", (16,), 1, 3, 2, 30_000, (10_000, 100_000), 2)


def pinned(cpu: int, cmd: list[str]) -> list[str]:
    return (["taskset", "-c", str(cpu)] if shutil.which("taskset") else []) + cmd


class Server:
    """One benchmark target in its own process."""

    def __init__(self, target: str, env: dict[str, str]) -> None:
        self.port = free_port()
        self.proc = spawn(target, self.port, env, cpu=0)

    def rss_mib(self) -> float:
        return round(psutil.Process(self.proc.pid).memory_info().rss / 2**20, 1)

    def stop(self) -> None:
        stop(self.proc)


def wrk_command(port: int, path: str, conns: int, seconds: int, script: Path | None) -> list[str]:
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", str(script)]
    return pinned(1, [*cmd, f"http://127.0.0.1:{port}{path}"])


def wrk(port: int, path: str, conns: int, seconds: int, script: Path | None) -> dict[str, Any]:
    out = subprocess.run(
        wrk_command(port, path, conns, seconds, script), capture_output=True, text=True, check=True
    ).stdout
    return parse_wrk(out)


class WrkUntilStopped:
    """wrk running in the background for as long as some work takes; ``stop()`` interrupts
    it (wrk prints its summary on SIGINT) and returns the figures."""

    def __init__(self, port: int, path: str, conns: int, script: Path | None) -> None:
        self._proc = subprocess.Popen(
            wrk_command(port, path, conns, 3600, script),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        time.sleep(0.5)  # connected and sending before the work starts

    def stop(self) -> dict[str, Any]:
        self._proc.send_signal(signal.SIGINT)
        out, _ = self._proc.communicate(timeout=30)
        return parse_wrk(out)


def parse_wrk(out: str) -> dict[str, Any]:
    def latency(label: str) -> float:
        match = re.search(rf"^\s+{label}%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        if not match:
            return float("nan")
        value, unit = float(match.group(1)), match.group(2)
        return round(value / 1000 if unit == "us" else value * 1000 if unit == "s" else value, 2)

    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    errors = int(non2xx.group(1)) if non2xx else 0
    if socket_errors:
        errors += sum(int(g) for g in socket_errors.groups())
    return {
        "rps": round(rps, 1),
        "p50_ms": latency("50"),
        "p99_ms": latency("99"),
        "errors": errors,
        **wrk_scripts.parse(out),  # answers by kind, for a script that counts them
    }


def lua(name: str, body: str, directory: Path, key: str) -> Path:
    """A wrk script sending ``key`` (the benchmark's client: an agent, not the admin)."""
    path = directory / f"{name}.lua"
    path.write_text(
        'wrk.headers["Authorization"] = "Bearer ' + key + '"\n'
        'wrk.headers["Content-Type"] = "application/json"\n' + body
    )
    return path


def lua_list(name: str, values: list[str]) -> str:
    return f"{name} = {{" + ",".join(f'"{v}"' for v in values) + "}\n"


# -- seeding ------------------------------------------------------------------------------

SEED_SESSIONS = """
INSERT INTO users (id) SELECT uuid_generate_v7() FROM generate_series(1, $1);
"""


async def seed_http(
    conn: asyncpg.Connection, users: int, sessions_per_user: int
) -> dict[str, list[str]]:
    await conn.execute(
        "INSERT INTO users (id) SELECT uuid_generate_v7() FROM generate_series(1, $1)", users
    )
    await conn.execute(
        """INSERT INTO session_coordination (user_id, session_state, expires_at)
           SELECT u.id, '{"active_process": null, "agent_outputs": {}, "pending_actions": [],
                          "conversation_context": {}, "user_preferences": {}}',
                  now() + interval '30 days'
           FROM users u, generate_series(1, $1)""",
        sessions_per_user,
    )
    await conn.execute(
        """INSERT INTO memories (user_id, session_id, agent_name, memory_type, category, content,
                                 content_size, access_level, created_at, updated_at, expires_at)
           SELECT s.user_id, s.session_id, 'bench', 'orchestrator', 'session_data',
                  jsonb_build_object('n', g, 'text', repeat('x', 40)), 60, 'all_agents',
                  now() - g * interval '1 second', now(), now() + interval '1 day'
           FROM (SELECT * FROM session_coordination LIMIT 200) s, generate_series(1, 20) g"""
    )
    await conn.execute("ANALYZE")
    every = [
        str(r[0])
        for r in await conn.fetch("SELECT session_id FROM session_coordination ORDER BY 1")
    ]
    with_memories = [
        str(r[0]) for r in await conn.fetch("SELECT DISTINCT session_id FROM memories LIMIT 200")
    ]
    # Messages grow their sessions (each appends an agent execution): they get sessions of
    # their own, so session reads measure the same rows however long the run.
    read_by_memory_paths = set(with_memories)
    talked_to = [s for s in every if s not in read_by_memory_paths][:400]
    sessions = sorted(set(every) - set(talked_to))
    # Writers are users of their own: what the write paths add must not change what the
    # read paths measure (context reads the user's session-less memories too).
    writers = [
        str(r[0])
        for r in await conn.fetch(
            "INSERT INTO users (id) SELECT uuid_generate_v7() FROM generate_series(1, 100)"
            " RETURNING id"
        )
    ]
    return {
        "sessions": sessions,
        "memory_sessions": with_memories,
        "message_sessions": talked_to,
        "users": writers,
    }


async def seed_expired(conn: asyncpg.Connection, n: int) -> None:
    await conn.execute(
        "INSERT INTO users (id) SELECT uuid_generate_v7() FROM generate_series(1, 1000)"
    )
    await conn.execute(
        """INSERT INTO session_coordination (user_id, created_at, updated_at, last_activity_at, expires_at)
           SELECT u.ids[1 + g % array_length(u.ids, 1)],
                  now() - interval '3 days', now() - interval '3 days', now() - interval '3 days',
                  now() - interval '1 hour' - g * (interval '1 day' / $1)
           FROM generate_series(1, $1) g,
                (SELECT array_agg(id) AS ids FROM (SELECT id FROM users LIMIT 1000) f) u""",
        n,
    )
    await conn.execute(
        """INSERT INTO memories (user_id, agent_name, memory_type, category, content, content_size,
                                 access_level, created_at, updated_at, expires_at)
           SELECT u.ids[1 + g % array_length(u.ids, 1)], 'bench',
                  'orchestrator', 'session_data', '{"n": 1}', 8, 'all_agents',
                  now() - interval '3 days', now() - interval '3 days',
                  -- spread over the past day, as real expiries are (not one shared instant)
                  now() - interval '1 hour' - g * (interval '1 day' / $1)
           FROM generate_series(1, $1) g,
                (SELECT array_agg(id) AS ids FROM (SELECT id FROM users LIMIT 1000) f) u""",
        n,
    )
    await conn.execute("ANALYZE")


# -- the measurements ---------------------------------------------------------------------


def http_scripts(seed: dict[str, list[str]]) -> dict[str, HttpPath]:
    """Every measured path, keyed by the name the results use. Each entry also gives the
    path its own floor (bench/paths.py): its SQL is captured and replayed as it is."""
    sessions = Pick("session", tuple(seed["sessions"]))
    memory_sessions = Pick("session", tuple(seed["memory_sessions"]))
    users = Pick("user", tuple(seed["users"]))
    one_kib = "x" * 1000
    return {
        "GET /v1/sessions/{id}": HttpPath("GET", "/v1/sessions/${session}", (sessions,)),
        "PATCH /v1/sessions/{id}": HttpPath(
            "PATCH",
            "/v1/sessions/${session}",
            (sessions, Number("n", 1_000_000)),
            '{"session_state": {"agent_outputs": {"bench": ${n}}}}',
            {"If-Match": "*"},
        ),
        "POST /v1/memories (1 KiB)": HttpPath(
            "POST",
            "/v1/memories",
            (users,),
            '{"user_id": "${user}", "memory_type": "orchestrator", "content": {"text": "'
            + one_kib
            + '"}}',
        ),
        "GET /v1/memories?session_id= (20 rows)": HttpPath(
            "GET", "/v1/memories?session_id=${session}", (memory_sessions,)
        ),
        "GET /v1/sessions/{id}/context": HttpPath(
            "GET", "/v1/sessions/${session}/context", (memory_sessions,)
        ),
        "POST /v1/sessions/{id}/messages (breaker open)": HttpPath(
            "POST",
            "/v1/sessions/${session}/messages",
            (Pick("session", tuple(seed["message_sessions"])),),
            '{"text": "what is compound interest"}',
        ),
        "POST /webhooks/n8n/memory (idempotent)": HttpPath(
            "POST",
            "/webhooks/n8n/memory",
            (users, Unique("key", "k")),
            '{"user_id": "${user}", "agent_name": "Orchestrator_Agent",'
            ' "memory_type": "orchestrator", "memory_content": {"n": 1}}',
            {"Idempotency-Key": "${key}"},
        ),
    }


FLOOR = "floor: one query, bare Litestar + asyncpg"


async def checkpoint(conn: asyncpg.Connection) -> None:
    """Flush what earlier phases wrote before a measurement, so no timed or WAL-sized
    checkpoint (and the write burst that comes with it) lands inside a window: on a shared
    disk, one was seen turning commit latency into 100-300 ms p99 tails for the paths it
    met (the disk has other stalls of its own). Without the privilege (pg_checkpoint) the
    measurement goes on without it."""
    with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
        await conn.execute("CHECKPOINT")


def settle(url: str) -> None:
    """``checkpoint`` on a connection of its own, before each HTTP measurement (every
    target gets the same)."""

    async def run() -> None:
        conn = await asyncpg.connect(url)
        try:
            await checkpoint(conn)
        finally:
            await conn.close()

    asyncio.run(run())


def capture_floors(
    url: str, env: dict[str, str], every: dict[str, HttpPath | Path], key: str, plans_file: Path
) -> dict[str, floors.Plan | str]:
    """Each path's own floor, from its real SQL: a capture server (bench/floors.py) runs one
    warm-up and two recorded requests per path, the two become a replay plan, the plan is
    replayed once with checks, and the plans go to ``plans_file`` for the ceiling server's
    ``/own-floor/{slug}``. Captured at run time, so the floors follow the code. A path
    given as a ready wrk script has none."""
    routes = {name: r for name, r in every.items() if isinstance(r, HttpPath)}
    with tempfile.TemporaryDirectory() as directory:
        capturer = Server("switchboard", {**env, floors.CAPTURE_ENV: directory})
        try:
            plans = paths.capture(capturer.port, routes, key, Path(directory))
        finally:
            capturer.stop()
    asyncio.run(paths.verify(url, plans, routes))
    plans.update(
        {name: "its own wrk script, no captured floor" for name in every if name not in routes}
    )
    slugs = paths.slugs(every)
    plans_file.write_bytes(
        pickle.dumps({slugs[n]: p for n, p in plans.items() if not isinstance(p, str)})
    )
    return plans


def profile_writes(
    url: str,
    sb: Server,
    routes: dict[str, HttpPath | Path],
    mode: Mode,
    tmp: Path,
    key: str,
    started: datetime,
) -> dict[str, Any]:
    """py-spy on the server while wrk (16 connections) drives each write path, after the
    measurements (a profile never overlaps a measured window). The collapsed stacks go to
    bench/profiles/ (not committed), the top five costs into the results."""
    if not profile.available():
        return {"unavailable": "py-spy is missing: pip install -e '.[bench]'"}
    directory = ROOT / "bench" / "profiles"
    directory.mkdir(exist_ok=True)
    slugs = paths.slugs(routes)
    out: dict[str, Any] = {}
    for name, route in routes.items():
        if not isinstance(route, HttpPath) or route.method == "GET":
            continue
        script = route.lua(tmp, f"{slugs[name]}-profile", key)
        collapsed = directory / f"{started:%Y-%m-%dT%H-%M}-{slugs[name]}.txt"
        settle(url)
        load = WrkUntilStopped(sb.port, "/", 16, script)
        try:
            profile.record(sb.proc.pid, max(mode.window_s, 10), collapsed)
        finally:
            figures = load.stop()
        out[name] = {
            **profile.top_costs(collapsed),
            "rps while sampled": figures["rps"],
            "file": str(collapsed.relative_to(ROOT)),
        }
    return out


def http_paths(
    url: str,
    sb: Server,
    ceiling: Server,
    routes: dict[str, HttpPath | Path],
    plans: dict[str, floors.Plan | str],
    seed: dict[str, list[str]],
    mode: Mode,
    tmp: Path,
    key: str,
) -> dict[str, Any]:
    warmup, seconds = mode.warmup_s, mode.window_s
    ceiling_post = lua("ceiling_post", 'wrk.method = "POST"\nwrk.body = \'{"a": 1}\'\n', tmp, key)
    floor = lua(
        "floor",
        lua_list("ids", seed["sessions"])
        + 'request = function() return wrk.format("GET", "/one-query/" .. ids[math.random(#ids)]) end\n',
        tmp,
        key,
    )
    slugs = paths.slugs(routes)
    results: dict[str, Any] = {}
    for c in mode.connections:
        settle(url)
        wrk(ceiling.port, "/constant", c, warmup, None)
        base_get = wrk(ceiling.port, "/constant", c, seconds, None)
        base_post = wrk(ceiling.port, "/constant", c, seconds, ceiling_post)
        settle(url)
        wrk(ceiling.port, "/", c, warmup, floor)  # (the floor's pool connects lazily)
        base_floor = wrk(ceiling.port, "/", c, seconds, floor)
        rows = {
            "ceiling GET": {**base_get, "ratio": 1.0},
            "ceiling POST": {**base_post, "ratio": 1.0},
            FLOOR: {**base_floor, "ratio": round(base_floor["rps"] / base_get["rps"], 3)},
        }
        for name, route in routes.items():
            script = route if isinstance(route, Path) else route.lua(tmp, slugs[name], key)
            settle(url)
            wrk(sb.port, "/", c, warmup, script)
            measured = wrk(sb.port, "/", c, seconds, script)
            ceiling_rps = base_get["rps"] if name.startswith("GET") else base_post["rps"]
            measured["ratio"] = round(measured["rps"] / ceiling_rps, 3)
            measured["to_floor"] = round(measured["rps"] / base_floor["rps"], 3)
            plan = plans.get(name, "not captured")
            if isinstance(route, HttpPath) and not isinstance(plan, str):
                # The path's own floor right after the path, same values, same window.
                own = route.lua(tmp, f"{slugs[name]}-floor", key, floor=slugs[name])
                settle(url)
                wrk(ceiling.port, "/", c, warmup, own)
                own_floor = wrk(ceiling.port, "/", c, seconds, own)
                measured["own_floor"] = {
                    **own_floor,
                    "statements": plan.statements,
                    "round_trips": plan.round_trips,
                }
                measured["ratio_to_own_floor"] = round(
                    measured["rps"] / max(own_floor["rps"], 0.1), 3
                )
            else:
                measured["own_floor"] = {"unavailable": plan}
            rows[name] = measured
        rows["rss_mib"] = {"switchboard": sb.rss_mib(), "ceiling": ceiling.rss_mib()}
        results[f"{c} connections"] = rows
    return results


async def database_ceiling(
    url: str, seed: dict[str, list[str]], seconds: float
) -> dict[str, float]:
    pool = await asyncpg.create_pool(url, min_size=10, max_size=10)
    sessions, users = seed["sessions"], seed["users"]
    content = json.dumps({"text": "x" * 1000})

    async def loop(kind: str, counter: list[int]) -> None:
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            async with pool.acquire() as conn:
                if kind == "select":
                    await conn.fetchrow(
                        "SELECT * FROM session_coordination WHERE session_id = $1",
                        uuid.UUID(sessions[i % len(sessions)]),
                    )
                else:
                    await conn.execute(
                        "INSERT INTO memories (user_id, agent_name, memory_type, category, content, content_size, access_level)"
                        " VALUES ($1, 'raw', 'orchestrator', 'session_data', $2::jsonb, 1000, 'all_agents')",
                        uuid.UUID(users[i % len(users)]),
                        content,
                    )
            i += 1
            counter[0] += 1

    out = {}
    for kind in ("select", "insert"):
        counter = [0]
        await asyncio.gather(*(loop(kind, counter) for _ in range(16)))
        out[f"raw {kind}s/s"] = round(counter[0] / seconds, 1)
    await pool.close()
    return out


async def cpu_paths(url: str) -> dict[str, float]:
    conn = await asyncpg.connect(url)
    from app.coordination.repository import intent_rule_data

    await conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads, schema="pg_catalog")
    data = await intent_rule_data(conn)  # type: ignore[arg-type]
    await conn.close()
    rules = data.rules({"request_plan": "P", "ask_question": "E", "emergency_financial": "C"})
    message = (
        "I lost my job and need help urgently. Also can you make a plan? What is compound interest?"
    )
    n = 20000
    seconds = min(
        timeit.repeat(
            lambda: prioritize(detect_intents(message, rules, ["session_in_progress"]), rules, 10),
            number=n,
            repeat=3,
        )
    )
    breaker = AsyncCircuitBreaker("bench", fail_max=5, reset_timeout=30)

    async def noop() -> int:
        return 1

    async def measure(wrapped: bool, count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            if wrapped:
                await breaker.call(noop)
            else:
                await noop()
        return (time.perf_counter() - start) / count

    count = 50000
    bare = min([await measure(False, count) for _ in range(3)])
    guarded = min([await measure(True, count) for _ in range(3)])
    return {
        "intent analysis + prioritization (3 intents), messages/s": round(n / seconds),
        "breaker overhead per call, µs": round((guarded - bare) * 1e6, 2),
    }


SET_BASED_EXPIRY = """
WITH archived AS (
    INSERT INTO session_archive (session_id, user_id, reason, session, versions, archived_at, restorable_until)
    SELECT s.session_id, s.user_id, 'expired', to_jsonb(s),
           coalesce((SELECT jsonb_agg(to_jsonb(v) ORDER BY v.version) FROM session_state_versions v
                     WHERE v.session_id = s.session_id), '[]'),
           now(), now() + interval '7 days'
    FROM session_coordination s
    WHERE expires_at < now() AND NOT preserve AND session_state ->> 'active_process' IS NULL
      AND status <> 'completed'
    RETURNING session_id
)
DELETE FROM session_coordination s USING archived a WHERE s.session_id = a.session_id
"""
# The same work as the expiry job in one statement: the job must also tell subscribers and
# streams (session.expired, one outbox row per session, in the moving statement), so its
# bound does too. The bare statement above, without the events, is reported beside it.
SET_BASED_EXPIRY_TOLD = SET_BASED_EXPIRY.replace(
    "    RETURNING session_id\n)\n",
    """    RETURNING session_id, user_id, restorable_until
), told AS (
    INSERT INTO outbox_events (event_type, payload, created_at)
    SELECT 'session.expired',
           jsonb_build_object('session_id', session_id, 'user_id', user_id,
                              'restorable_until', restorable_until),
           now()
    FROM archived
)
""",
)
assert SET_BASED_EXPIRY_TOLD != SET_BASED_EXPIRY
SET_BASED_RETENTION = (
    "DELETE FROM memories WHERE expires_at < now() AND category <> 'interaction_patterns'"
)
# Rounds of the cleanup's job-against-bound comparison; each side's best is compared.
CLEANUP_ROUNDS = {"full": 3, "quick": 1}


async def cleanup_at_scale(
    url: str, mode: Mode, sb: Server, tmp: Path, seed: dict[str, list[str]], key: str
) -> dict[str, Any]:
    n = mode.cleanup_rows
    conn = await asyncpg.connect(url)
    db = Database(url, DatabaseSettings(pool_min_size=1, pool_max_size=4))
    await db.open()
    services = build_services(Settings(), db, SystemClock(), replica="bench")
    jobs = services.jobs
    get_script = lua(
        "get_session_sweep",
        lua_list("ids", seed["sessions"])
        + 'request = function() return wrk.format("GET", "/v1/sessions/" .. ids[math.random(#ids)]) end\n',
        tmp,
        key,
    )
    out: dict[str, Any] = {"rows": n}

    async def fresh_expired_rows() -> None:
        # Same starting state for every phase: no leftovers, no dead rows, fresh statistics.
        await conn.execute("TRUNCATE session_archive, memory_archive")
        await conn.execute("VACUUM session_coordination, memories")
        await seed_expired(conn, n)
        await conn.execute("VACUUM ANALYZE session_coordination, memories")

    async def timed(work: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
        await checkpoint(conn)
        start = time.perf_counter()
        result = await work()
        return time.perf_counter() - start, result

    async def sweep() -> dict[str, Any]:
        retention, _ = await timed(lambda: jobs.run_now("memory_retention", dry_run=False))
        expiry, run = await timed(lambda: jobs.run_now("expiry_cleanup", dry_run=False))
        return {
            "expiry": expiry,
            "retention": retention,
            "archived": run.details.get("sessions_expired"),
        }

    # 1. The jobs and the set-based bound, each alone on the same data: the ratio of the
    # best of each side over the rounds (this shared host's noise only ever adds time). The
    # two jobs touch different tables; each is timed from a checkpoint, on fresh rows.
    jobs_runs: list[dict[str, Any]] = []
    bounds: list[tuple[float, float]] = []
    for _ in range(CLEANUP_ROUNDS[mode.name]):
        await fresh_expired_rows()
        jobs_runs.append(await sweep())
        await fresh_expired_rows()
        retention_bound, _ = await timed(lambda: conn.execute(SET_BASED_RETENTION))
        expiry_bound, _ = await timed(lambda: conn.execute(SET_BASED_EXPIRY_TOLD))
        bounds.append((retention_bound, expiry_bound))
    await fresh_expired_rows()
    bare_expiry, _ = await timed(lambda: conn.execute(SET_BASED_EXPIRY))
    alone = {
        "expiry": min(r["expiry"] for r in jobs_runs),
        "retention": min(r["retention"] for r in jobs_runs),
        "archived": jobs_runs[0]["archived"],
    }
    set_retention = min(b[0] for b in bounds)
    set_expiry = min(b[1] for b in bounds)
    # 2. Reads while the jobs run (for as long as they run) against reads when idle.
    idle = wrk(sb.port, "/", 16, 5, get_script)
    await fresh_expired_rows()
    await checkpoint(conn)
    load = WrkUntilStopped(sb.port, "/", 16, get_script)
    loaded = await sweep()
    busy = load.stop()

    out["rounds (best of each side)"] = len(jobs_runs)
    out["expiry job s"] = round(alone["expiry"], 2)
    out["retention job s"] = round(alone["retention"], 2)
    out["expiry job s, every round"] = [round(r["expiry"], 2) for r in jobs_runs]
    out["retention job s, every round"] = [round(r["retention"], 2) for r in jobs_runs]
    out["expired rows archived"] = alone["archived"]
    out["set-based expiry s"] = round(set_expiry, 2)
    out["set-based expiry without events s"] = round(bare_expiry, 2)
    out["set-based retention s"] = round(set_retention, 2)
    out["set-based expiry s, every round"] = [round(b[1], 2) for b in bounds]
    out["set-based retention s, every round"] = [round(b[0], 2) for b in bounds]
    out["expiry ratio"] = round(alone["expiry"] / max(set_expiry, 1e-3), 2)
    out["expiry ratio to the bound without events"] = round(
        alone["expiry"] / max(bare_expiry, 1e-3), 2
    )
    out["retention ratio"] = round(alone["retention"] / max(set_retention, 1e-3), 2)
    out["jobs under read load s"] = round(loaded["expiry"] + loaded["retention"], 2)
    out["GET session p99 idle ms"] = idle["p99_ms"]
    out["GET session p99 during sweep ms"] = busy["p99_ms"]
    out["GET session errors during sweep"] = busy["errors"]
    out["p99 ratio"] = round(busy["p99_ms"] / max(idle["p99_ms"], 1e-3), 2)
    await services.aclose()
    await db.close()
    await conn.close()
    return out


async def growth(url: str, mode: Mode, sb: Server, tmp: Path, key: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    user = await conn.fetchval("INSERT INTO users (id) VALUES (uuid_generate_v7()) RETURNING id")
    probe = await conn.fetchval(
        "INSERT INTO session_coordination (user_id, expires_at) VALUES ($1, now() + interval '30 days') RETURNING session_id",
        user,
    )
    await conn.execute(
        """INSERT INTO memories (user_id, session_id, agent_name, memory_type, category, content, content_size, access_level, expires_at)
           SELECT $1, $2, 'bench', 'orchestrator', 'session_data', '{"n": 1}', 8, 'all_agents', now() + interval '1 day'
           FROM generate_series(1, 20)""",
        user,
        probe,
    )
    filler_user = await conn.fetchval(
        "INSERT INTO users (id) VALUES (uuid_generate_v7()) RETURNING id"
    )
    have = await conn.fetchval("SELECT count(*) FROM memories")
    out: dict[str, Any] = {}
    mem = lua(
        "growth_memories",
        f'request = function() return wrk.format("GET", "/v1/memories?session_id={probe}") end\n',
        tmp,
        key,
    )
    sess = lua(
        "growth_sessions",
        f'request = function() return wrk.format("GET", "/v1/users/{user}/sessions?limit=20") end\n',
        tmp,
        key,
    )
    for size in mode.growth_sizes:
        if size > have:
            # filler rows for other users and sessions, in chunks
            remaining = size - have
            while remaining > 0:
                chunk = min(remaining, 500_000)
                await conn.execute(
                    """WITH s AS (INSERT INTO session_coordination (user_id, expires_at)
                                  SELECT $1, now() + interval '30 days' FROM generate_series(1, greatest($2 / 20, 1))
                                  RETURNING session_id)
                       INSERT INTO memories (user_id, session_id, agent_name, memory_type, category, content, content_size, access_level, expires_at)
                       SELECT $1, s.session_id, 'bench', 'orchestrator', 'session_data', '{"n": 1}', 8, 'all_agents', now() + interval '1 day'
                       FROM s, generate_series(1, 20)""",
                    filler_user,
                    chunk,
                )
                remaining -= chunk
            await conn.execute("ANALYZE memories; ANALYZE session_coordination")
            have = size
        await checkpoint(conn)
        m = wrk(sb.port, "/", 1, mode.growth_window_s, mem)
        s = wrk(sb.port, "/", 1, mode.growth_window_s, sess)
        out[f"{size:,} rows"] = {
            "memories by session p50 ms": m["p50_ms"],
            "p99 ms": m["p99_ms"],
            "user sessions p50 ms": s["p50_ms"],
            "p99 ms (sessions)": s["p99_ms"],
        }
    plan = await conn.fetch(
        "EXPLAIN SELECT m.* FROM memories m WHERE m.session_id = $1 AND (m.created_at, m.memory_id) < ('infinity', 'ffffffff-ffff-ffff-ffff-ffffffffffff') ORDER BY m.created_at DESC, m.memory_id DESC LIMIT 51",
        probe,
    )
    out["plan (memories by session)"] = [r[0] for r in plan]
    await conn.close()
    return out


def machine(url: str) -> dict[str, Any]:
    version = asyncio.run(_pg_version(url))
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "postgresql": version,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


async def _pg_version(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        return str(await conn.fetchval("SHOW server_version"))
    finally:
        await conn.close()


def http_tables(http: dict[str, Any]) -> list[str]:
    """The HTTP part's tables: paths against the ceiling, the floor and their own floors."""
    lines: list[str] = []
    for conns, rows in http.items():
        if not conns.endswith("connections"):
            continue
        lines += [
            f"**HTTP, {conns}**",
            "",
            "| path | req/s | ratio to ceiling | ratio to floor | ratio to own floor | p50 ms "
            "| p99 ms | errors |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, row in rows.items():
            if name == "rss_mib":
                continue
            lines.append(
                f"| {name} | {row['rps']} | {row['ratio']} | {row.get('to_floor', '')} "
                f"| {row.get('ratio_to_own_floor', '')} "
                f"| {row['p50_ms']} | {row['p99_ms']} | {row['errors']} |"
            )
        lines += ["", f"Server RSS after the run: {rows['rss_mib']} MiB", ""]
        lines += own_floor_table(conns, rows)
    for name, top in http.get("profiles", {}).items():
        if not isinstance(top, dict):
            continue
        lines += [f"**CPU profile, {name}** ({top['samples']} samples, {top['file']})", ""]
        lines += ["| self % | function | self % | component |", "|---|---|---|---|"]
        for own, incl in zip(top["self %"], top["components %"], strict=False):
            lines.append(f"| {own[1]} | {own[0]} | {incl[1]} | {incl[0]} |")
        lines.append("")
    return lines


def own_floor_table(conns: str, rows: dict[str, Any]) -> list[str]:
    """Each path's own floor (its captured SQL replayed by the bare app) next to it."""
    lines = [
        f"**Own floors, {conns}** (the path's SQL replayed by bare Litestar + asyncpg)",
        "",
        "| path | statements / round trips | own floor req/s | p50 ms | p99 ms | errors "
        "| path req/s | ratio to own floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        own = row.get("own_floor") if isinstance(row, dict) else None
        if own is None:
            continue
        if "unavailable" in own:
            lines.append(f"| {name} | {own['unavailable']} | | | | | {row['rps']} | |")
            continue
        lines.append(
            f"| {name} | {own['statements']} / {own['round_trips']} | {own['rps']} "
            f"| {own['p50_ms']} | {own['p99_ms']} | {own['errors']} | {row['rps']} "
            f"| {row['ratio_to_own_floor']} |"
        )
    return [*lines, ""]


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"Run {result['started_at']} ({result['mode']}); machine: {json.dumps(result['machine'])}",
        "",
    ]
    lines += http_tables(result["http"])
    lines += new_paths.markdown(result)
    lines += ["**Database ceiling**", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["database"].items()]
    lines += ["", "**CPU paths**", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["cpu"].items()]
    lines += ["", "**Cleanup at scale**", "", "| measure | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in result["cleanup"].items()]
    lines += [
        "",
        "**Growth**",
        "",
        "| rows | memories by session p50/p99 ms | user sessions p50/p99 ms |",
        "|---|---|---|",
    ]
    for k, v in result["growth"].items():
        if k.startswith("plan"):
            continue
        lines.append(
            f"| {k} | {v['memories by session p50 ms']} / {v['p99 ms']} | {v['user sessions p50 ms']} / {v['p99 ms (sessions)']} |"
        )
    lines += [
        "",
        "Plan (memories by session, largest size):",
        "",
        "```",
        *result["growth"]["plan (memories by session)"],
        "```",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--only",
        action="append",
        choices=["http", "database", "cpu", "cleanup", "growth", "streams", "workers", "outbox"],
        help="run only this part (repeatable); printed, not written to bench/results",
    )
    parser.add_argument(
        "--path",
        action="append",
        help="with --only http: measure only the paths whose name contains this (repeatable)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="with http: py-spy profiles of the write paths under load (bench/profiles/)",
    )
    args = parser.parse_args()
    if args.path and args.only != ["http"]:
        parser.error("--path needs --only http")
    if not shutil.which("wrk"):
        sys.exit("wrk is missing: sudo apt-get install wrk (Debian/Ubuntu)")
    mode = QUICK if args.quick else FULL
    server = os.environ.get("SWITCHBOARD_BENCH_DATABASE_URL") or dbutil.server_url()
    name = dbutil.unique_name("sbbench")
    asyncio.run(dbutil.create_database(server, name))
    url = dbutil.with_database(server, name)
    started = datetime.now(UTC)
    # Everything started is stopped, and the database dropped, whatever fails (a server that
    # does not start, a stop that raises): an ExitStack runs every callback, last first.
    with tempfile.TemporaryDirectory() as tmp_dir, contextlib.ExitStack() as cleanup:
        cleanup.callback(lambda: asyncio.run(dbutil.drop_database(server, name)))
        tmp = Path(tmp_dir)
        plans_file = tmp / "floors.pickle"
        upgrade(url)
        seed = asyncio.run(_seed(url))
        # The benchmark is one key sending thousands of requests a second: no rate limit.
        env = {
            "SWITCHBOARD_DATABASE_URL": url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN,
            "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
            # The messages row measures the fallback path: with the shipped limits its
            # 400 sessions escalate after a few fallbacks in a row and every later
            # message is a 409, which is not what the row names.
            "SWITCHBOARD_COORDINATION_MAX_STEP_RETRIES": "1000",
            "SWITCHBOARD_COORDINATION_MAX_CONSECUTIVE_FALLBACKS": "1000",
            **new_paths.ENV,
        }
        added = new_paths.NewPaths()  # the fast agent, before the server that calls it
        cleanup.callback(added.stop)
        sb = Server("switchboard", env)
        cleanup.callback(sb.stop)
        ceiling = Server(
            "ceiling", {"CEILING_DATABASE_URL": url, "CEILING_FLOOR_PLANS": str(plans_file)}
        )
        cleanup.callback(ceiling.stop)
        key = _prepare_client(sb.port)
        added.prepare(url, sb.port, ADMIN)
        # Issue 22's paths (bench/new_paths.py) bring wrk scripts of their own: an agent
        # call or a merge loop that a captured SQL replay would not stand for.
        every: dict[str, HttpPath | Path] = {**http_scripts(seed), **added.scripts(tmp, key)}
        routes = {
            name: route
            for name, route in every.items()
            if not args.path or any(p in name for p in args.path)
        }
        run(
            args,
            mode,
            url,
            env,
            sb,
            ceiling,
            added,
            routes,
            plans_file,
            seed,
            tmp,
            key,
            started,
        )


def run(
    args: argparse.Namespace,
    mode: Mode,
    url: str,
    env: dict[str, str],
    sb: Server,
    ceiling: Server,
    added: new_paths.NewPaths,
    routes: dict[str, HttpPath | Path],
    plans_file: Path,
    seed: dict[str, list[str]],
    tmp: Path,
    key: str,
    started: datetime,
) -> None:
    """The chosen parts of a run; a whole run is written to bench/results."""

    def http() -> dict[str, Any]:
        plans = capture_floors(url, env, routes, key, plans_file)
        measured = http_paths(url, sb, ceiling, routes, plans, seed, mode, tmp, key)
        measured["own floor plans"] = {
            name: plan if isinstance(plan, str) else plan.describe() for name, plan in plans.items()
        }
        if args.profile:
            measured["profiles"] = profile_writes(url, sb, routes, mode, tmp, key, started)
        return measured

    measures: dict[str, Callable[[], Any]] = {
        "http": http,
        "database": lambda: asyncio.run(database_ceiling(url, seed, mode.database_s)),
        "cpu": lambda: asyncio.run(cpu_paths(url)),
        "cleanup": lambda: asyncio.run(cleanup_at_scale(url, mode, sb, tmp, seed, key)),
        "growth": lambda: asyncio.run(growth(url, mode, sb, tmp, key)),
        # 1,000 SSE streams on one worker while session writes go on (its own
        # server process: it needs the per-key stream limit raised).
        "streams": lambda: event_streams.measure(
            url, 1000 if mode is FULL else 200, mode.window_s, 50
        ),
        # 1 and 2 worker processes, and the ceiling and floor served the same way.
        "workers": lambda: workers.measure(
            url,
            env,
            {
                name: http_scripts(seed)[name].lua(tmp, f"{slug}-workers", key)
                for name, slug in paths.slugs(http_scripts(seed)).items()
                if name in ("GET /v1/sessions/{id}", "POST /v1/memories (1 KiB)")
            },
            lua(
                "floor",
                lua_list("ids", seed["sessions"])
                + 'request = function() return wrk.format("GET", "/one-query/" .. ids[math.random(#ids)]) end\n',
                tmp,
                key,
            ),
            mode.connections[0],
            mode.warmup_s,
            mode.window_s,
            wrk,
            settle,
        ),
        # PATCH session with and without its outbox event, alternating.
        "outbox": lambda: added.outbox(
            url,
            sb.port,
            lambda script, seconds: wrk(sb.port, "/", 16, seconds, script),
            tmp,
            key,
            4 if mode is FULL else 2,
            mode.window_s,
        ),
    }
    result: dict[str, Any] = {
        "started_at": started.isoformat(timespec="seconds"),
        "mode": mode.name,
        "settings": asdict(mode),
        "machine": machine(url),
    }
    out = ROOT / "bench" / "results" / f"{started:%Y-%m-%d}{'-quick' if args.quick else ''}.json"
    if not args.quick and out.exists():
        # A second record on one day is named by its start time: it must not overwrite
        # the first, which the docs may quote.
        out = out.with_name(f"{started:%Y-%m-%dT%H-%M}.json")
    partial = out.with_suffix(".partial.json")
    failed: list[str] = []
    for part in args.only or list(measures):
        if args.only:
            result[part] = measures[part]()
            continue
        # A whole run takes most of an hour: one part's failure must not lose the others.
        # Each part's result goes to the partial file as soon as it is measured; a part that
        # fails is recorded as failed, and the run goes on to the next.
        try:
            result[part] = measures[part]()
        except Exception as exc:
            failed.append(part)
            result[part] = {"failed": f"{type(exc).__name__}: {exc}"}
            print(f"bench: the {part} part failed; going on", file=sys.stderr)
            traceback.print_exc()
        partial.write_text(json.dumps(result, indent=2) + "\n")
    if failed:
        # Not a record: a record holds every part. What was measured stays in the partial
        # file (ignored by git) for reading.
        sys.exit(f"bench: failed: {', '.join(failed)}; what was measured is in {partial}")
    if args.only:
        # A partial run is for finding bottlenecks; only whole runs are recorded.
        print(json.dumps(result, indent=2))
        if "http" in result:
            print("\n".join(http_tables(result["http"])))
        return
    db = result["database"]
    http16 = result["http"]["16 connections"]
    db["switchboard GET session / raw select"] = round(
        http16["GET /v1/sessions/{id}"]["rps"] / db["raw selects/s"], 3
    )
    db["switchboard POST memory / raw insert"] = round(
        http16["POST /v1/memories (1 KiB)"]["rps"] / db["raw inserts/s"], 3
    )
    out.write_text(json.dumps(result, indent=2) + "\n")
    partial.unlink(missing_ok=True)
    print(markdown(result))
    print(f"\nwritten: {out.relative_to(ROOT)}")


async def _seed(url: str) -> dict[str, list[str]]:
    conn = await asyncpg.connect(url)
    try:
        return await seed_http(conn, 200, 5)
    finally:
        await conn.close()


def _prepare_client(port: int) -> str:
    """Open the educator's breaker (the messages path is measured on the rule-based
    fallback, no network) and register the client the benchmark speaks as: an agent key,
    as n8n and the agents use, not the admin key (which skips the key lookup)."""
    headers = {"Authorization": f"Bearer {ADMIN}"}
    base = f"http://127.0.0.1:{port}"
    httpx.patch(
        f"{base}/v1/agents/Educate_Customer_Agent",
        # A documentation address (TEST-NET-1): the outbound policy accepts it, and the
        # open breaker means it is never called.
        json={"url": "http://192.0.2.1:9/none"},
        headers=headers,
    ).raise_for_status()
    httpx.post(
        f"{base}/v1/agents/Educate_Customer_Agent/breaker", json={"state": "open"}, headers=headers
    ).raise_for_status()
    created = httpx.post(
        f"{base}/v1/agents",
        json={"name": "Orchestrator_Agent", "roles": ["coordination_manager"]},
        headers=headers,
    )
    created.raise_for_status()
    key: str = created.json()["api_key"]
    return key


if __name__ == "__main__":
    main()
