"""Each path's own floor against the real thing: a capture server (bench.serve with
SWITCHBOARD_BENCH_CAPTURE) records a PATCH and an idempotent webhook write, the plans are
checked against PostgreSQL, and the ceiling server's /own-floor route replays them with
new values, doing the same work (the version read feeds the write, one memory per call)."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from bench import floors, paths
from bench.paths import HttpPath, Number, Pick, Unique
from bench.run import ADMIN, _prepare_client
from bench.serve import spawn


@pytest.fixture
def capture_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "capture"
    directory.mkdir()
    return directory


@pytest.fixture
def servers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        process.terminate()
        process.wait(timeout=10)


async def _seed(url: str) -> tuple[list[str], str]:
    conn = await asyncpg.connect(url)
    try:
        user = await conn.fetchval(
            "INSERT INTO users (id) VALUES (uuid_generate_v7()) RETURNING id"
        )
        sessions = await conn.fetch(
            """INSERT INTO session_coordination (user_id, expires_at)
               SELECT $1, now() + interval '1 day' FROM generate_series(1, 3)
               RETURNING session_id""",
            user,
        )
        return [str(r[0]) for r in sessions], str(user)
    finally:
        await conn.close()


async def test_paths_are_captured_planned_and_replayed_with_the_same_work(
    database_url: str, capture_dir: Path, tmp_path: Path, servers: list[subprocess.Popen[bytes]]
) -> None:
    sessions, user = await _seed(database_url)
    env = {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN,
        "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
        floors.CAPTURE_ENV: str(capture_dir),
    }
    server, port = spawn("switchboard", env)
    servers.append(server)
    key = _prepare_client(port)
    routes = {
        "patch": HttpPath(
            "PATCH",
            "/v1/sessions/${session}",
            (Pick("session", tuple(sessions[:2])), Number("n", 1_000_000)),
            '{"session_state": {"agent_outputs": {"bench": ${n}}}}',
            {"If-Match": "*"},
        ),
        "webhook": HttpPath(
            "POST",
            "/webhooks/n8n/memory",
            (Pick("user", (user,)), Unique("key", "k")),
            '{"user_id": "${user}", "agent_name": "Orchestrator_Agent",'
            ' "memory_type": "orchestrator", "memory_content": {"n": 1}}',
            {"Idempotency-Key": "${key}"},
        ),
    }
    plans = paths.capture(port, routes, key, capture_dir)
    await paths.verify(database_url, plans, routes)

    patch, webhook = plans["patch"], plans["webhook"]
    assert isinstance(patch, floors.Plan), patch
    assert isinstance(webhook, floors.Plan), webhook
    # PATCH: the read, then the write whose version check takes the version read.
    assert patch.round_trips == patch.statements == len(patch.steps) >= 2
    assert patch.steps[0].args == (floors.Var("session", "uuid"),)
    write = patch.steps[-1]
    assert floors.FromResult(0, "fetchrow", 0, "version") in write.args
    # The webhook's claim, write and stored answer: one statement, no transaction control.
    assert not [s.query for s in webhook.steps if s.control]
    assert webhook.round_trips == webhook.statements == 1
    assert floors.Var("key", "str") in webhook.steps[0].args

    # The ceiling server replays them with values no capture used.
    plans_file = tmp_path / "plans.pickle"
    plans_file.write_bytes(pickle.dumps({"p0": patch, "p1": webhook}))
    floor, floor_port = spawn(
        "ceiling", {"CEILING_DATABASE_URL": database_url, "CEILING_FLOOR_PLANS": str(plans_file)}
    )
    servers.append(floor)
    conn = await asyncpg.connect(database_url)
    try:
        target = sessions[2]  # a session the captures never touched
        before = await conn.fetchval(
            "SELECT version FROM session_coordination WHERE session_id = $1", uuid.UUID(target)
        )
        memories = await conn.fetchval(
            "SELECT count(*) FROM memories WHERE user_id = $1", uuid.UUID(user)
        )
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{floor_port}") as client:
            for n in (4242, 4343):
                answer = await client.patch(f"/own-floor/p0?session={target}&n={n}")
                assert answer.status_code == 200, answer.text
            for key_value in ("floor-1", "floor-2"):
                answer = await client.post(f"/own-floor/p1?user={user}&key={key_value}")
                assert answer.status_code == 200, answer.text
        row = await conn.fetchrow(
            "SELECT version, session_state FROM session_coordination WHERE session_id = $1",
            uuid.UUID(target),
        )
        assert row["version"] == before + 2  # no write lost to a stale version
        assert '"bench": 4343' in row["session_state"]
        after = await conn.fetchval(
            "SELECT count(*) FROM memories WHERE user_id = $1", uuid.UUID(user)
        )
        assert after == memories + 2
        keys = await conn.fetch(
            "SELECT * FROM idempotency_keys WHERE key = ANY($1::text[])", ["floor-1", "floor-2"]
        )
        assert len(keys) == 2
    finally:
        await conn.close()


async def test_a_replay_that_would_no_op_where_the_path_wrote_is_caught(
    database_url: str, capture_dir: Path, servers: list[subprocess.Popen[bytes]]
) -> None:
    sessions, _ = await _seed(database_url)
    env = {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN,
        "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
        floors.CAPTURE_ENV: str(capture_dir),
    }
    server, port = spawn("switchboard", env)
    servers.append(server)
    key = _prepare_client(port)
    route = HttpPath(
        "PATCH",
        "/v1/sessions/${session}",
        (Pick("session", tuple(sessions)), Number("n", 1000)),
        '{"session_state": {"agent_outputs": {"bench": ${n}}}}',
        {"If-Match": "*"},
    )
    plan = paths.capture(port, {"patch": route}, key, capture_dir)["patch"]
    assert isinstance(plan, floors.Plan), plan
    # The version as a constant (what a replay that ignores earlier results would send).
    write = plan.steps[-1]
    stale = tuple(
        floors.Const(-1) if isinstance(b, floors.FromResult) and b.column == "version" else b
        for b in write.args
    )
    broken = floors.Plan((*plan.steps[:-1], dataclasses.replace(write, args=stale)))
    pool = await floors.open_pool(database_url, max_size=2)
    try:
        with pytest.raises(floors.ReplayMismatch):
            await floors.replay(pool, broken, route.sample(2), check=True)
        await floors.replay(pool, plan, route.sample(2), check=True)
    finally:
        await pool.close()
