"""Plays each shipped workflow's HTTP calls, in the order the workflow makes them, against
the running app, with the body each node's expression builds for a sample input."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from app.settings import PROJECT_ROOT


def workflow(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(
        (PROJECT_ROOT / "n8n-workflows" / name).read_text(encoding="utf-8")
    )
    return data


def path_chain(wf: dict[str, Any], start: str) -> list[dict[str, Any]]:
    """Nodes reached from ``start`` along first (success) outputs, in order."""
    by_name = {node["name"]: node for node in wf["nodes"]}
    chain, current = [], start
    while True:
        chain.append(by_name[current])
        outputs = wf["connections"].get(current, {}).get("main", [])
        if not outputs or not outputs[0]:
            return chain
        current = outputs[0][0]["node"]


def endpoint(node: dict[str, Any]) -> str:
    match = re.search(r"'(/webhooks/n8n/[a-z_]+)'", node["parameters"]["url"])
    assert match is not None
    return match.group(1)


async def test_agent_coordination_manager(client: httpx.AsyncClient) -> None:
    chain = path_chain(workflow("11_agent_coordination_manager.json"), "Chat Message")
    assert [n["type"].split(".")[-1] for n in chain] == [
        "webhook",
        "httpRequest",
        "respondToWebhook",
    ]
    incoming = {
        "user_id": 4242,
        "text": "I lost my job, help! Also make a plan",
        "channel": "telegram",
    }
    # what the node's jsonBody expression builds from that webhook body
    sent = {
        "user_ref": str(incoming["user_id"]),
        "text": incoming["text"],
        "channel": incoming["channel"],
        "context_flags": [],
    }
    response = await client.post(
        endpoint(chain[1]), json=sent, headers={"Idempotency-Key": "exec-1"}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    for field in ("session_id", "response", "agent", "degraded", "pending_actions", "progress"):
        assert field in body  # the Reply node reads each of these
    assert body["agent"] == "Consult_Customer_Agent"
    assert "request_plan" in [a["type"] for a in body["pending_actions"]]
    retry = await client.post(endpoint(chain[1]), json=sent, headers={"Idempotency-Key": "exec-1"})
    assert retry.json() == body


async def test_memory_management_agent(client: httpx.AsyncClient) -> None:
    wf = workflow("12_memory_management_agent.json")
    chain = path_chain(wf, "Memory Update")
    assert [n["name"] for n in chain] == [
        "Memory Update",
        "Validate Request",
        "Is Valid?",
        "Store in Switchboard",
        "Reply",
    ]
    assert path_chain(wf, "From Other Workflows")[1]["name"] == "Validate Request"
    user_id = (await client.post("/v1/users", json={})).json()["id"]
    request = {
        "user_id": user_id,
        "agent_name": "Make_Plan_Agent",
        "memory_type": "planning",
        "memory_content": {"goal": "save 10%"},
        "access_level": "authorized_agents",
        "action": "write",  # the Validate Request node adds the default action
    }
    response = await client.post(
        endpoint(chain[3]), json=request, headers={"Idempotency-Key": "exec-2-0"}
    )
    assert response.status_code == 200, response.text
    assert response.json()["memory"]["agent_name"] == "Make_Plan_Agent"


async def test_session_cleanup_scheduler(client: httpx.AsyncClient) -> None:
    wf = workflow("13_session_cleanup_scheduler.json")
    chain = path_chain(wf, "Every Hour")
    assert [n["name"] for n in chain] == ["Every Hour", "Run Cleanup", "Any Job Failed?", "Alert"]
    key = {"Idempotency-Key": "n8n-cleanup-2026-11-22-18"}
    response = await client.post(
        endpoint(chain[1]), json={"job": "all", "dry_run": False}, headers=key
    )
    assert response.status_code == 200, response.text
    assert response.json()["failed"] == []  # what "Any Job Failed?" checks
    again = await client.post(
        endpoint(chain[1]), json={"job": "all", "dry_run": False}, headers=key
    )
    assert again.json() == response.json()  # a second n8n instance in the same hour: no rerun
