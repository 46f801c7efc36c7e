"""The benchmark's new paths (issue 22) against a real server process, a real fast agent
and real wrk: what wrk's scripts count is what the database shows happened, and the
outbox A/B really writes events in one variant and none in the other."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from bench import a2a_send, auto_merge, message_task, outbox_cost, wrk_scripts
from bench.fast_agent import ANSWER, FastAgent, content_length
from bench.paths import HttpPath, Unique
from bench.run import wrk
from bench.serve import spawn
from tests import dbutil
from tests.conftest import ADMIN_KEY

pytestmark = pytest.mark.skipif(shutil.which("wrk") is None, reason="needs wrk")
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass
class Bench:
    port: int
    database_url: str
    key: str
    agent: FastAgent


@pytest.fixture(scope="module")
def bench(server_url: str, template_database: str) -> Iterator[Bench]:
    """Switchboard served as the benchmark serves it, with the fast agent as Make_Plan_Agent
    and an agent key (coordination_manager) as the benchmark's client."""
    name = dbutil.unique_name("sbtest_benchpaths")
    asyncio.run(dbutil.create_database(server_url, name, template=template_database))
    url = dbutil.with_database(server_url, name)
    agent = FastAgent()
    process, port = spawn(
        "switchboard",
        {
            "SWITCHBOARD_DATABASE_URL": url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
            "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",
            "SWITCHBOARD_DATABASE_POOL_MAX_SIZE": "5",
        },
    )
    try:
        base = f"http://127.0.0.1:{port}"
        httpx.patch(
            f"{base}/v1/agents/{message_task.AGENT}", json={"url": agent.url}, headers=ADMIN
        ).raise_for_status()
        created = httpx.post(
            f"{base}/v1/agents",
            json={"name": "Orchestrator_Agent", "roles": ["coordination_manager"]},
            headers=ADMIN,
        )
        created.raise_for_status()
        yield Bench(port, url, created.json()["api_key"], agent)
    finally:
        process.terminate()
        process.wait(timeout=30)
        agent.stop()
        asyncio.run(dbutil.drop_database(server_url, name))


async def sessions(bench: Bench, count: int) -> list[str]:
    conn = await asyncpg.connect(bench.database_url)
    try:
        return await message_task.sessions_of_their_own(conn, count)
    finally:
        await conn.close()


