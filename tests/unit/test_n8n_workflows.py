"""The shipped n8n workflows: well-formed, calling endpoints that exist, and free of the
defects a real n8n 2.8 showed (issue 16): each test names the one it guards against.
`make n8n-e2e` runs them in a real n8n; these run in `make test`."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.asgi import create_app
from app.settings import PROJECT_ROOT, Settings
from tests.n8n_code import code_of, load, needs_node, run_code

WORKFLOWS = sorted((PROJECT_ROOT / "n8n-workflows").glob("*.json"))
CHAT, MEMORY, CLEANUP = (p.name for p in WORKFLOWS)
# Node types and the versions these workflows are written for (n8n 2.8 ships all of them).
KNOWN = {
    "n8n-nodes-base.webhook": 2,
    "n8n-nodes-base.httpRequest": 4.2,
    "n8n-nodes-base.respondToWebhook": 1.1,
    "n8n-nodes-base.executeWorkflowTrigger": 1.1,
    "n8n-nodes-base.scheduleTrigger": 1.2,
    "n8n-nodes-base.manualTrigger": 1,
    "n8n-nodes-base.if": 2,
    "n8n-nodes-base.code": 2,
    "n8n-nodes-base.set": 3.4,
    "n8n-nodes-base.wait": 1.1,
    "n8n-nodes-base.merge": 3.2,
    "n8n-nodes-base.stopAndError": 1,
    "n8n-nodes-base.stickyNote": 1,
}
TRIGGERS = {
    "n8n-nodes-base.webhook",
    "n8n-nodes-base.executeWorkflowTrigger",
    "n8n-nodes-base.scheduleTrigger",
    "n8n-nodes-base.manualTrigger",
}
SWITCHBOARD_PATH = re.compile(r"'(/webhooks/n8n/[a-z_]+|/v1/[a-z0-9_/-]+)'")
DEFAULT_URL = "http://127.0.0.1:8080"
# The HTTP Request nodes that call Switchboard, per workflow.
CALLS = {
    CHAT: "Coordinate via Switchboard",
    MEMORY: "Store in Switchboard",
    CLEANUP: "Run Cleanup",
}


def nodes_by_name(workflow: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {node["name"]: node for node in workflow["nodes"]}


def targets(workflow: dict[str, Any], source: str, output: int = 0) -> list[tuple[str, int]]:
    """(node, input index) pairs fed by ``source``'s output ``output``."""
    outputs = workflow["connections"].get(source, {}).get("main", [])
    if output >= len(outputs):
        return []
    return [(t["node"], t["index"]) for t in outputs[output]]


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
    assert [load(p.name)["name"] for p in WORKFLOWS] == [
        "Agent Coordination Manager",
        "Memory Management Agent",
        "Session Cleanup Scheduler",
    ]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_structure(path: Path) -> None:
    workflow = load(path.name)
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
        if node["type"] not in TRIGGERS and node["type"] != "n8n-nodes-base.stickyNote":
            assert node["name"] in connected, f"{node['name']} is never reached"
    assert workflow["settings"]["executionOrder"] == "v1"
    # A Wait node needs a webhook id of its own (n8n gives one to each it creates).
    for node in nodes:
        if node["type"] == "n8n-nodes-base.wait":
            uuid.UUID(node["webhookId"])
            assert node["parameters"]["unit"] == "seconds"  # n8n's default unit is hours


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_base_url_is_one_edit_in_the_settings_node(path: Path) -> None:
    """Defect 1: ``$vars`` needs a paid licence, so the address must be editable in the
    workflow: one Settings node that every trigger passes through, holding the only copy of
    the default address; ``$vars`` may override it but cannot make the expression fail."""
    workflow = load(path.name)
    working = [n for n in workflow["nodes"] if n["type"] != "n8n-nodes-base.stickyNote"]
    text = json.dumps(working)
    assert text.count(DEFAULT_URL) == 1, "the default address must appear exactly once"
    settings = nodes_by_name(workflow)["Settings"]
    assert settings["type"] == "n8n-nodes-base.set"
    assert settings["parameters"]["includeOtherFields"] is True  # the items pass through
    fields = {f["name"]: f["value"] for f in settings["parameters"]["assignments"]["assignments"]}
    assert fields["switchboard_url"] == "={{ $vars?.SWITCHBOARD_URL || '" + DEFAULT_URL + "' }}"
    assert "$vars." not in text.replace("$vars?.", ""), "a $vars read that could throw"
    for node in workflow["nodes"]:
        if node["type"] in TRIGGERS:
            assert targets(workflow, node["name"]) == [("Settings", 0)], node["name"]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_http_nodes_call_existing_endpoints_with_the_one_credential(
    path: Path, openapi_paths: set[str]
) -> None:
    workflow = load(path.name)
    calls = [
        n
        for n in workflow["nodes"]
        if n["type"] == "n8n-nodes-base.httpRequest" and n["name"] != "Send Alert"
    ]
    assert [n["name"] for n in calls] == [CALLS[path.name]]
    node = calls[0]
    url = node["parameters"]["url"]
    assert url.startswith("={{ $('Settings').first().json.switchboard_url")
    target = SWITCHBOARD_PATH.search(url)
    assert target is not None, url
    assert target.group(1) in openapi_paths
    assert node["credentials"]["httpHeaderAuth"]["name"] == "Switchboard API Key"
    headers = {h["name"]: h["value"] for h in node["parameters"]["headerParameters"]["parameters"]}
    assert headers == {"Idempotency-Key": "={{ $json.idempotency_key }}"}


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_only_what_a_retry_can_change_is_retried(path: Path) -> None:
    """Defect 2: n8n's Retry On Fail retries every error, 4xx too, and routes 4xx and
    "unreachable" to one error output. Instead: every answer comes out as an item with its
    status (Never Error, Full Response), Read Answer decides, and only its ``again`` loops
    through a Wait back to the call."""
    workflow = load(path.name)
    by_name = nodes_by_name(workflow)
    call = by_name[CALLS[path.name]]
    assert not call.get("retryOnFail"), "n8n's own retry retries 4xx answers too"
    assert call["onError"] == "continueRegularOutput"  # no answer: an item, not a branch
    response = call["parameters"]["options"]["response"]["response"]
    assert response == {"fullResponse": True, "neverError": True, "responseFormat": "json"}
    assert targets(workflow, call["name"]) == [("Read Answer", 0)]
    assert targets(workflow, call["name"], 1) == []
    assert targets(workflow, "Read Answer") == [("Try Again?", 0)]
    again = by_name["Try Again?"]["parameters"]["conditions"]["conditions"]
    assert [c["leftValue"] for c in again] == ["={{ $json.again }}"]
    assert targets(workflow, "Try Again?", 0) == [("Wait Before Retry", 0)]
    assert targets(workflow, "Wait Before Retry") == [(call["name"], 0)]
    assert targets(workflow, "Try Again?", 1) != []


