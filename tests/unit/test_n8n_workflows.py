"""The shipped n8n workflows are well-formed and call endpoints that exist."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.asgi import create_app
from app.settings import PROJECT_ROOT, Settings

WORKFLOWS = sorted((PROJECT_ROOT / "n8n-workflows").glob("*.json"))
# Node types and the versions these workflows are written for (n8n 2.x ships all of them).
KNOWN = {
    "n8n-nodes-base.webhook": 2,
    "n8n-nodes-base.httpRequest": 4.2,
    "n8n-nodes-base.respondToWebhook": 1.1,
    "n8n-nodes-base.executeWorkflowTrigger": 1.1,
    "n8n-nodes-base.scheduleTrigger": 1.2,
    "n8n-nodes-base.if": 2,
    "n8n-nodes-base.code": 2,
}
TRIGGERS = {
    "n8n-nodes-base.webhook",
    "n8n-nodes-base.executeWorkflowTrigger",
    "n8n-nodes-base.scheduleTrigger",
}
SWITCHBOARD_PATH = re.compile(r"'(/webhooks/n8n/[a-z_]+|/v1/[a-z0-9_/-]+)'")


def load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.fixture(scope="module")
def openapi_paths() -> set[str]:
    app = create_app(
        Settings(), database_url="postgresql://unused@127.0.0.1/unused", admin_key="x" * 20
    )
    return set(app.openapi_schema.to_schema()["paths"])


def test_the_three_seed_workflows_are_shipped() -> None:
    assert [p.name for p in WORKFLOWS] == [
        "11_agent_coordination_manager.json",
        "12_memory_management_agent.json",
        "13_session_cleanup_scheduler.json",
    ]
    assert [load(p)["name"] for p in WORKFLOWS] == [
        "Agent Coordination Manager",
        "Memory Management Agent",
        "Session Cleanup Scheduler",
    ]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_structure(path: Path) -> None:
    workflow = load(path)
    nodes = workflow["nodes"]
    names = [node["name"] for node in nodes]
    ids = [node["id"] for node in nodes]
    assert len(set(names)) == len(names), "node names must be unique"
    assert len(set(ids)) == len(ids), "node ids must be unique"
    for node in nodes:
        uuid.UUID(node["id"])
        assert node["type"] in KNOWN, node["type"]
        assert node["typeVersion"] == KNOWN[node["type"]], node["name"]
        assert isinstance(node["parameters"], dict)
        assert len(node["position"]) == 2
    assert any(node["type"] in TRIGGERS for node in nodes), "a workflow needs a trigger"

    connected: set[str] = set()
    for source, outputs in workflow["connections"].items():
        assert source in names, f"connection from unknown node {source}"
        for branch in outputs["main"]:
            for target in branch:
                assert target["node"] in names, f"connection to unknown node {target['node']}"
                assert target["type"] == "main"
                connected.add(target["node"])
    for node in nodes:
        if node["type"] not in TRIGGERS:
            assert node["name"] in connected, f"{node['name']} is never reached"
    assert workflow["settings"]["executionOrder"] == "v1"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_http_nodes_call_existing_endpoints_with_the_one_credential(
    path: Path, openapi_paths: set[str]
) -> None:
    calls = 0
    for node in load(path)["nodes"]:
        if node["type"] != "n8n-nodes-base.httpRequest" or node["name"] == "Alert":
            continue
        url = node["parameters"]["url"]
        assert "$vars.SWITCHBOARD_URL" in url
        assert "http://127.0.0.1:8080" in url
        target = SWITCHBOARD_PATH.search(url)
        assert target is not None, url
        assert target.group(1) in openapi_paths
        assert node["credentials"]["httpHeaderAuth"]["name"] == "Switchboard API Key"
        headers = {h["name"] for h in node["parameters"]["headerParameters"]["parameters"]}
        assert "Idempotency-Key" in headers
        assert node["onError"] == "continueErrorOutput"  # n8n's error output is wired
        calls += 1
    assert calls == 1


def test_webhook_nodes_answer_through_respond_nodes() -> None:
    for path in WORKFLOWS:
        workflow = load(path)
        for node in workflow["nodes"]:
            if node["type"] == "n8n-nodes-base.webhook":
                assert node["parameters"]["responseMode"] == "responseNode"
                assert node["parameters"]["httpMethod"] == "POST"
                assert any(
                    n["type"] == "n8n-nodes-base.respondToWebhook" for n in workflow["nodes"]
                )
