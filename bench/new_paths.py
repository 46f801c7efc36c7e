"""The paths issue 22 added to ``make bench``, wired in one place for ``bench/run.py``.

- three HTTP paths of the normal list (wrk, each with its ceiling ratio and floor):
  a message through a durable task with a fast local agent (``bench/message_task.py``),
  an A2A ``SendMessage`` (``bench/a2a_send.py``) and auto-merged writes
  (``bench/auto_merge.py``); their answers are counted by kind (``bench/wrk_scripts.py``);
- the outbox events' cost, A/B (``bench/outbox_cost.py``, the ``outbox`` part);
- the SSE commit-to-client latency (``bench/event_streams.py``, the ``streams`` part) is
  printed with them.

The fast agent (``bench/fast_agent.py``) runs for the whole run on CPU 1, and the server
under test may call 127.0.0.1 (``ENV``), as Switchboard beside a local n8n is run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from bench import a2a_send, auto_merge, message_task, outbox_cost, wrk_scripts
from bench.fast_agent import FastAgent

ENV = {"SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true"}
# Sessions of each path's own: messages grow theirs, so they are spread over many.
SESSIONS = {"message": 2000, "a2a": 2000, "merge": auto_merge.SESSIONS, "outbox": 200}


class NewPaths:
    """The fast agent, the sessions of each new path, their wrk scripts and tables."""

    def __init__(self) -> None:
        self.agent = FastAgent(cpu=1)
        self.sessions: dict[str, list[str]] = {}

    def prepare(self, url: str, port: int, admin: str) -> None:
        """Route the message paths' agent to the fast agent; seed each path's sessions."""
        httpx.patch(
            f"http://127.0.0.1:{port}/v1/agents/{message_task.AGENT}",
            json={"url": self.agent.url},
            headers={"Authorization": f"Bearer {admin}"},
        ).raise_for_status()
        self.sessions = asyncio.run(self._seed(url))

    async def _seed(self, url: str) -> dict[str, list[str]]:
        conn = await asyncpg.connect(url)
        try:
            seeded = {
                path: await message_task.sessions_of_their_own(conn, n)
                for path, n in SESSIONS.items()
            }
            seeded["quiet"] = await message_task.sessions_of_their_own(conn, 1)
            await conn.execute("ANALYZE")
            return seeded
        finally:
            await conn.close()

    def scripts(self, directory: Path, key: str) -> dict[str, Path]:
        """The three HTTP paths, by the names the results use."""
        return {
            message_task.NAME: message_task.script(self.sessions["message"], directory, key),
            a2a_send.NAME: a2a_send.script(self.sessions["a2a"], directory, key),
            auto_merge.NAME: auto_merge.script(self.sessions["merge"], directory, key),
        }

    def outbox(
        self,
        url: str,
        port: int,
        window: Callable[[Path, int], dict[str, Any]],
        directory: Path,
        key: str,
        rounds: int,
        seconds: int,
    ) -> dict[str, Any]:
        """The outbox part: PATCH with and without its event, alternating."""
        script = outbox_cost.script(self.sessions["outbox"], directory, key)
        return asyncio.run(
            outbox_cost.measure(
                url,
                port,
                window,
                self.sessions["outbox"],
                self.sessions["quiet"][0],
                script,
                key,
                rounds,
                seconds,
            )
        )

    def stop(self) -> None:
        """Stop the fast agent."""
        self.agent.stop()


def markdown(result: dict[str, Any]) -> list[str]:
    """The new paths' own tables: answers by kind, the streams, the outbox A/B."""
    lines: list[str] = []
    counted = [
        (conns, name, row["counts"])
        for conns, rows in result.get("http", {}).items()
        for name, row in rows.items()
        if isinstance(row, dict) and "counts" in row
    ]
    if counted:
        lines += ["**Answers by kind**", "", "| run | path | answers |", "|---|---|---|"]
        for conns, name, counts in counted:
            kinds = ", ".join(
                f"{kind} {n} ({wrk_scripts.share(counts, kind)})"
                for kind, n in sorted(counts.items())
            )
            lines.append(f"| {conns} | {name} | {kinds} |")
        lines.append("")
    streams = result.get("streams")
    if streams:
        latency = streams["latency_ms"]
        lines += [
            "**SSE events, commit to client**",
            "",
            "| streams | writes/s | deliveries expected / received / duplicated | p50 ms | p99 ms | max ms | KiB per stream (idle / after) |",
            "|---|---|---|---|---|---|---|",
            f"| {streams['streams']} | {streams['write_rate_per_s']} | "
            f"{streams['deliveries_expected']} / {streams['deliveries_received']} / "
            f"{streams['duplicates']} | {latency['p50']} | {latency['p99']} | {latency['max']} | "
            f"{streams['kib_per_stream_idle']} / {streams['kib_per_stream_after_writes']} |",
            "",
        ]
    outbox = result.get("outbox")
    if outbox:
        lines += [
            "**PATCH session with and without its outbox event (A/B, 16 connections)**",
            "",
            "| variant | req/s (median) | p50 ms | p99 ms | events written |",
            "|---|---|---|---|---|",
        ]
        for variant in outbox_cost.SET_TRIGGER:
            v = outbox[variant]
            lines.append(
                f"| {variant} | {v['rps']} | {v['p50_ms']} | {v['p99_ms']} | {v['events written']} |"
            )
        cost = outbox["cost"]
        lines += [
            "",
            f"The event's cost per write (per round, then the median): server time "
            f"{cost['server µs per write added']} µs, p50 {cost['p50 ms added']} ms; req/s with / "
            f"without {cost['req/s with / without']} (rounds: {cost['req/s with / without, per round']})",
            "",
        ]
    return lines