@pytest.mark.parametrize(
    ("file", "triggers"),
    [
        (CHAT, {"n8n-nodes-base.webhook", "n8n-nodes-base.executeWorkflowTrigger"}),
        (MEMORY, {"n8n-nodes-base.webhook", "n8n-nodes-base.executeWorkflowTrigger"}),
        (CLEANUP, {"n8n-nodes-base.scheduleTrigger", "n8n-nodes-base.manualTrigger"}),
    ],
)
def test_triggers(file: str, triggers: set[str]) -> None:
    """Defects 7 and 8: `n8n execute --id` starts a workflow at its Execute Workflow Trigger
    or else its Manual Trigger, so the cleanup needs a Manual Trigger (and no Execute
    Workflow Trigger, which the CLI would pick first with no input); the seed's Task 1 wants
    the coordination manager callable from other workflows."""
    workflow = load(file)
    found = {n["type"] for n in workflow["nodes"] if n["type"] in TRIGGERS}
    assert found == triggers
    for node in workflow["nodes"]:
        if node["type"] == "n8n-nodes-base.executeWorkflowTrigger":
            assert node["parameters"] == {"inputSource": "passthrough"}


def test_webhook_nodes_answer_through_respond_nodes() -> None:
    for path in WORKFLOWS:
        workflow = load(path.name)
        for node in workflow["nodes"]:
            if node["type"] == "n8n-nodes-base.webhook":
                assert node["parameters"]["responseMode"] == "responseNode"
                assert node["parameters"]["httpMethod"] == "POST"
                reply = nodes_by_name(workflow)["Reply"]
                options = reply["parameters"]["options"]
                # Switchboard's status and media type go back to the caller as they are.
                assert options["responseCode"] == "={{ $json.status }}"
                assert reply["parameters"]["responseBody"] == "={{ $json.body }}"
                headers = {h["name"]: h["value"] for h in options["responseHeaders"]["entries"]}
                assert headers["content-type"] == "={{ $json.content_type }}"


