"""Drill: SIGKILL the server during n8n memory webhook writes with Idempotency-Keys.

Sixteen writers send memory writes through /webhooks/n8n/memory, each under a key of its
own, and retry each key until it succeeds (every 50 ms, as fast as a client could), as
n8n's Retry On Fail does. A coordination call whose agent hangs holds one more key. After
3 s the server is SIGKILLed and started again. Expectations: the keys in progress at the
kill are free within the renewal grace (2.5 s) of the kill (no 409 after that: no waiting
out a lease or a timeout), every key ends with exactly one memory row (none written twice,
none lost), the hanging call's retry runs once the grace has passed, and no memory write
is in progress at the kill (each claims its key, writes and stores its answer in one
statement): the writes the kill cut are answered after the restart, by a replay if their
statement had committed.

Runs against its own embedded PostgreSQL in a temporary folder; bounded to
about 30 s; talks only to 127.0.0.1.
    .venv/bin/python -m drills.kill_during_webhook_writes
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from app.webhooks.idempotency import RENEWAL_GRACE  # noqa: E402
from bench.serve import spawn  # noqa: E402
from tests.agent_server import AgentServer  # noqa: E402

ADMIN = "drill-admin-key-0123456789abcdef"
WRITERS = 16
KILL_AT, AFTER_RESTART = 3.0, 4.0
RETRY_EVERY = 0.05
SLOW_KEY = "drill-slow-coordination"
MESSAGE = {"user_ref": "drill:1", "text": "make me a budget"}


@dataclass
class Log:
    """What the clients saw."""

    acked: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)


async def writer(
    base: str, user_id: str, index: int, log: Log, stop_at: list[float], give_up: float
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as client:
        n = 0
        while time.monotonic() < stop_at[0]:
            key = f"drill-{index}-{n}"
            body = {
                "user_id": user_id,
                "agent_name": "Collect_Create_Data_Agent",
                "memory_type": "data_collection",
                "memory_content": {"drill_key": key, "n": n},
            }
            while time.monotonic() < give_up:
                started = time.monotonic()
                try:
                    response = await client.post(
                        "/webhooks/n8n/memory", json=body, headers={"Idempotency-Key": key}
                    )
                    status = response.status_code
                except httpx.HTTPError as exc:
                    status, response = 0, None
                    error = type(exc).__name__
                else:
                    error = None
                log.attempts.append(
                    {
                        "key": key,
                        "at": started,
                        "done": time.monotonic(),
                        "status": status,
                        "error": error,
                    }
                )
                if response is not None and status == 200:
                    log.acked[key] = {
                        "at": time.monotonic(),
                        "memory_id": response.json()["memory"]["memory_id"],
                        "replayed": response.headers.get("idempotent-replayed") == "true",
                    }
                    break
                await asyncio.sleep(RETRY_EVERY)
            n += 1


async def presence_gone_after(conn: asyncpg.Connection, owner: str, killed: float) -> float:
    """Seconds from the kill until PostgreSQL no longer sees the replica's presence lock."""
    while await conn.fetchval("SELECT replica_is_present($1)", owner):
        if time.monotonic() - killed > 30:
            return float("inf")
    return time.monotonic() - killed


