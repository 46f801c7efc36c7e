"""What the outbox event of every session write costs: PATCH session with and without its
``session.version`` event, A/B in one run (the ``outbox`` part of ``bench/run.py``).

Every new session version is told by a statement trigger (``session_state_versions_told``,
sql/schema.sql): an INSERT into ``outbox_events``, whose own trigger fans it out to the
subscriptions that want it (none here) and announces it (no NOTIFY in the writing
transaction since revision 0030: the writer wakes its own hub after the commit and sends
one coalesced NOTIFY off the request path, app/db/announce.py); a process that serves event
streams then numbers it (``outbox_sequence()``, a transaction under an advisory lock) and
reads it. The benchmark holds one event stream open (on a session nobody writes), so the
server's hub runs and numbers, as on a replica that serves streams, and alternates
windows of the PATCH path with the trigger enabled and disabled (``ALTER TABLE ... DISABLE
TRIGGER`` on the benchmark's own database: no switch in the service), ABAB then BABA.
Each window counts the ``session.version`` events written during it, so a variant that
did not do what it says shows. The cost is priced round by round (each round's two
windows are seconds apart), then the median taken. The trigger is enabled again whatever happens.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg

from bench import event_streams, wrk_scripts

TRIGGER = "session_state_versions_told"
SET_TRIGGER = {
    "with events": f"ALTER TABLE session_state_versions ENABLE TRIGGER {TRIGGER}",
    "without events": f"ALTER TABLE session_state_versions DISABLE TRIGGER {TRIGGER}",
}


def script(sessions: list[str], directory: Path, key: str) -> Path:
    """The PATCH of run.py's HTTP list (If-Match: *), on sessions of this part's own."""
    return wrk_scripts.file(
        "outbox_patch",
        wrk_scripts.lua_list("ids", sessions) + 'wrk.headers["If-Match"] = "*"\n'
        'request = function() return wrk.format("PATCH", "/v1/sessions/" .. ids[math.random(#ids)], nil,'
        ' \'{"session_state": {"agent_outputs": {"bench": \' .. math.random(1000000) .. \'}}}\') end\n',
        directory,
        key,
    )


def order(rounds: int) -> list[str]:
    """The variants' order over ``rounds``: ABAB... then BABA... (each first as often)."""
    a, b = SET_TRIGGER
    return [v for r in range(rounds) for v in ((a, b) if r % 2 == 0 else (b, a))]


def summary(windows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median req/s, p50 and p99 of a variant's windows, and every window's figures."""
    return {
        "rps": round(statistics.median(w["rps"] for w in windows), 1),
        "p50_ms": round(statistics.median(w["p50_ms"] for w in windows), 2),
        "p99_ms": round(statistics.median(w["p99_ms"] for w in windows), 2),
        "events written": sum(w["events"] for w in windows),
        "windows": windows,
    }


def cost(with_events: list[dict[str, Any]], without: list[dict[str, Any]]) -> dict[str, Any]:
    """What the events add per write, from each round's pair of windows (the two variants
    minutes apart share the host's load; the windows of different rounds often do not):
    the median over rounds of the server time added (1/req/s at saturation), of the p50
    added and of the throughput kept, and the rounds' throughput ratios."""
    pairs = list(zip(with_events, without, strict=True))
    ratios = [round(a["rps"] / b["rps"], 3) for a, b in pairs]
    return {
        "server µs per write added": round(
            statistics.median(1e6 / a["rps"] - 1e6 / b["rps"] for a, b in pairs), 1
        ),
        "p50 ms added": round(statistics.median(a["p50_ms"] - b["p50_ms"] for a, b in pairs), 2),
        "req/s with / without": round(statistics.median(ratios), 3),
        "req/s with / without, per round": ratios,
    }


async def measure(
    url: str,
    port: int,
    window: Callable[[Path, int], dict[str, Any]],
    sessions: list[str],
    quiet_session: str,
    script_path: Path,
    key: str,
    rounds: int,
    seconds: int,
) -> dict[str, Any]:
    """Alternate the variants ``rounds`` times each; ``window(script, seconds)`` is one wrk
    run (a warm-up of 1 s comes first). The stream is opened with ``key``."""
    runs: dict[str, list[dict[str, Any]]] = {variant: [] for variant in SET_TRIGGER}
    conn = await asyncpg.connect(url)
    stream = event_streams.StreamClient(port, quiet_session, [], key)
    try:
        await stream.open()  # the hub starts: it LISTENs and numbers every event from now on
        for variant in order(rounds):
            await conn.execute(SET_TRIGGER[variant])
            with contextlib.suppress(asyncpg.InsufficientPrivilegeError):
                await conn.execute("CHECKPOINT")
            await asyncio.to_thread(window, script_path, 1)
            before = await conn.fetchval(COUNT_EVENTS)
            figures = await asyncio.to_thread(window, script_path, seconds)
            figures["events"] = await conn.fetchval(COUNT_EVENTS) - before
            runs[variant].append(figures)
    finally:
        await conn.execute(SET_TRIGGER["with events"])
        await stream.close()
        await conn.close()
    out = {variant: summary(windows) for variant, windows in runs.items()}
    out["cost"] = cost(runs["with events"], runs["without events"])
    out["sessions"] = len(sessions)
    return out


COUNT_EVENTS = "SELECT count(*) FROM outbox_events WHERE event_type = 'session.version'"
