"""Plays each shipped workflow against the running app as n8n runs it: the workflow's own
Code nodes (Node.js) build the requests, they are sent as its HTTP Request node sends them
(URL path, Idempotency-Key header, JSON body), and its Read Answer node reads the answers.
`make n8n-e2e` does the same in a real n8n."""

from __future__ import annotations

import json
import re
from typing import Any

import asyncpg
import httpx

from tests.integration.test_webhooks import BREAK_HOUSEKEEPING
from tests.n8n_code import code_of, load, needs_node, run_code

pytestmark = needs_node

CHAT = load("11_agent_coordination_manager.json")
MEMORY = load("12_memory_management_agent.json")
CLEANUP = load("13_session_cleanup_scheduler.json")


def endpoint(workflow: dict[str, Any], node: str) -> str:
    """The Switchboard path the HTTP Request node ``node`` calls."""
    for candidate in workflow["nodes"]:
        if candidate["name"] == node:
            match = re.search(r"'(/webhooks/n8n/[a-z_]+)'", candidate["parameters"]["url"])
            assert match is not None
            return match.group(1)
    raise LookupError(node)


async def send(client: httpx.AsyncClient, path: str, items: list[dict[str, Any]]) -> list[Any]:
    """What the HTTP Request node (Full Response, Never Error) outputs for ``items``."""
    answers = []
    for item in items:
        response = await client.post(
            path,
            content=json.dumps(item["request"]),
            headers={
                "content-type": "application/json",
                "Idempotency-Key": item["idempotency_key"],
            },
        )
        answers.append(
            {
                "statusCode": response.status_code,
                "statusMessage": response.reason_phrase,
                "headers": dict(response.headers),
                "body": response.json(),
            }
        )
    return answers


async def test_agent_coordination_manager(client: httpx.AsyncClient) -> None:
    path = endpoint(CHAT, "Coordinate via Switchboard")
    built = run_code(
        code_of(CHAT, "Build Request"),
        [
            {
                "user_id": 4242,
                "text": "I lost my job, help! Also make a plan",
                "channel": "telegram",
            },
            {"user_id": 4242},  # no text: Switchboard's 422
        ],
    )
    answers = await send(client, path, built)
    read = run_code(code_of(CHAT, "Read Answer"), answers, nodes={"Build Request": [built]})
    assert [r["again"] for r in read] == [False, False]  # a 422 is not worth a retry
    first, refused = read
    assert (first["ok"], first["status"]) == (True, 200)
    # Switchboard's own degraded flag (its fallback answer when no agent is reachable; the
    # test's agents have no URL), not one the workflow makes up for a reachable Switchboard.
    assert first["degraded"] is first["body"]["degraded"]
    for field in ("session_id", "response", "agent", "degraded", "pending_actions", "progress"):
        assert field in first["body"]
    assert first["body"]["agent"] == "Consult_Customer_Agent"
    assert "request_plan" in [a["type"] for a in first["body"]["pending_actions"]]
    assert (refused["status"], refused["degraded"]) == (422, False)
    assert refused["content_type"] == "application/problem+json"
    assert [e["field"] for e in refused["body"]["errors"]] == ["text"]
    # n8n's retry of the same item (same key): Switchboard replays, the session moves once.
    again = await send(client, path, built[:1])
    assert again[0]["headers"]["idempotent-replayed"] == "true"
    assert again[0]["body"] == first["body"]


async def test_memory_management_agent(client: httpx.AsyncClient, database_url: str) -> None:
    user_id = (await client.post("/v1/users", json={})).json()["id"]
    items = [
        {
            "user_id": user_id,
            "agent_name": "Make_Plan_Agent",
            "memory_type": "planning",
            "memory_content": {"goal": "save 10%"},
            "access_level": "authorized_agents",
        },
        {"user_id": user_id, "agent_name": "Make_Plan_Agent", "memory_type": "planning"},
        {
            "user_id": user_id,
            "agent_name": "Educate_Customer_Agent",
            "memory_type": "education",
            "memory_content": {"lesson": 1},
        },
        {
            "user_id": user_id,
            "agent_name": "Make_Plan_Agent",
            "memory_type": "no_such_type",
            "memory_content": {},
        },
    ]
    validated = run_code(code_of(MEMORY, "Validate Request"), items)
    valid = [v for v in validated if v["valid"]]
    assert [v["index"] for v in valid] == [0, 2, 3]
    answers = await send(client, endpoint(MEMORY, "Store in Switchboard"), valid)
    read = run_code(code_of(MEMORY, "Read Answer"), answers, nodes={"Is Valid?": [valid, []]})
    assert [(r["index"], r["status"], r["again"]) for r in read] == [
        (0, 200, False),
        (2, 200, False),
        (3, 422, False),
    ]
    assert read[0]["body"]["memory"]["agent_name"] == "Make_Plan_Agent"
    assert read[2]["body"]["errors"] == [{"field": "memory_type", "message": "unknown memory type"}]
    results = run_code(
        code_of(MEMORY, "Results in Order"), read + [v for v in validated if not v["valid"]]
    )
    assert [(r["index"], r["status"]) for r in results] == [(0, 200), (1, 422), (2, 200), (3, 422)]
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT agent_name FROM memories WHERE user_id = $1::uuid ORDER BY created_at", user_id
        )
    finally:
        await conn.close()
    assert [r["agent_name"] for r in rows] == ["Make_Plan_Agent", "Educate_Customer_Agent"]


async def test_session_cleanup_scheduler(client: httpx.AsyncClient, database_url: str) -> None:
    path = endpoint(CLEANUP, "Run Cleanup")
    build = code_of(CLEANUP, "Build Request")
    read_answer = code_of(CLEANUP, "Read Answer")

    async def execution(number: str) -> dict[str, Any]:
        built = run_code(build, [{}], execution_id=number)
        answers = await send(client, path, built)
        return run_code(read_answer, answers, nodes={"Build Request": [built]})[0]

    first = await execution("7")
    assert (first["ok"], first["again"], first["failed"]) == (True, False, [])
    # A rerun in the same hour (or on another n8n instance with the same execution id) runs
    # the jobs again instead of replaying the first answer.
    rerun = await execution("7")
    assert rerun["ok"] is True
    assert rerun["idempotency_key"] != first["idempotency_key"]
    runs = {job: result["run_id"] for job, result in first["jobs"].items()}
    assert all(rerun["jobs"][job]["run_id"] != run for job, run in runs.items())

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(BREAK_HOUSEKEEPING)
        failed = await execution("8")
    finally:
        await conn.close()
    assert (failed["ok"], failed["status"], failed["again"]) == (False, 500, True)
    assert failed["failed"] == ["housekeeping"]
    assert "read-only for this test" in failed["jobs"]["housekeeping"]["error"]