def test_memory_results_from_both_branches_meet_in_one_node() -> None:
    """Defect 3: a sub-workflow returns the items of the last node that ran, so the stored
    and the refused requests must meet in one node (a Merge waits for both) before Reply."""
    workflow = load(MEMORY)
    assert targets(workflow, "Is Valid?", 1) == [("All Results", 1)]
    assert targets(workflow, "Try Again?", 1) == [("All Results", 0)]
    assert nodes_by_name(workflow)["All Results"]["parameters"] == {"numberInputs": 2}
    assert targets(workflow, "All Results") == [("Results in Order", 0)]
    assert targets(workflow, "Results in Order") == [("Reply", 0)]


def test_a_failed_cleanup_fails_the_execution() -> None:
    """Defect 5: the alert went to /health (405) and the execution still succeeded. Now a
    failed cleanup ends in Stop and Error whether or not an alert target is set, and there
    is no default alert target."""
    workflow = load(CLEANUP)
    by_name = nodes_by_name(workflow)
    fields = {
        f["name"]: f["value"]
        for f in by_name["Settings"]["parameters"]["assignments"]["assignments"]
    }
    assert fields["alert_url"] == "={{ $vars?.SWITCHBOARD_ALERT_URL || '' }}"
    assert "/health" not in json.dumps(workflow)
    assert targets(workflow, "Try Again?", 1) == [("Cleanup Failed?", 0)]
    assert targets(workflow, "Cleanup Failed?", 0) == [("Alert Configured?", 0)]
    assert targets(workflow, "Alert Configured?", 0) == [("Send Alert", 0)]
    assert targets(workflow, "Alert Configured?", 1) == [("Fail Execution", 0)]
    assert targets(workflow, "Send Alert") == [("Fail Execution", 0)]
    assert by_name["Send Alert"]["onError"] == "continueRegularOutput"  # a dead alert target
    assert by_name["Fail Execution"]["type"] == "n8n-nodes-base.stopAndError"


def test_idempotency_keys_are_built_per_request() -> None:
    """Defect 6: keys from the UTC hour replayed a rerun; keys from ``$execution.id`` alone
    repeat across n8n instances. Each request's key is made once (and kept for its
    retries) from the workflow and execution ids plus a random part."""
    for file, node in ((CHAT, "Build Request"), (MEMORY, "Validate Request")):
        code = code_of(load(file), node)
        assert "$execution.id" in code
        assert "Math.random()" in code
    code = code_of(load(CLEANUP), "Build Request")
    assert "$execution.id" in code
    assert "Math.random()" in code
    for path in WORKFLOWS:
        assert "toFormat(" not in path.read_text(encoding="utf-8")  # no key from a clock


# --------------------------------------------------------------------------- the Code nodes,
# run as n8n runs them (Node.js)


def webhook_item(body: Any, **headers: str) -> dict[str, Any]:
    """What n8n's Webhook node outputs, after Settings added its field."""
    return {
        "headers": {"content-type": "application/json", **headers},
        "params": {},
        "query": {},
        "body": body,
        "webhookUrl": "http://127.0.0.1:5678/webhook/x",
        "executionMode": "production",
        "switchboard_url": DEFAULT_URL,
    }


def memory(**fields: Any) -> dict[str, Any]:
    base = {
        "user_id": str(uuid.uuid4()),
        "agent_name": "Make_Plan_Agent",
        "memory_type": "planning",
        "memory_content": {"goal": "save 10%"},
    }
    return {**base, **fields}


