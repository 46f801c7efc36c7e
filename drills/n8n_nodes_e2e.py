"""The n8n node package (n8n-nodes/) in a real n8n: the nodes half of ``make n8n-e2e``.

drills/n8n_e2e.py starts Switchboard and n8n and calls ``install_package`` before n8n starts
and ``run_node_paths`` after; this module:
  1. builds the package and installs it the way n8n installs a community package (``npm
     pack``, unpacked into ``<n8n user folder>/.n8n/nodes/node_modules/n8n-nodes-switchboard``
     with its dev and peer dependencies dropped, then ``npm install`` inside it), so its nodes
     load under their published names (``n8n-nodes-switchboard.switchboard``) as the shipped
     workflow variants name them;
  2. creates the "Switchboard API" credentials through the editor's REST API and runs n8n's
     credential test on each (and on a wrong key, which must fail);
  3. runs every resource and operation of the Switchboard node in a published workflow of its
     own (a webhook in front of the node), checking the answers and Switchboard's rows;
  4. publishes a workflow with the Switchboard Trigger (a subscription appears), fires a real
     ``session.expiring`` event and waits for n8n's execution, then unpublishes it (the
     subscription is gone);
  5. inserts messages with n8n's Chat Memory Manager over the Switchboard Chat Memory in one
     workflow and reads them back in another.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from drills.n8n_e2e import N8n, Report, Switchboard

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "n8n-nodes"
NODES_README = PACKAGE / "README.md"
NODE = "n8n-nodes-switchboard.switchboard"
TRIGGER = "n8n-nodes-switchboard.switchboardTrigger"
CHAT_MEMORY = "n8n-nodes-switchboard.switchboardChatMemory"
MEMORY_MANAGER = "@n8n/n8n-nodes-langchain.memoryManager"


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def _npm(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        ["npm", *args, "--no-audit", "--no-fund"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise SystemExit(
            f"npm {' '.join(args)} in {cwd}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
        )
    return done.stdout


def install_package(n8n_folder: Path) -> str:
    """Build the package and install it as n8n installs a community package; its version."""
    if not (PACKAGE / "node_modules").exists():
        _npm("ci", cwd=PACKAGE)
    _npm("run", "build", cwd=PACKAGE)
    with tempfile.TemporaryDirectory() as packed:
        _npm("pack", "--pack-destination", packed, cwd=PACKAGE)
        (tarball,) = Path(packed).glob("*.tgz")
        target = n8n_folder / ".n8n" / "nodes" / "node_modules" / "n8n-nodes-switchboard"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        with tarfile.open(tarball) as archive:
            for member in archive.getmembers():
                member.name = member.name.split("/", 1)[1] if "/" in member.name else ""
                if member.name:
                    archive.extract(member, target, filter="data")
    manifest = json.loads((target / "package.json").read_text())
    for dropped in ("devDependencies", "peerDependencies", "optionalDependencies"):
        manifest.pop(dropped, None)
    (target / "package.json").write_text(json.dumps(manifest, indent=2))
    _npm("install", "--omit=dev", "--omit=peer", cwd=target)
    return str(manifest["version"])


# --------------------------------------------------------------------------- workflows


def _node(name: str, type_: str, version: float, parameters: dict[str, Any], x: int) -> Any:
    return {
        "parameters": parameters,
        "id": str(uuid.uuid4()),
        "name": name,
        "type": type_,
        "typeVersion": version,
        "position": [x, 300],
    }


def _webhook(path: str) -> dict[str, Any]:
    webhook = _node(
        "Call",
        "n8n-nodes-base.webhook",
        2,
        {
            "httpMethod": "POST",
            "path": path,
            "responseMode": "lastNode",
            "responseData": "allEntries",
            "options": {},
        },
        0,
    )
    webhook["webhookId"] = str(uuid.uuid4())
    return webhook


def operation_workflow(
    name: str, parameters: dict[str, Any], credential: dict[str, str], *, continue_on_fail: bool
) -> dict[str, Any]:
    """A webhook (POST /webhook/e2e-node-<name>) whose body feeds one Switchboard node."""
    switchboard = _node("Switchboard", NODE, 1, parameters, 240)
    switchboard["credentials"] = {"switchboardApi": credential}
    if continue_on_fail:
        switchboard["onError"] = "continueRegularOutput"
    return {
        "name": f"E2E node {name}",
        "nodes": [_webhook(f"e2e-node-{name}"), switchboard],
        "connections": {"Call": {"main": [[{"node": "Switchboard", "type": "main", "index": 0}]]}},
        "settings": {"executionOrder": "v1"},
    }


def trigger_workflow(credential: dict[str, str]) -> dict[str, Any]:
    trigger = _node("Switchboard Trigger", TRIGGER, 1, {"events": ["session.expiring"]}, 0)
    trigger["webhookId"] = str(uuid.uuid4())
    trigger["credentials"] = {"switchboardApi": credential}
    noop = _node("Received", "n8n-nodes-base.noOp", 1, {}, 240)
    return {
        "name": "E2E node trigger",
        "nodes": [trigger, noop],
        "connections": {
            "Switchboard Trigger": {"main": [[{"node": "Received", "type": "main", "index": 0}]]}
        },
        "settings": {"executionOrder": "v1", "saveDataSuccessExecution": "all"},
    }


def memory_workflow(
    name: str, manager: dict[str, Any], credential: dict[str, str]
) -> dict[str, Any]:
    """A webhook, then the Chat Memory Manager over the Switchboard Chat Memory (key from the
    body's ``chat``)."""
    memory = _node(
        "Switchboard Chat Memory",
        CHAT_MEMORY,
        1,
        {
            "sessionIdType": "customKey",
            "customSessionKey": "={{ $('Call').item.json.body.chat }}",
            "contextWindowLength": 5,
        },
        240,
    )
    memory["credentials"] = {"switchboardApi": credential}
    return {
        "name": f"E2E chat memory {name}",
        "nodes": [
            _webhook(f"e2e-chat-memory-{name}"),
            _node("Chat Memory Manager", MEMORY_MANAGER, 1.1, manager, 240),
            memory,
        ],
        "connections": {
            "Call": {"main": [[{"node": "Chat Memory Manager", "type": "main", "index": 0}]]},
            "Switchboard Chat Memory": {
                "ai_memory": [[{"node": "Chat Memory Manager", "type": "ai_memory", "index": 0}]]
            },
        },
        "settings": {"executionOrder": "v1"},
    }


def create_credential(n8n: N8n, name: str, base_url: str, key: str) -> dict[str, str]:
    created = n8n.rest(
        "POST",
        "/credentials",
        json={"name": name, "type": "switchboardApi", "data": {"baseUrl": base_url, "apiKey": key}},
    )
    return {"id": str(created["id"]), "name": name}


def test_credential(n8n: N8n, credential: dict[str, str], base_url: str, key: str) -> Any:
    """n8n's credential test (the editor's "Test" / save)."""
    return n8n.rest(
        "POST",
        "/credentials/test",
        json={
            "credentials": {
                **credential,
                "type": "switchboardApi",
                "data": {"baseUrl": base_url, "apiKey": key},
            }
        },
    )


# --------------------------------------------------------------------------- the paths


def run_node_paths(
    report: Report, n8n: N8n, sb: Switchboard, key: str, admin_key: str, sql: Any
) -> None:
    """Every node path; each a check of its own in the report (named "nodes: ...")."""
    db = sb.database_url
    state: dict[str, Any] = {}

    with report.path("nodes: the package is loaded under its published names") as d:
        assert n8n.client is not None
        listed = n8n.client.get("/types/nodes.json")  # what the editor's node panel reads
        _check(listed.status_code == 200, f"/types/nodes.json: {listed.status_code}")
        types = {t["name"] for t in listed.json()}
        _check({NODE, TRIGGER, CHAT_MEMORY} <= types, f"node types missing from {len(types)} types")
        d.append(f"{NODE}, {TRIGGER}, {CHAT_MEMORY} among {len(types)} node types")

    with report.path("nodes: credential test passes (and fails for a wrong key)") as d:
        credential = create_credential(n8n, "Switchboard API", sb.url, key)
        admin = create_credential(n8n, "Switchboard Admin", sb.url, admin_key)
        for cred, secret in ((credential, key), (admin, admin_key)):
            result = test_credential(n8n, cred, sb.url, secret)
            _check(result.get("status") == "OK", f"{cred['name']}: {result}")
        wrong = test_credential(n8n, credential, sb.url, "not-the-key-0123456789")
        _check(wrong.get("status") == "Error", f"a wrong key passed the test: {wrong}")
        unreachable = test_credential(n8n, credential, "http://127.0.0.1:9", key)
        _check(unreachable.get("status") == "Error", f"a wrong URL passed: {unreachable}")
        state["credential"], state["admin"] = credential, admin
        d.append(f"OK for the integration and the admin key; wrong key: {wrong.get('message')!r}")
    if "credential" not in state:
        return
    credential = state["credential"]

    def operation(name: str, parameters: dict[str, Any], *, continue_on_fail: bool = False) -> str:
        workflow = operation_workflow(
            name, parameters, credential, continue_on_fail=continue_on_fail
        )
        n8n.create_workflow(workflow)
        return f"e2e-node-{name}"

    def call(path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        response, _ = n8n.webhook(path, body)
        _check(response.status_code == 200, f"{path}: {response.status_code} {response.text[:600]}")
        answer = response.json()
        return answer if isinstance(answer, list) else [answer]

    expr = "={{ $json.body.%s }}".__mod__
    paths = {
        "session-create": operation(
            "session-create",
            {
                "resource": "session",
                "operation": "create",
                "user": expr("user"),
                "sessionType": "planning_session",
                "additionalFields": {
                    "sessionState": "={{ JSON.stringify($json.body.state || {}) }}",
                    "ttlSeconds": "={{ $json.body.ttl || 14400 }}",
                },
            },
        ),
        "session-get": operation(
            "session-get", {"resource": "session", "operation": "get", "sessionId": expr("id")}
        ),
        "session-update": operation(
            "session-update",
            {
                "resource": "session",
                "operation": "update",
                "sessionId": expr("id"),
                "versionCheck": "version",
                "baseVersion": "={{ $json.body.version }}",
                "mergeMode": "merge",
                "updateFields": {
                    "progressPercentage": 40,
                    "sessionState": '{"agent_outputs": {"n8n": {"draft": 1}}}',
                },
            },
            continue_on_fail=True,
        ),
        "session-handoff": operation(
            "session-handoff",
            {
                "resource": "session",
                "operation": "handoff",
                "sessionId": expr("id"),
                "toAgent": "Educate_Customer_Agent",
                "reason": "the user asked what a budget is",
                "handoffFields": {},
            },
        ),
        "session-versions": operation(
            "session-versions",
            {
                "resource": "session",
                "operation": "listVersions",
                "sessionId": expr("id"),
                "returnAll": True,
            },
        ),
        "session-rollback": operation(
            "session-rollback",
            {
                "resource": "session",
                "operation": "rollback",
                "sessionId": expr("id"),
                "toVersion": 1,
            },
        ),
        "session-touch": operation(
            "session-touch", {"resource": "session", "operation": "touch", "sessionId": expr("id")}
        ),
        "session-complete": operation(
            "session-complete",
            {
                "resource": "session",
                "operation": "complete",
                "sessionId": expr("id"),
                "outputSummary": "done in n8n",
            },
        ),
        "memory-store": operation(
            "memory-store",
            {
                "resource": "memory",
                "operation": "store",
                "user": expr("user"),
                "memoryType": "planning",
                "content": "={{ JSON.stringify($json.body.content) }}",
                "additionalFields": {"sessionId": expr("session")},
            },
            continue_on_fail=True,
        ),
        "memory-by-key": operation(
            "memory-by-key",
            {
                "resource": "memory",
                "operation": "storeByKey",
                "user": expr("user"),
                "memoryType": "data_collection",
                "category": "user_profile",
                "key": "risk_profile",
                "content": "={{ JSON.stringify($json.body.content) }}",
                "additionalFields": {},
            },
        ),
        "memory-get": operation(
            "memory-get", {"resource": "memory", "operation": "get", "memoryId": expr("id")}
        ),
        "memory-search": operation(
            "memory-search",
            {
                "resource": "memory",
                "operation": "search",
                "filters": {"user": expr("user")},
                "returnAll": False,
                "limit": 10,
            },
        ),
        "memory-delete": operation(
            "memory-delete", {"resource": "memory", "operation": "delete", "memoryId": expr("id")}
        ),
        "coordination": operation(
            "coordination",
            {
                "resource": "coordination",
                "operation": "sendMessage",
                "user": expr("user"),
                "text": expr("text"),
                "additionalFields": {"channel": "n8n"},
            },
        ),
        "task-submit": operation(
            "task-submit",
            {
                "resource": "coordination",
                "operation": "submitTask",
                "agentName": "Make_Plan_Agent",
                "input": "={{ JSON.stringify($json.body.input) }}",
                "taskFields": {
                    "sessionId": expr("session"),
                    "scheduledAt": "={{ $json.body.at || '' }}",
                },
            },
        ),
        "task-get": operation(
            "task-get", {"resource": "coordination", "operation": "getTask", "taskId": expr("id")}
        ),
        "task-wait": operation(
            "task-wait",
            {
                "resource": "coordination",
                "operation": "waitTask",
                "taskId": expr("id"),
                "timeout": 30,
                "pollInterval": 0.5,
            },
        ),
        "task-list": operation(
            "task-list",
            {
                "resource": "coordination",
                "operation": "listTasks",
                "sessionId": expr("session"),
                "returnAll": True,
            },
        ),
        "task-cancel": operation(
            "task-cancel",
            {
                "resource": "coordination",
                "operation": "cancelTask",
                "taskId": expr("id"),
                "reason": "cancelled from n8n",
            },
            continue_on_fail=True,
        ),
        "job-dry": operation(
            "job-dry", {"resource": "job", "operation": "dryRun", "job": "inactivity_timeout"}
        ),
        "job-run": operation("job-run", {"resource": "job", "operation": "run", "job": "all"}),
    }
    user = f"n8n-nodes-e2e-{uuid.uuid4().hex[:8]}"

    with report.path("nodes: session create, get, update (If-Match), stale 409 as an item") as d:
        created = call(
            paths["session-create"], {"user": user, "state": {"active_process": "budget_plan"}}
        )[0]
        _check(created.get("version") == 1, f"create: {created}")
        sid = state["session"] = created["session_id"]
        got = call(paths["session-get"], {"id": sid})[0]
        _check(got["session_state"]["active_process"] == "budget_plan", f"get: {got}")
        updated = call(paths["session-update"], {"id": sid, "version": 1})[0]
        _check(updated.get("version") == 2 and updated["progress_percentage"] == 40, f"{updated}")
        _check(updated["session_state"]["active_process"] == "budget_plan", "merged, not replaced")
        stale = call(paths["session-update"], {"id": sid, "version": 1})[0]
        _check(
            stale["error"]["status"] == 409 and "409" in stale["error"]["message"],
            f"stale: {stale}",
        )
        row = sql(
            db, "SELECT version FROM session_coordination WHERE session_id = $1", uuid.UUID(sid)
        )
        _check(row[0]["version"] == 2, f"the stale write changed the row: {row}")
        d.append("versions 1 → 2, the stale write is item {error: {status: 409}}, row at version 2")

    with report.path("nodes: session hand off, list versions, roll back, touch, complete") as d:
        sid = state["session"]
        handed = call(paths["session-handoff"], {"id": sid})[0]
        _check(handed.get("current_agent") == "Educate_Customer_Agent", f"handoff: {handed}")
        versions = call(paths["session-versions"], {"id": sid})
        _check([v.get("version") for v in versions] == [3, 2, 1], f"versions: {versions}")
        rolled = call(paths["session-rollback"], {"id": sid})[0]
        _check(
            rolled.get("version") == 4 and rolled.get("progress_percentage") in (None, 0),
            f"{rolled}",
        )
        touched = call(paths["session-touch"], {"id": sid})[0]
        _check(touched.get("version") == 4, f"touch made a version: {touched}")
        completed = call(paths["session-complete"], {"id": sid})[0]
        _check(completed.get("status") == "completed", f"complete: {completed}")
        d.append(
            "handed to Educate_Customer_Agent, versions [3, 2, 1], rolled back as v4, completed"
        )

    with report.path(
        "nodes: memory store, store by key, get, search, delete; a 422 as an item"
    ) as d:
        stored = call(
            paths["memory-store"],
            {"user": user, "content": {"goal": "save 10%"}, "session": state.get("session")},
        )[0]
        _check(stored.get("category") == "agent_outputs", f"store: {stored}")
        keyed = call(paths["memory-by-key"], {"user": user, "content": {"risk": "low"}})[0]
        again = call(paths["memory-by-key"], {"user": user, "content": {"risk": "high"}})[0]
        _check(
            again.get("memory_id") == keyed.get("memory_id")
            and again["content"] == {"risk": "high"},
            f"{again}",
        )
        got = call(paths["memory-get"], {"id": stored["memory_id"]})[0]
        _check(got.get("content") == {"goal": "save 10%"}, f"get: {got}")
        found = call(paths["memory-search"], {"user": user})
        _check(
            {m.get("memory_id") for m in found} == {stored["memory_id"], keyed["memory_id"]},
            f"search: {found}",
        )
        deleted = call(paths["memory-delete"], {"id": stored["memory_id"]})[0]
        _check(deleted == {"memory_id": stored["memory_id"], "deleted": True}, f"delete: {deleted}")
        gone = sql(
            db,
            "SELECT count(*) AS n FROM memories WHERE memory_id = $1",
            uuid.UUID(stored["memory_id"]),
        )
        _check(gone[0]["n"] == 0, "the memory row is still there")
        invalid = call(paths["memory-store"], {"user": user, "content": "\u0000"})[0]
        _check(
            invalid["error"]["status"] == 422 and "content" in invalid["error"]["description"],
            f"{invalid}",
        )
        d.append(
            "stored, replaced by key, read, found 2, deleted (row gone); NUL content: 422 naming content"
        )

    with report.path(
        "nodes: coordination, a message and its answer (Idempotency-Key per item)"
    ) as d:
        answer = call(
            paths["coordination"], {"user": user, "text": "I want to make a budget plan"}
        )[0]
        _check(bool(answer.get("response")) and answer.get("session_id"), f"coordination: {answer}")
        keys = sql(
            db, "SELECT key FROM idempotency_keys WHERE endpoint = $1", "/webhooks/n8n/coordination"
        )
        _check(
            any(r["key"].startswith("n8n:") and r["key"].endswith(":0") for r in keys),
            f"keys: {keys}",
        )
        d.append(
            f"{answer.get('agent')} answered, degraded={answer.get('degraded')}; key per execution and item"
        )

    with report.path(
        "nodes: durable task submit, get, wait until completed, list, cancel a queued one"
    ) as d:
        session = call(paths["session-create"], {"user": user})[0]["session_id"]
        submitted = call(
            paths["task-submit"], {"session": session, "input": {"message": "plan from n8n"}}
        )[0]
        _check(submitted.get("agent_name") == "Make_Plan_Agent", f"submit: {submitted}")
        tid = submitted["task_id"]
        got = call(paths["task-get"], {"id": tid})[0]
        _check(got["task"]["task_id"] == tid and got["transitions"], f"get: {got}")
        started = time.monotonic()
        waited = call(paths["task-wait"], {"id": tid})[0]
        took = time.monotonic() - started
        _check(waited["task"]["status"] == "completed", f"wait: {waited}")
        later = (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)).isoformat()
        queued = call(
            paths["task-submit"], {"session": session, "input": {"message": "later"}, "at": later}
        )[0]
        _check(queued.get("status") == "submitted", f"queued: {queued}")
        listed = call(paths["task-list"], {"session": session})
        _check([t.get("task_id") for t in listed] == [queued["task_id"], tid], f"list: {listed}")
        canceled = call(paths["task-cancel"], {"id": queued["task_id"]})[0]
        _check(canceled.get("status") == "canceled", f"cancel: {canceled}")
        again = call(paths["task-cancel"], {"id": queued["task_id"]})[0]
        _check(again.get("error", {}).get("status") == 409, f"second cancel: {again}")
        row = sql(db, "SELECT status FROM agent_tasks WHERE task_id = $1", uuid.UUID(tid))
        _check(row[0]["status"] == "completed", f"row: {row}")
        d.append(
            f"Make_Plan_Agent's task completed (wait {took:.1f} s), 2 listed newest first, "
            "the queued one canceled, a second cancel is item {error: {status: 409}}"
        )

    with report.path("nodes: job dry run and run now") as d:
        dry = call(paths["job-dry"], {})[0]
        _check("inactivity_timeout" in json.dumps(dry), f"dry run: {dry}")
        ran = call(paths["job-run"], {})[0]
        _check("expiry_cleanup" in json.dumps(ran), f"run: {ran}")
        d.append("dry run counted, all jobs ran")

    with report.path("nodes: trigger subscribes, fires on a real event, unsubscribes") as d:
        workflow_id = n8n.create_workflow(trigger_workflow(state["admin"]))
        headers = {"X-API-Key": admin_key}
        subscriptions = httpx.get(f"{sb.url}/v1/subscriptions", headers=headers, timeout=10).json()
        mine = [s for s in subscriptions if s["url"].startswith(n8n.url)]
        _check(
            len(mine) == 1 and mine[0]["event_types"] == ["session.expiring"], f"{subscriptions}"
        )
        # A session that expires within the warning window (no running process, which
        # would keep it alive), announced by its job.
        expiring = call(paths["session-create"], {"user": f"{user}-expiring", "ttl": 300})[0]
        run = httpx.post(f"{sb.url}/v1/jobs/expiry_warning/run", headers=headers, timeout=30)
        _check(run.status_code == 200, f"expiry_warning: {run.status_code} {run.text}")
        deadline, executions = time.monotonic() + 60, []
        while time.monotonic() < deadline and not executions:
            executions = [e for e in n8n.executions(workflow_id) if e.get("status") == "success"]
            time.sleep(0.5)
        _check(len(executions) >= 1, "no trigger execution within 60 s")
        delivered = sql(
            db,
            "SELECT status FROM event_deliveries d JOIN outbox_events e USING (event_id) WHERE e.event_type = 'session.expiring'",
        )
        _check(any(r["status"] == "delivered" for r in delivered), f"deliveries: {delivered}")
        execution = n8n.rest("GET", f"/executions/{executions[0]['id']}")
        _check(
            expiring["session_id"] in json.dumps(execution),
            "the execution does not carry the session",
        )
        n8n.rest("POST", f"/workflows/{workflow_id}/deactivate")
        after = httpx.get(f"{sb.url}/v1/subscriptions", headers=headers, timeout=10).json()
        _check(not [s for s in after if s["url"].startswith(n8n.url)], f"still subscribed: {after}")
        d.append(
            "subscription created on publish, session.expiring delivered signed and run, removed on unpublish"
        )

    with report.path(
        "nodes: Chat Memory Manager over the Switchboard Chat Memory, two workflows"
    ) as d:
        insert = {
            "mode": "insert",
            "insertMode": "insert",
            "messages": {
                "messageValues": [
                    {"type": "user", "message": "={{ $json.body.question }}"},
                    {"type": "ai", "message": "={{ $json.body.answer }}"},
                ]
            },
        }
        load = {"mode": "load", "simplifyOutput": True, "options": {}}
        n8n.create_workflow(memory_workflow("insert", insert, credential))
        n8n.create_workflow(memory_workflow("load", load, state["admin"]))
        chat = f"chat-{uuid.uuid4().hex[:8]}"
        call(
            "e2e-chat-memory-insert",
            {"chat": chat, "question": "hi, I am Ada", "answer": "hello Ada"},
        )
        call(
            "e2e-chat-memory-insert",
            {"chat": chat, "question": "a budget?", "answer": "here it is"},
        )
        loaded = call("e2e-chat-memory-load", {"chat": chat})[0]
        _check(
            loaded.get("messages")
            == [
                {"human": "hi, I am Ada", "ai": "hello Ada"},
                {"human": "a budget?", "ai": "here it is"},
            ],
            f"read back by the other workflow: {loaded}",
        )
        rows = sql(
            db,
            "SELECT m.session_id, m.category FROM memories m JOIN users u ON u.id = m.user_id"
            " WHERE u.external_ref = $1",
            f"n8n-chat:{chat}",
        )
        _check(len(rows) == 4 and len({r["session_id"] for r in rows}) == 1, f"rows: {rows}")
        _check({r["category"] for r in rows} == {"session_data"}, f"categories: {rows}")
        d.append(
            "4 messages inserted by one workflow, read back in order by another (another key); 4 session_data memories of one session"
        )

    run_variant_paths(report, n8n, sb, credential, sql)


# --------------------------------------------------------------------------- the variants

VARIANTS = ROOT / "n8n-workflows" / "with-nodes"


def import_variant(n8n: N8n, file: str, credential: dict[str, str]) -> str:
    """A shipped variant as the editor imports it: its Switchboard nodes given the credential
    (what picking "Switchboard API" in each does), saved and published."""
    workflow = json.loads((VARIANTS / file).read_text())
    for node in workflow["nodes"]:
        if "switchboardApi" in node.get("credentials", {}):
            node["credentials"]["switchboardApi"] = credential
    body = {k: workflow[k] for k in ("name", "nodes", "connections", "settings")}
    return n8n.create_workflow(body)


def run_variant_paths(
    report: Report, n8n: N8n, sb: Switchboard, credential: dict[str, str], sql: Any
) -> None:
    """The three workflows of n8n-workflows/with-nodes/, imported unchanged but for the
    credential, called as their README says."""
    db = sb.database_url
    user = f"variant-{uuid.uuid4().hex[:8]}"

    with report.path("nodes: variant 11, a chat message and a refused one") as d:
        import_variant(n8n, "11_agent_coordination_manager.json", credential)
        response, took = n8n.webhook(
            "switchboard-chat-nodes",
            {"user_id": user, "text": "I want to make a budget plan", "channel": "telegram"},
        )
        _check(response.status_code == 200, f"{response.status_code} {response.text[:400]}")
        body = response.json()
        _check(bool(body.get("response")) and body.get("session_id"), f"reply: {body}")
        refused, _ = n8n.webhook("switchboard-chat-nodes", {"user_id": user})
        _check(refused.status_code == 422, f"no text: {refused.status_code} {refused.text[:400]}")
        _check("text" in refused.text, f"the problem does not name text: {refused.text[:400]}")
        d.append(f"200 from {body.get('agent')} in {took:.1f} s; no text: 422 naming text")

    with report.path("nodes: variant 12, write, query, read; a refused write") as d:
        import_variant(n8n, "12_memory_management_agent.json", credential)
        written, _ = n8n.webhook(
            "switchboard-memory-nodes",
            {
                "action": "write",
                "user_id": user,
                "memory_type": "planning",
                "memory_content": {"goal": "save"},
            },
        )
        _check(written.status_code == 200, f"write: {written.status_code} {written.text[:400]}")
        memory = written.json()
        memory = memory[0] if isinstance(memory, list) else memory
        _check(memory.get("content") == {"goal": "save"}, f"write: {memory}")
        queried, _ = n8n.webhook("switchboard-memory-nodes", {"action": "query", "user_id": user})
        found = queried.json() if isinstance(queried.json(), list) else [queried.json()]
        _check([m.get("memory_id") for m in found] == [memory["memory_id"]], f"query: {found}")
        read, _ = n8n.webhook(
            "switchboard-memory-nodes", {"action": "read", "memory_id": memory["memory_id"]}
        )
        got = read.json()
        got = got[0] if isinstance(got, list) else got
        _check(got.get("memory_id") == memory["memory_id"], f"read: {got}")
        bad, _ = n8n.webhook(
            "switchboard-memory-nodes",
            {
                "action": "write",
                "user_id": user,
                "memory_type": "no_such_type",
                "memory_content": 1,
            },
        )
        problem = bad.json()
        problem = problem[0] if isinstance(problem, list) else problem
        _check(
            problem["error"]["status"] == 422 and "memory_type" in problem["error"]["description"],
            f"{problem}",
        )
        d.append(
            "written, found by query, read by id; unknown type: item {error: {status: 422}} naming memory_type"
        )

    with report.path("nodes: variant 13, `n8n execute --id` runs every cleanup job") as d:
        workflow_id = import_variant(n8n, "13_session_cleanup_scheduler.json", credential)
        before = sql(db, "SELECT count(*) AS n FROM job_runs WHERE trigger = 'manual'")[0]["n"]
        done = n8n.cli("execute", f"--id={workflow_id}")
        _check(done.returncode == 0, f"n8n execute: {done.stdout[-600:]}{done.stderr[-600:]}")
        after = sql(db, "SELECT count(*) AS n FROM job_runs WHERE trigger = 'manual'")[0]["n"]
        _check(after > before, f"no job runs recorded ({before} → {after})")
        d.append(f"{after - before} job runs recorded")