async def drill() -> dict[str, Any]:
    from app.db.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory() as tmp:
        server = EmbeddedPostgres(Path(tmp))
        url = server.start()
        await asyncio.to_thread(upgrade, url)
        port = 19000 + os.getpid() % 1000
        env = {
            "SWITCHBOARD_DATABASE_URL": url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN,
            "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
            "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",  # the hanging agent
        }
        base = f"http://127.0.0.1:{port}"
        agent = await AgentServer(behaviour="hang").start()
        app = await asyncio.to_thread(spawn, "switchboard", port, env)
        conn = await asyncpg.connect(url)
        headers = {"Authorization": f"Bearer {ADMIN}"}
        try:
            async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as admin:
                user_id = (await admin.post("/v1/users", json={})).json()["id"]
                patched = await admin.patch(
                    "/v1/agents/Make_Plan_Agent",
                    json={"url": agent.url, "timeout_ms": 60000, "retry_attempts": 0},
                )
                assert patched.status_code == 200, patched.text
            log = Log()
            t0 = time.monotonic()
            stop_at = [t0 + 600.0]  # set once the restart is done
            give_up = t0 + 60.0
            writers = [
                asyncio.create_task(writer(base, user_id, i, log, stop_at, give_up))
                for i in range(WRITERS)
            ]
            slow_client = httpx.AsyncClient(base_url=base, headers=headers, timeout=60)
            slow = asyncio.create_task(
                slow_client.post(
                    "/webhooks/n8n/coordination",
                    json=MESSAGE,
                    headers={"Idempotency-Key": SLOW_KEY},
                )
            )
            await asyncio.sleep(KILL_AT)
            assert agent.requests, "the slow call never reached its agent"
            owner = await conn.fetchval(
                "SELECT lease_owner FROM idempotency_keys WHERE key = $1", SLOW_KEY
            )
            os.kill(app.pid, signal.SIGKILL)
            killed = time.monotonic()
            presence_gone = await presence_gone_after(conn, owner, killed)
            app.wait()
            in_progress = [
                r["key"]
                for r in await conn.fetch(
                    "SELECT key FROM idempotency_keys WHERE status = 'in_progress' AND key <> $1",
                    SLOW_KEY,
                )
            ]
            written_while_in_progress = await conn.fetchval(
                "SELECT count(*) FROM memories WHERE content->>'drill_key' = ANY($1::text[])",
                in_progress,
            )
            with_answer_at_kill = await conn.fetchval(
                "SELECT count(*) FROM idempotency_keys WHERE status = 'completed'"
            )
            app = await asyncio.to_thread(spawn, "switchboard", port, env)
            ready = time.monotonic()
            stop_at[0] = ready + AFTER_RESTART

            agent.behaviour = "ok"
            slow_attempts: list[int] = []
            slow_done: float | None = None
            async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as retry:
                while time.monotonic() < ready + 30:
                    response = await retry.post(
                        "/webhooks/n8n/coordination",
                        json=MESSAGE,
                        headers={"Idempotency-Key": SLOW_KEY},
                    )
                    slow_attempts.append(response.status_code)
                    if response.status_code == 200:
                        slow_done = time.monotonic()
                        break
                    await asyncio.sleep(RETRY_EVERY)
            await asyncio.gather(*writers)
            with contextlib.suppress(httpx.HTTPError):
                await slow  # cut by the kill
            await slow_client.aclose()
            rows = {
                r["k"]: r["n"]
                for r in await conn.fetch(
                    "SELECT content->>'drill_key' AS k, count(*) AS n FROM memories"
                    " WHERE content ? 'drill_key' GROUP BY 1"
                )
            }
            keys_left_in_progress = await conn.fetchval(
                "SELECT count(*) FROM idempotency_keys WHERE status = 'in_progress'"
            )
        finally:
            app.terminate()
            app.wait(timeout=10)
            await conn.close()
            await agent.stop()
            server.stop()

    # Answers from the restarted server: attempts that started after the kill and got one.
    after = [a for a in log.attempts if a["at"] > killed and a["status"] != 0]
    back = min((a["done"] for a in after), default=float("inf"))
    in_flight_done = [log.acked[k]["at"] - back for k in in_progress if k in log.acked]
    keys = {a["key"] for a in log.attempts}
    # Writes the kill cut (sent before it, never answered): each writes its memory in one
    # statement with its key's claim and answer, so none is left in progress; those that
    # committed before the kill are replayed to their retry, the others run again.
    cut = {a["key"] for a in log.attempts if a["at"] <= killed and a["status"] == 0}
    return {
        "writers": WRITERS,
        "keys": len(keys),
        "keys_acknowledged": len(log.acked),
        "keys_with_one_row": sum(1 for k in log.acked if rows.get(k) == 1),
        "keys_with_two_or_more_rows": sum(1 for n in rows.values() if n > 1),
        "rows_for_unacknowledged_keys": sum(n for k, n in rows.items() if k not in log.acked),
        "answered_keys_at_kill": with_answer_at_kill,
        "writes_cut_by_kill": len(cut),
        "writes_cut_by_kill_acknowledged": sum(1 for k in cut if k in log.acked),
        "writes_cut_by_kill_replayed": sum(1 for k in cut if log.acked.get(k, {}).get("replayed")),
        "writes_cut_by_kill_done_after_kill_s": round(
            max((log.acked[k]["at"] - killed for k in cut if k in log.acked), default=0), 2
        ),
        "writes_in_progress_at_kill": len(in_progress),
        "memory_rows_of_writes_in_progress_at_kill": written_while_in_progress,
        "presence_lock_gone_after_kill_ms": round(presence_gone * 1000, 1),
        "first_answer_after_kill_s": round(back - killed, 2),
        "failed_attempts_while_down": sum(
            1 for a in log.attempts if a["at"] > killed and a["status"] == 0
        ),
        "answers_after_restart": {
            str(s): sum(1 for a in after if a["status"] == s)
            for s in sorted({a["status"] for a in after})
        },
        "replayed_after_restart": sum(
            1 for k, a in log.acked.items() if a["replayed"] and a["at"] > killed
        ),
        "writes_in_progress_at_kill_done_within_s_of_restart": round(
            max(in_flight_done, default=0.0), 3
        ),
        "writes_in_progress_at_kill_acknowledged": len(in_flight_done),
        "last_409_after_kill_s": round(
            max((a["done"] - killed for a in after if a["status"] == 409), default=0.0), 2
        ),
        "writes_in_progress_at_kill_done_after_kill_s": round(
            max((log.acked[k]["at"] - killed for k in in_progress if k in log.acked), default=0),
            2,
        ),
        "slow_call_retry_statuses": sorted(set(slow_attempts)),
        "slow_call_done_after_kill_s": (
            round(slow_done - killed, 3) if slow_done is not None else None
        ),
        "keys_left_in_progress": keys_left_in_progress,
    }