@needs_node
def test_every_memory_item_is_validated_with_its_own_result() -> None:
    """Defect 3 (the Code node read ``$json`` once: one item out, whatever came in) and
    defect 4 (characters counted, not UTF-8 bytes)."""
    code = code_of(load(MEMORY), "Validate Request")
    euro = "€" * 400_000  # 400,002 characters as JSON: under 1 MiB; 1,200,002 bytes: over
    items = [
        memory(),
        {"switchboard_url": DEFAULT_URL, **memory(agent_name=None)},
        memory(memory_content=euro),
        memory(memory_content="a" * 1_000_000),
        memory(action="query", memory_type=None, memory_content=None),
        [1, 2],
        memory(memory_content=None),
    ]
    out = run_code(code, items)
    assert [o["index"] for o in out] == [0, 1, 2, 3, 4, 5, 6]
    assert [o["valid"] for o in out] == [True, False, False, True, True, False, False]
    assert [o.get("status") for o in out] == [None, 422, 413, None, None, 422, 422]
    assert out[1]["body"]["errors"] == [{"field": "agent_name", "message": "required"}]
    assert out[2]["body"]["errors"] == [
        {"field": "memory_content", "message": "1200002 bytes, over 1048576"}
    ]
    assert out[2]["body"]["type"] == "urn:switchboard:problem:payload-too-large"
    assert "switchboard_url" not in out[0]["request"]  # Settings' field is not sent
    assert out[0]["request"]["action"] == "write"
    keys = [o["idempotency_key"] for o in out if o["valid"]]
    assert len(set(keys)) == 3


@needs_node
def test_a_webhook_memory_request_is_read_from_the_body_with_the_callers_key() -> None:
    code = code_of(load(MEMORY), "Validate Request")
    request = memory(idempotency_key="body-key")
    out = run_code(code, [webhook_item(request, **{"idempotency-key": "header-key"})])
    assert out[0]["valid"] is True
    assert out[0]["idempotency_key"] == "header-key"
    assert "idempotency_key" not in out[0]["request"]
    out = run_code(code, [webhook_item(request)])
    assert out[0]["idempotency_key"] == "body-key"


@needs_node
@pytest.mark.parametrize(
    ("file", "node"),
    [(CHAT, "Build Request"), (MEMORY, "Validate Request"), (CLEANUP, "Build Request")],
)
def test_keys_differ_for_the_same_execution_id_on_another_instance(file: str, node: str) -> None:
    """Defect 6: two n8n instances (or one reset) reach the same execution id; their keys
    must still differ, and name the workflow and execution they came from."""
    code = code_of(load(file), node)
    item = memory() if file == MEMORY else {"user_ref": "telegram:1", "text": "hi"}
    first = run_code(code, [item], execution_id="7", workflow_id="wfA")[0]["idempotency_key"]
    second = run_code(code, [item], execution_id="7", workflow_id="wfA")[0]["idempotency_key"]
    assert first != second
    assert first.startswith("n8n:wfA:7:")
    assert len(first) <= 255


def answer(status: int | None, body: Any = None, **headers: str) -> dict[str, Any]:
    """What the HTTP Request node (Full Response, Never Error) outputs for one request."""
    if status is None:
        return {"error": {"message": "connect ECONNREFUSED 127.0.0.1:8080", "code": "ECONNREFUSED"}}
    return {"statusCode": status, "statusMessage": "", "headers": headers, "body": body}


def problem(status: int, **extensions: Any) -> dict[str, Any]:
    return {
        "type": "urn:switchboard:problem:validation-failed",
        "title": "Validation failed",
        "status": status,
        "detail": "nope",
        **extensions,
    }