async def fetchval(bench: Bench, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(bench.database_url)
    try:
        return await conn.fetchval(query, *args)
    finally:
        await conn.close()


async def run_wrk(bench: Bench, script: Path, connections: int = 2) -> dict[str, Any]:
    return await asyncio.to_thread(wrk, bench.port, "/", connections, 1, script)


def test_the_fast_agent_answers_each_request_of_a_kept_alive_connection() -> None:
    agent = FastAgent(cpu=None)
    try:
        with httpx.Client() as client:
            for body in ({"request_id": "1", "input": "x" * 5000}, {}):
                answer = client.post(agent.url, json=body)
                assert answer.status_code == 200
                assert answer.json() == {
                    "success": True,
                    "output_data": {"response": "Here is your plan"},
                }
            assert client.get(agent.url).status_code == 200  # no body at all
    finally:
        agent.stop()
    assert content_length(b"POST / HTTP/1.1\r\nContent-Length: 12\r\nHost: x") == 12
    assert content_length(b"GET / HTTP/1.1\r\nHost: x") == 0
    assert ANSWER.endswith(b'Here is your plan"}}')


async def test_messages_counted_as_answered_were_answered_by_the_agents_tasks(
    bench: Bench, tmp_path: Path
) -> None:
    ids = await sessions(bench, 20)
    figures = await run_wrk(bench, message_task.script(ids, tmp_path, bench.key))
    answered = figures["counts"].get("agent answered", 0)
    assert answered > 0, figures
    assert figures["counts"] == {"agent answered": answered}
    assert figures["errors"] == 0
    completed = await fetchval(
        bench,
        "SELECT count(*) FROM agent_tasks WHERE status = 'completed' AND kind = 'message'"
        " AND session_id = ANY($1::uuid[])",
        ids,
    )
    # Requests still in flight when wrk stopped completed their tasks but were not counted.
    assert answered <= completed <= answered + 2


async def test_an_a2a_send_message_is_counted_as_a_completed_task(
    bench: Bench, tmp_path: Path
) -> None:
    ids = await sessions(bench, 20)
    figures = await run_wrk(bench, a2a_send.script(ids, tmp_path, bench.key))
    completed = figures["counts"].get("completed task", 0)
    assert completed > 0, figures
    assert figures["counts"] == {"completed task": completed}
    tasks = await fetchval(
        bench,
        "SELECT count(*) FROM agent_tasks WHERE status = 'completed'"
        " AND session_id = ANY($1::uuid[])",
        ids,
    )
    assert completed <= tasks <= completed + 2


async def test_auto_merged_writes_are_counted_as_the_versions_show(
    bench: Bench, tmp_path: Path
) -> None:
    ids = await sessions(bench, 2)
    figures = await run_wrk(bench, auto_merge.script(ids, tmp_path, bench.key), connections=4)
    counts = figures["counts"]
    assert set(counts) <= {"merged", "written plainly", "conflict (409)"}, counts
    assert counts.get("merged", 0) > 0, counts
    assert figures["errors"] == counts.get("conflict (409)", 0)
    merged = await fetchval(
        bench,
        "SELECT count(*) FROM session_state_versions"
        " WHERE session_id = ANY($1::uuid[]) AND merge_base IS NOT NULL",
        ids,
    )
    assert counts["merged"] <= merged <= counts["merged"] + 4
    assert wrk_scripts.share(counts, "merged") == round(counts["merged"] / sum(counts.values()), 3)


async def test_the_outbox_ab_writes_events_in_one_variant_only(
    bench: Bench, tmp_path: Path
) -> None:
    ids = await sessions(bench, 10)
    quiet = (await sessions(bench, 1))[0]
    result = await outbox_cost.measure(
        bench.database_url,
        bench.port,
        lambda script, seconds: wrk(bench.port, "/", 2, seconds, script),
        ids,
        quiet,
        outbox_cost.script(ids, tmp_path, bench.key),
        bench.key,
        rounds=1,
        seconds=1,
    )
    assert result["without events"]["events written"] == 0
    with_events = result["with events"]
    assert with_events["events written"] >= with_events["windows"][0]["rps"] * 0.5
    # The trigger is on again afterwards.
    enabled = await fetchval(
        bench,
        "SELECT tgenabled::text FROM pg_trigger WHERE tgname = $1",
        outbox_cost.TRIGGER,
    )
    assert enabled == "O"


def test_the_outbox_ab_alternates_and_prices_the_difference() -> None:
    a, b = "with events", "without events"
    assert outbox_cost.order(2) == [a, b, b, a]
    cost = outbox_cost.cost(
        [{"rps": 500.0, "p50_ms": 12.0}, {"rps": 400.0, "p50_ms": 14.0}, {"rps": 1.0, "p50_ms": 9}],
        [
            {"rps": 1000.0, "p50_ms": 10.5},
            {"rps": 500.0, "p50_ms": 13.0},
            {"rps": 1.0, "p50_ms": 9},
        ],
    )
    # Round by round, then the median: 1,000 µs, 500 µs and 0 µs added; 1.5, 1 and 0 ms.
    assert cost == {
        "server µs per write added": 500.0,
        "p50 ms added": 1.0,
        "req/s with / without": 0.8,
        "req/s with / without, per round": [0.5, 0.8, 1.0],
    }
    assert wrk_scripts.share({}, "merged") is None


def test_a_unique_value_is_never_sent_again_by_a_later_wrk_run(tmp_path: Path) -> None:
    """Each wrk run restarts the script's counter and wrk never seeds math.random: the
    idempotency keys of a warm-up came again in the measured window (and those of 16
    connections at 64), so the webhook row measured replays and refusals."""
    seen: list[list[str]] = []

    class Keys(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen[-1].append(self.headers["Idempotency-Key"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        path = HttpPath("POST", "/keys", (Unique("key", "k"),), "{}", {"Idempotency-Key": "${key}"})
        script = path.lua(tmp_path, "keys", "secret")
        for _ in range(2):
            seen.append([])
            wrk(server.server_port, "/", 2, 1, script)
    finally:
        server.shutdown()
        server.server_close()
    first, second = seen
    assert first
    assert second
    assert len(set(first)) == len(first)
    assert not set(first) & set(second)