def main() -> None:
    result = asyncio.run(drill())
    print(json.dumps(result, indent=2))
    grace = RENEWAL_GRACE.total_seconds()
    restart = result["first_answer_after_kill_s"]
    ok = (
        result["keys"] == result["keys_acknowledged"]
        and result["keys_with_one_row"] == result["keys_acknowledged"]
        and result["keys_with_two_or_more_rows"] == 0
        and result["rows_for_unacknowledged_keys"] == 0
        and result["writes_cut_by_kill"] > 0  # the kill hit writes mid-way
        and result["writes_cut_by_kill_acknowledged"] == result["writes_cut_by_kill"]
        and result["writes_cut_by_kill_done_after_kill_s"] <= max(grace, restart) + 1.0
        # A memory write claims its key in its own statement: never left in progress.
        and result["writes_in_progress_at_kill"] == 0
        and result["memory_rows_of_writes_in_progress_at_kill"] == 0
        and result["writes_in_progress_at_kill_acknowledged"]
        == result["writes_in_progress_at_kill"]
        and result["presence_lock_gone_after_kill_ms"] < 1000
        # A 409 only while the dead claims were still within their renewal grace.
        and result["last_409_after_kill_s"] <= grace + 0.5
        and set(result["slow_call_retry_statuses"]) <= {200, 409}
        and (result["slow_call_done_after_kill_s"] or 99) <= max(grace, restart) + 1.0
        and result["writes_in_progress_at_kill_done_after_kill_s"] <= max(grace, restart) + 1.0
        and result["keys_left_in_progress"] == 0
    )
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