@needs_node
def test_memory_answers_pass_switchboards_status_and_retry_only_what_can_change() -> None:
    code = code_of(load(MEMORY), "Read Answer")
    sent = [
        {"index": i, "valid": True, "request": memory(), "idempotency_key": f"k{i}"}
        for i in range(3)
    ]
    nodes = {"Is Valid?": [sent, []]}
    refused = problem(422, errors=[{"field": "user_id", "message": "unknown user"}])
    final = [
        answer(200, {"memory": {"memory_id": "m"}}),
        answer(422, refused),
        answer(413, problem(413)),
    ]
    out = run_code(code, final, nodes=nodes)
    assert [o["again"] for o in out] == [False] * 3  # no 4xx is retried
    assert [(o["status"], o["ok"], o["content_type"]) for o in out] == [
        (200, True, "application/json"),
        (422, False, "application/problem+json"),
        (413, False, "application/problem+json"),
    ]
    assert out[1]["body"] == refused  # the problem, field errors and all
    assert [o["idempotency_key"] for o in out] == ["k0", "k1", "k2"]

    for retryable in (
        answer(None),
        answer(503, problem(503)),
        answer(429, problem(429)),
        answer(409, problem(409, retryable=True)),
        answer(502, "<html>"),
    ):
        out = run_code(code, [final[0], retryable, final[1]], nodes=nodes)
        assert [o["again"] for o in out] == [True] * 3, retryable
        last = run_code(code, [final[0], retryable, final[1]], nodes=nodes, run_index=3)
        assert [o["again"] for o in last] == [False] * 3  # the fourth try is the last
    assert run_code(code, [answer(409, problem(409))] * 3, nodes=nodes)[0]["again"] is False
    down = run_code(code, [answer(None)] * 3, nodes=nodes, run_index=3)[0]
    assert (down["status"], down["body"]["type"]) == (502, "urn:switchboard:problem:unreachable")
    waits = run_code(code, [answer(429, problem(429), **{"retry-after": "7"})] * 3, nodes=nodes)
    assert waits[0]["wait_seconds"] == 7


@needs_node
def test_memory_results_come_back_in_request_order() -> None:
    code = code_of(load(MEMORY), "Results in Order")
    merged = [
        {"index": 2, "ok": True, "status": 200, "body": {}, "tries": 1, "again": False},
        {"index": 0, "ok": True, "status": 200, "body": {}, "tries": 1, "again": False},
        {"index": 1, "ok": False, "status": 422, "body": {}, "tries": 0, "valid": False},
    ]
    for item in merged:
        item["content_type"] = "application/json"
    out = run_code(code, merged)
    assert [o["index"] for o in out] == [0, 1, 2]
    assert set(out[0]) == {
        "index",
        "ok",
        "status",
        "body",
        "content_type",
        "idempotency_key",
        "tries",
    }


@needs_node
def test_chat_is_degraded_only_when_switchboard_is_down() -> None:
    code = code_of(load(CHAT), "Read Answer")
    sent = [{"index": 0, "request": {"text": "hi"}, "idempotency_key": "k"}]
    nodes = {"Build Request": [sent]}
    refused = run_code(code, [answer(422, problem(422, errors=[{"field": "text"}]))], nodes=nodes)
    assert (refused[0]["status"], refused[0]["degraded"], refused[0]["again"]) == (
        422,
        False,
        False,
    )
    assert refused[0]["body"]["errors"] == [{"field": "text"}]
    fine = run_code(code, [answer(200, {"response": "hello", "degraded": False})], nodes=nodes)
    assert (fine[0]["status"], fine[0]["degraded"], fine[0]["body"]["response"]) == (
        200,
        False,
        "hello",
    )
    for outage in (answer(None), answer(503, problem(503))):
        assert run_code(code, [outage], nodes=nodes)[0]["again"] is True
        down = run_code(code, [outage], nodes=nodes, run_index=3)[0]
        assert (down["status"], down["degraded"], down["again"]) == (200, True, False)
        assert down["body"]["degraded"] is True
        assert "unavailable" in down["body"]["response"]


@needs_node
def test_chat_messages_are_each_built_from_webhook_or_caller_items() -> None:
    code = code_of(load(CHAT), "Build Request")
    switchboard_user = str(uuid.uuid4())
    out = run_code(
        code,
        [
            webhook_item(
                {"user_id": 4242, "text": "hi", "channel": "telegram"}, **{"x-request-id": "r1"}
            ),
            {"switchboard_url": DEFAULT_URL, "user_id": switchboard_user, "message": "hello"},
            {"user_ref": "crm-1", "text": "third"},
        ],
    )
    assert [o["request"] for o in out] == [
        {"user_ref": "4242", "text": "hi", "channel": "telegram", "context_flags": []},
        {"user_id": switchboard_user, "text": "hello", "channel": "n8n", "context_flags": []},
        {"user_ref": "crm-1", "text": "third", "channel": "n8n", "context_flags": []},
    ]
    assert out[0]["idempotency_key"] == "r1"


@needs_node
def test_cleanup_failures_are_reported_and_a_failed_job_is_retried() -> None:
    code = code_of(load(CLEANUP), "Read Answer")
    sent = [{"request": {"job": "all", "dry_run": False}, "idempotency_key": "k"}]
    nodes = {"Build Request": [sent]}
    ok = run_code(code, [answer(200, {"jobs": {"a": {}}, "failed": [], "total": 3})], nodes=nodes)[
        0
    ]
    assert (ok["ok"], ok["again"], ok["failed"], ok["error"]) == (True, False, [], None)
    failed_body = problem(500, failed=["housekeeping"], jobs={"housekeeping": {"status": "failed"}})
    failed = run_code(code, [answer(500, failed_body)], nodes=nodes, run_index=3)[0]
    assert (failed["ok"], failed["again"], failed["failed"]) == (False, False, ["housekeeping"])
    assert failed["error"].startswith("Switchboard answered 500")
    assert run_code(code, [answer(500, failed_body)], nodes=nodes)[0]["again"] is True
    forbidden = run_code(code, [answer(403, problem(403))], nodes=nodes)[0]
    assert (forbidden["ok"], forbidden["again"], forbidden["failed"]) == (False, False, ["cleanup"])


# -- the variants built on the Switchboard nodes (n8n-workflows/with-nodes/, issue 23) ------

VARIANTS = sorted((PROJECT_ROOT / "n8n-workflows" / "with-nodes").glob("*.json"))
PACKAGE = PROJECT_ROOT / "n8n-nodes"
SWITCHBOARD_NODE = "n8n-nodes-switchboard.switchboard"
# What the variants use besides the package's node (n8n 2.8 ships all of them).
VARIANT_KNOWN = {
    **KNOWN,
    "n8n-nodes-base.switch": 3.2,
    SWITCHBOARD_NODE: 1,
}


def variant(file: str) -> dict[str, Any]:
    return load(f"with-nodes/{file}")


def package_values() -> set[str]:
    """Every option value the Switchboard node's description offers (resources, operations,
    choices), read from its source."""
    source = (PACKAGE / "nodes" / "Switchboard" / "descriptions.ts").read_text(encoding="utf-8")
    return set(re.findall(r"value: '([A-Za-z]+)'", source))


def test_each_shipped_workflow_has_a_variant_with_the_same_file_name() -> None:
    assert [p.name for p in VARIANTS] == [p.name for p in WORKFLOWS]
    for path in VARIANTS:
        assert variant(path.name)["name"] == f"{load(path.name)['name']} (Switchboard nodes)"


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.name)
def test_variant_structure(path: Path) -> None:
    workflow = variant(path.name)
    nodes = workflow["nodes"]
    names = [node["name"] for node in nodes]
    assert len(set(names)) == len(names), "node names must be unique"
    assert len({node["id"] for node in nodes}) == len(nodes), "node ids must be unique"
    for node in nodes:
        uuid.UUID(node["id"])
        assert node["type"] in VARIANT_KNOWN, node["type"]
        assert node["typeVersion"] == VARIANT_KNOWN[node["type"]], node["name"]
    connected: set[str] = set()
    for source, outputs in workflow["connections"].items():
        assert source in names, f"connection from unknown node {source}"
        for branch in outputs["main"]:
            for target in branch:
                assert target["node"] in names, f"connection to unknown node {target['node']}"
                connected.add(target["node"])
    for node in nodes:
        if node["type"] not in TRIGGERS and node["type"] != "n8n-nodes-base.stickyNote":
            assert node["name"] in connected, f"{node['name']} is never reached"
    assert workflow["settings"]["executionOrder"] == "v1"


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.name)
def test_variants_reach_switchboard_only_through_its_nodes(path: Path) -> None:
    """No address to edit and no HTTP Request to Switchboard: the credential names the
    server; each Switchboard node asks for an operation the package has."""
    workflow = variant(path.name)
    offered = package_values()
    calls = [n for n in workflow["nodes"] if n["type"] == SWITCHBOARD_NODE]
    assert calls, "a variant uses the Switchboard node"
    for node in calls:
        assert node["credentials"] == {
            "switchboardApi": {"id": "switchboardApi", "name": "Switchboard API"}
        }
        assert node["parameters"]["resource"] in offered, node["name"]
        assert node["parameters"]["operation"] in offered, node["name"]
        assert node.get("onError") in {"continueErrorOutput", "continueRegularOutput"}, (
            f"{node['name']}: a refused item must not stop the others"
        )
    text = json.dumps(workflow)
    assert "switchboard_url" not in text
    assert DEFAULT_URL not in text
    for node in workflow["nodes"]:
        if node["type"] == "n8n-nodes-base.httpRequest":  # only the cleanup's alert
            assert "alert_url" in node["parameters"]["url"], node["name"]


@pytest.mark.parametrize("path", VARIANTS, ids=lambda p: p.name)
def test_variants_have_the_triggers_of_their_http_twin_on_paths_of_their_own(path: Path) -> None:
    """Both variants may be published on one n8n: same triggers, other webhook paths."""
    twin, workflow = load(path.name), variant(path.name)

    def triggers(w: dict[str, Any]) -> set[str]:
        return {n["type"] for n in w["nodes"] if n["type"] in TRIGGERS}

    def paths(w: dict[str, Any]) -> set[str]:
        return {
            n["parameters"]["path"] for n in w["nodes"] if n["type"] == "n8n-nodes-base.webhook"
        }

    assert triggers(workflow) == triggers(twin)
    assert paths(workflow) == {f"{p}-nodes" for p in paths(twin)}
    for node in workflow["nodes"]:
        if node["type"] == "n8n-nodes-base.webhook":
            uuid.UUID(node["webhookId"])
            assert node["parameters"]["responseMode"] == "responseNode"


def test_the_chat_variant_answers_switchboards_problem_from_the_error_output() -> None:
    workflow = variant(CHAT)
    coordinate = nodes_by_name(workflow)["Coordinate via Switchboard"]
    assert coordinate["onError"] == "continueErrorOutput"
    assert targets(workflow, "Coordinate via Switchboard", 0) == [("Reply", 0)]
    assert targets(workflow, "Coordinate via Switchboard", 1) == [("Problem", 0)]
    assert targets(workflow, "Problem") == [("Reply Problem", 0)]
    problem = {
        a["name"]: a["value"]
        for a in nodes_by_name(workflow)["Problem"]["parameters"]["assignments"]["assignments"]
    }
    assert "$json.error.status" in problem["status"]
    assert "$json.error.problem" in problem["body"]


def test_the_cleanup_variant_retries_then_fails_the_execution() -> None:
    workflow = variant(CLEANUP)
    run = nodes_by_name(workflow)["Run Cleanup"]
    assert run["parameters"]["resource"] == "job"
    assert run["parameters"]["operation"] == "run"
    assert run["parameters"]["job"] == "all"
    assert run["retryOnFail"] is True
    assert run["maxTries"] >= 2
    assert targets(workflow, "Run Cleanup", 0) == []
    assert targets(workflow, "Run Cleanup", 1) == [("Alert Configured?", 0)]
    assert targets(workflow, "Alert Configured?", 0) == [("Send Alert", 0)]
    assert targets(workflow, "Alert Configured?", 1) == [("Fail Execution", 0)]
    assert targets(workflow, "Send Alert") == [("Fail Execution", 0)]


def test_the_memory_variant_routes_each_action_and_answers_every_item() -> None:
    workflow = variant(MEMORY)
    by_name = nodes_by_name(workflow)
    rules = by_name["Action"]["parameters"]["rules"]["values"]
    actions = [r["conditions"]["conditions"][0]["rightValue"] for r in rules]
    assert actions == ["write", "read", "query"]
    operations = [
        by_name[node]["parameters"]["operation"]
        for node in ("Store Memory", "Read Memory", "Query Memories")
    ]
    assert operations == ["store", "get", "search"]
    for output, node in enumerate(("Store Memory", "Read Memory", "Query Memories")):
        assert targets(workflow, "Action", output) == [(node, 0)]
        assert targets(workflow, node) == [("All Results", output)]
    assert by_name["All Results"]["parameters"]["numberInputs"] == 3
    assert by_name["Reply"]["parameters"]["respondWith"] == "allIncomingItems"
