"""The three n8n workflows in a real n8n, end to end: ``make n8n-e2e``.

What a user does after reading n8n-workflows/README.md, scripted:
  1. installs n8n (``npm install n8n@2.8.4``, cached under ~/.cache/switchboard/), community
     edition, no licence, its own user folder in a temporary directory;
  2. runs a real ``switchboard serve`` on a free port against a fresh database (the machine's
     PostgreSQL from SWITCHBOARD_TEST_DATABASE_URL, else the embedded one), creates the
     integration key with ``switchboard agents create``;
  3. imports the credential and the three workflow files UNCHANGED with the n8n CLI,
     makes the README's one edit (the base URL in each Settings node) through the REST API
     the editor uses, and publishes the workflows;
then calls every path and checks the answers and Switchboard's rows in PostgreSQL: chat
message valid, invalid (Switchboard's 422 passed through, not retried), and through another
workflow; memory writes valid, invalid, refused by Switchboard, over 1 MB in UTF-8 bytes,
several items through another workflow; cleanup with ``n8n execute --id``, a rerun within
the hour, a failed job (the execution fails; the alert is posted when configured); and
Switchboard unreachable (degraded chat answer, 502, failed cleanup). Then, with Switchboard
started again, the n8n node package (n8n-nodes/, installed into n8n before it starts):
drills/n8n_nodes_e2e.py.

    .venv/bin/python -m drills.n8n_e2e [--record] [--keep] [--only workflows|nodes]

--record writes the run's summary into n8n-workflows/README.md and n8n-nodes/README.md
(between the n8n-e2e markers); --keep leaves the temporary folder and the database for a look afterwards.
Talks only to 127.0.0.1 (and to the npm registry for the first install).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.serve import free_port  # noqa: E402
from drills.n8n_nodes_e2e import NODES_README, install_package, run_node_paths  # noqa: E402
from tests import dbutil  # noqa: E402
from tests.agent_server import AgentServer  # noqa: E402

N8N_VERSION = os.environ.get("N8N_E2E_VERSION", "2.8.4")
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "switchboard"
WORKFLOWS = ROOT / "n8n-workflows"
README = WORKFLOWS / "README.md"
FILES = {
    "chat": "11_agent_coordination_manager.json",
    "memory": "12_memory_management_agent.json",
    "cleanup": "13_session_cleanup_scheduler.json",
}
SWITCHBOARD = Path(sys.executable).parent / "switchboard"
ROLE = ("--role", "coordination_manager")
DEFAULT_URL = "http://127.0.0.1:8080"  # what the shipped Settings nodes point at
OWNER = {
    "email": "e2e@example.com",
    "firstName": "End",
    "lastName": "ToEnd",
    "password": "Switchboard-e2e-1",
}
# n8n-nodes-base depends on xlsx from the SheetJS CDN, which npm cannot reach from machines
# that only reach the npm registry; the registry's xlsx (used only by the Spreadsheet File
# node, which these workflows do not use) takes its place.
PACKAGE_JSON = {
    "name": "switchboard-n8n-e2e",
    "private": True,
    "overrides": {"xlsx": "0.18.5"},
}


# --------------------------------------------------------------------------- the report


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    seconds: float


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    @contextlib.contextmanager
    def path(self, name: str) -> Iterator[list[str]]:
        """Time one path; the body appends its detail line; an AssertionError fails it."""
        detail: list[str] = []
        started = time.monotonic()
        try:
            yield detail
        except AssertionError as exc:
            self._add(
                Check(name, False, str(exc) or "assertion failed", time.monotonic() - started)
            )
        except Exception as exc:  # a broken step is a failed path, the others still run
            message = f"{type(exc).__name__}: {exc}"
            self._add(Check(name, False, message, time.monotonic() - started))
        else:
            self._add(Check(name, True, "; ".join(detail), time.monotonic() - started))

    def _add(self, check: Check) -> None:
        self.checks.append(check)
        mark = "ok  " if check.ok else "FAIL"
        print(f"[{mark}] {check.name} ({check.seconds:.1f} s): {check.detail}", flush=True)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)


def check(condition: bool, message: str) -> None:
    """An assertion that survives ``python -O``."""
    if not condition:
        raise AssertionError(message)


# --------------------------------------------------------------------------- processes


def install_n8n() -> Path:
    """n8n under the cache folder (npm install once; minutes and ~2.5 GB)."""
    home = CACHE / f"n8n-{N8N_VERSION}"
    binary = home / "node_modules" / ".bin" / "n8n"
    if binary.exists():
        return binary
    if shutil.which("npm") is None:
        raise SystemExit("npm is needed to install n8n (Node.js 20.19 or newer)")
    home.mkdir(parents=True, exist_ok=True)
    (home / "package.json").write_text(json.dumps(PACKAGE_JSON, indent=2) + "\n")
    print(f"installing n8n {N8N_VERSION} into {home} (once; takes minutes) ...", flush=True)
    with (home / "install.log").open("w") as log:
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", f"n8n@{N8N_VERSION}"],
            cwd=home,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if done.returncode != 0 or not binary.exists():
        raise SystemExit(f"npm install failed; see {home / 'install.log'}")
    return binary


def stop(process: subprocess.Popen[bytes] | None) -> None:
    """End a process this script started (its own process group), politely, then not."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)


def wait_until(probe: Callable[[], bool], seconds: float, what: str, process: Any = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise SystemExit(f"{what}: the process exited ({process.returncode})")
        with contextlib.suppress(httpx.HTTPError):
            if probe():
                return
        time.sleep(0.3)
    raise SystemExit(f"{what}: not ready within {seconds:.0f} s")


@dataclass
class Switchboard:
    url: str
    database_url: str
    env: dict[str, str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(SWITCHBOARD), "serve"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_until(
            lambda: httpx.get(f"{self.url}/ready", timeout=2).status_code == 200,
            60,
            "switchboard serve",
            self.process,
        )

    def stop(self) -> None:
        stop(self.process)

    def integration_key(self) -> str:
        """What the README's step 1 does: a coordination_manager agent's key."""
        done = subprocess.run(
            [str(SWITCHBOARD), "agents", "create", "Orchestrator_Agent", *ROLE],
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        match = re.search(r"API key[^:]*:\s*(\S+)", done.stdout)
        if done.returncode != 0 or match is None:
            raise SystemExit(f"switchboard agents create failed: {done.stdout}{done.stderr}")
        return match.group(1)


@dataclass
class N8n:
    binary: Path
    folder: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    client: httpx.Client | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, broker_port: int) -> dict[str, str]:
        return {
            "PATH": os.environ["PATH"],
            "HOME": str(self.folder),
            "N8N_USER_FOLDER": str(self.folder),
            "N8N_PORT": str(self.port),
            "N8N_LISTEN_ADDRESS": "127.0.0.1",
            "N8N_RUNNERS_BROKER_PORT": str(broker_port),  # the Code nodes' task runner
            "N8N_DIAGNOSTICS_ENABLED": "false",
            "N8N_VERSION_NOTIFICATIONS_ENABLED": "false",
            "N8N_TEMPLATES_ENABLED": "false",
            "N8N_PERSONALIZATION_ENABLED": "false",
            "N8N_SECURE_COOKIE": "false",  # the editor's cookie over plain http on 127.0.0.1
            "N8N_LOG_LEVEL": "info",
            # The address the Switchboard Trigger subscribes (localhost may resolve to ::1).
            "WEBHOOK_URL": f"http://127.0.0.1:{self.port}/",
            "NODE_ENV": "production",
            "GENERIC_TIMEZONE": "UTC",
        }

    def cli(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
        """One n8n CLI command on the same database (its own task-runner port)."""
        return subprocess.run(
            [str(self.binary), *args],
            env=self.env(free_port()),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self) -> None:
        with (self.folder / "n8n.log").open("ab") as log:
            self.process = subprocess.Popen(
                [str(self.binary), "start"],
                env=self.env(free_port()),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        log_file = self.folder / "n8n.log"
        wait_until(
            lambda: "Editor is now accessible" in log_file.read_text(errors="replace"),
            240,
            "n8n start",
            self.process,
        )
        self.client = httpx.Client(base_url=self.url, timeout=30)
        setup = self.client.post("/rest/owner/setup", json=OWNER)
        if setup.status_code != 200:  # a second start: the owner exists, log in
            login = self.client.post(
                "/rest/login",
                json={"emailOrLdapLoginId": OWNER["email"], "password": OWNER["password"]},
            )
            login.raise_for_status()

    def stop(self) -> None:
        if self.client is not None:
            self.client.close()
        stop(self.process)

    def rest(self, method: str, path: str, **kwargs: Any) -> Any:
        assert self.client is not None
        response = self.client.request(method, f"/rest{path}", **kwargs)
        if response.status_code >= 400:
            raise AssertionError(f"n8n {method} {path}: {response.status_code} {response.text}")
        return response.json().get("data")

    def workflow_ids(self) -> dict[str, str]:
        return {w["name"]: w["id"] for w in self.rest("GET", "/workflows")}

    def set_base_url(self, workflow_id: str, url: str) -> None:
        """The README's one edit, as the editor makes it: in the Settings node, the default
        address becomes this Switchboard's; then save."""
        workflow = self.rest("GET", f"/workflows/{workflow_id}")
        edited = 0
        for node in workflow["nodes"]:
            if node["name"] != "Settings":
                continue
            for field_ in node["parameters"]["assignments"]["assignments"]:
                if DEFAULT_URL in field_["value"]:
                    field_["value"] = field_["value"].replace(DEFAULT_URL, url)
                    edited += 1
        check(edited == 1, f"{workflow['name']}: {edited} base URLs in Settings, expected 1")
        self.save(workflow)

    def set_alert_url(self, workflow_id: str, url: str) -> None:
        workflow = self.rest("GET", f"/workflows/{workflow_id}")
        for node in workflow["nodes"]:
            if node["name"] == "Settings":
                for field_ in node["parameters"]["assignments"]["assignments"]:
                    if field_["name"] == "alert_url":
                        field_["value"] = url
        self.save(workflow)

    def save(self, workflow: dict[str, Any]) -> None:
        body = {
            k: workflow[k]
            for k in ("name", "nodes", "connections", "settings", "versionId")
            if k in workflow
        }
        saved = self.rest("PATCH", f"/workflows/{workflow['id']}", json=body)
        if saved.get("activeVersionId"):  # published before: publish the edit too
            self.publish(workflow["id"])

    def publish(self, workflow_id: str) -> None:
        """The editor's Publish button."""
        current = self.rest("GET", f"/workflows/{workflow_id}")
        self.rest(
            "POST", f"/workflows/{workflow_id}/activate", json={"versionId": current["versionId"]}
        )

    def create_workflow(self, workflow: dict[str, Any]) -> str:
        created = self.rest("POST", "/workflows", json=workflow)
        workflow_id: str = created["id"]
        self.publish(workflow_id)
        return workflow_id

    def executions(self, workflow_id: str) -> list[dict[str, Any]]:
        data = self.rest(
            "GET", "/executions", params={"filter": json.dumps({"workflowId": workflow_id})}
        )
        results: list[dict[str, Any]] = data["results"]
        return results

    def webhook(self, path: str, body: Any, **headers: str) -> tuple[httpx.Response, float]:
        started = time.monotonic()
        response = httpx.post(f"{self.url}/webhook/{path}", json=body, headers=headers, timeout=600)
        return response, time.monotonic() - started


class Agents:
    """A real agent (tests/agent_server.py) on 127.0.0.1 behind every registered agent, on a
    loop of its own, so a chat message gets a real agent's answer (not the fallback)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.server = asyncio.run_coroutine_threadsafe(AgentServer().start(), self.loop).result(10)

    def register(self, switchboard: str, admin_key: str) -> list[str]:
        headers = {"X-API-Key": admin_key}
        agents = httpx.get(f"{switchboard}/v1/agents", headers=headers, timeout=10).json()
        names = [a["name"] for a in (agents["items"] if isinstance(agents, dict) else agents)]
        for name in names:
            patched = httpx.patch(
                f"{switchboard}/v1/agents/{name}",
                json={"url": self.server.url},
                headers=headers,
                timeout=10,
            )
            patched.raise_for_status()
        return names

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)


class AlertSink:
    """A local endpoint for the cleanup alert: records each POST body."""

    def __init__(self) -> None:
        received: list[Any] = []
        self.received = received

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                received.append(json.loads(self.rfile.read(length) or b"null"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alert"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def sql(database_url: str, query: str, *args: Any) -> list[asyncpg.Record]:
    async def fetch() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(database_url)
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()

    return asyncio.run(fetch())


# --------------------------------------------------------------------------- callers


def caller(name: str, path: str, target_id: str) -> dict[str, Any]:
    """A workflow of the user's own: its webhook takes {"items": [...]} and hands them, all
    at once, to ``target_id`` with an Execute Workflow node; it answers every item back."""

    def node(name_: str, type_: str, version: float, parameters: dict[str, Any], x: int) -> Any:
        return {
            "parameters": parameters,
            "id": str(uuid.uuid4()),
            "name": name_,
            "type": f"n8n-nodes-base.{type_}",
            "typeVersion": version,
            "position": [x, 300],
        }

    webhook = node(
        "Batch",
        "webhook",
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
    return {
        "name": name,
        "nodes": [
            webhook,
            node(
                "Items",
                "code",
                2,
                {"jsCode": "return $json.body.items.map((json) => ({ json }));"},
                220,
            ),
            node(
                "Call Switchboard Workflow",
                "executeWorkflow",
                1.3,
                {
                    "workflowId": {"__rl": True, "value": target_id, "mode": "id"},
                    "workflowInputs": {
                        "mappingMode": "defineBelow",
                        "value": {},
                        "matchingColumns": [],
                        "schema": [],
                        "attemptToConvertTypes": False,
                        "convertFieldsToString": True,
                    },
                    "mode": "once",
                    "options": {"waitForSubWorkflow": True},
                },
                440,
            ),
        ],
        "connections": {
            "Batch": {"main": [[{"node": "Items", "type": "main", "index": 0}]]},
            "Items": {
                "main": [[{"node": "Call Switchboard Workflow", "type": "main", "index": 0}]]
            },
        },
        "settings": {"executionOrder": "v1"},
    }


# --------------------------------------------------------------------------- the paths


def run_paths(report: Report, n8n: N8n, sb: Switchboard, ids: dict[str, str]) -> None:
    db = sb.database_url
    chat_id, memory_id, cleanup_id = ids["chat"], ids["memory"], ids["cleanup"]
    telegram_user = str(900_000 + secrets.randbelow(99_999))
    state: dict[str, Any] = {}

    with report.path("chat: valid message") as detail:
        response, took = n8n.webhook(
            "switchboard-chat",
            {
                "user_id": int(telegram_user),
                "text": "I lost my job. Can you make me a new budget?",
                "channel": "telegram",
            },
        )
        check(response.status_code == 200, f"{response.status_code} {response.text}")
        body = response.json()
        check(bool(body.get("session_id")) and body.get("response"), f"no reply: {body}")
        check(body.get("degraded") is False, f"a real agent answered, yet degraded: {body}")
        check(response.headers["content-type"].startswith("application/json"), "content-type")
        check(response.headers.get("x-switchboard-tries") == "1", "tried more than once")
        rows = sql(
            db,
            "SELECT s.session_id, u.id AS user_id FROM session_coordination s"
            " JOIN users u ON u.id = s.user_id WHERE u.external_ref = $1",
            telegram_user,
        )
        check(
            len(rows) == 1 and str(rows[0]["session_id"]) == body["session_id"],
            f"session row for user_ref {telegram_user}: {rows}",
        )
        keys = sql(
            db, "SELECT key FROM idempotency_keys WHERE endpoint = $1", "/webhooks/n8n/coordination"
        )
        check(any(r["key"].startswith(f"n8n:{chat_id}:") for r in keys), f"keys: {keys}")
        state["user_id"] = str(rows[0]["user_id"])
        detail.append(
            f"200 from {body.get('agent')}, degraded={body.get('degraded')}, "
            f"session row in PostgreSQL, key {keys[-1]['key'][:22]}..., {took:.1f} s"
        )

    with report.path("chat: invalid message (no text) is Switchboard's 422, not retried") as d:
        response, took = n8n.webhook("switchboard-chat", {"user_id": int(telegram_user)})
        check(response.status_code == 422, f"{response.status_code} {response.text}")
        check(
            response.headers["content-type"].startswith("application/problem+json"),
            response.headers["content-type"],
        )
        problem = response.json()
        check(
            any(e.get("field", "").endswith("text") for e in problem.get("errors", [])),
            f"no field error for text: {problem}",
        )
        check("degraded" not in problem, "reported as an outage")
        check(
            response.headers.get("x-switchboard-tries") == "1" and took < 2,
            f"retried: tries={response.headers.get('x-switchboard-tries')}, {took:.1f} s",
        )
        d.append(
            f"422 problem+json naming {[e['field'] for e in problem['errors']]}, "
            f"1 try, {took:.1f} s"
        )

    with report.path("chat: 3 messages through another workflow (Execute Workflow)") as d:
        batch_user = f"batch-{telegram_user}"
        response, took = n8n.webhook(
            "e2e-chat-batch",
            {
                "items": [
                    {"user_ref": batch_user, "text": "Hello, I want to learn about budgeting"},
                    {"user_ref": batch_user},
                    {"user_ref": batch_user + "-b", "text": "Make me a plan"},
                ]
            },
        )
        check(response.status_code == 200, f"{response.status_code} {response.text}")
        results = response.json()
        check([r["status"] for r in results] == [200, 422, 200], f"{results}")
        check([r["ok"] for r in results] == [True, False, True], f"{results}")
        check([r["degraded"] for r in results] == [False, False, False], f"{results}")
        rows = sql(
            db,
            "SELECT count(*) AS n FROM session_coordination s JOIN users u"
            " ON u.id = s.user_id WHERE u.external_ref IN ($1, $2)",
            batch_user,
            batch_user + "-b",
        )
        check(rows[0]["n"] == 2, f"{rows[0]['n']} sessions, expected 2")
        d.append(
            f"statuses {[r['status'] for r in results]}, 2 sessions in PostgreSQL, {took:.1f} s"
        )

    user_id = state.get("user_id") or sql(db, "SELECT id FROM users LIMIT 1")[0]["id"]
    marker = secrets.token_hex(6)

    def memories(with_marker: str) -> int:
        rows = sql(
            db, "SELECT count(*) AS n FROM memories WHERE content->>'marker' = $1", with_marker
        )
        return int(rows[0]["n"])

    with report.path("memory: valid write") as d:
        response, took = n8n.webhook(
            "switchboard-memory",
            {
                "user_id": str(user_id),
                "agent_name": "Collect_Create_Data_Agent",
                "memory_type": "data_collection",
                "memory_content": {"marker": marker, "monthly_income": 3200},
            },
        )
        check(response.status_code == 200, f"{response.status_code} {response.text}")
        memory = response.json()["memory"]
        rows = sql(
            db, "SELECT agent_name FROM memories WHERE memory_id = $1::uuid", memory["memory_id"]
        )
        check(len(rows) == 1 and rows[0]["agent_name"] == "Collect_Create_Data_Agent", f"{rows}")
        keys = sql(db, "SELECT key FROM idempotency_keys WHERE endpoint = '/webhooks/n8n/memory'")
        check([r["key"].split(":")[1] for r in keys] == [memory_id], f"keys {keys}")
        d.append(f"200, memory {memory['memory_id'][:8]}... in PostgreSQL, {took:.1f} s")

    with report.path("memory: missing fields refused by the workflow (422)") as d:
        response, took = n8n.webhook(
            "switchboard-memory",
            {
                "user_id": str(user_id),
                "agent_name": "Collect_Create_Data_Agent",
                "memory_content": {"marker": marker + "-x"},
            },
        )
        check(response.status_code == 422, f"{response.status_code} {response.text}")
        fields = [e["field"] for e in response.json()["errors"]]
        check(fields == ["memory_type"], f"{fields}")
        check(memories(marker + "-x") == 0, "stored anyway")
        d.append(f"422 naming {fields}, nothing stored, {took:.1f} s")

    with report.path("memory: Switchboard's 422 passed through, not retried") as d:
        response, took = n8n.webhook(
            "switchboard-memory",
            {
                "user_id": str(uuid.uuid4()),
                "agent_name": "Collect_Create_Data_Agent",
                "memory_type": "no_such_type",
                "memory_content": {"marker": marker + "-y"},
            },
        )
        check(response.status_code == 422, f"{response.status_code} {response.text}")
        check(response.headers["content-type"].startswith("application/problem+json"), "type")
        problem = response.json()
        fields = sorted(e["field"] for e in problem.get("errors", []))
        check("user_id" in fields and "memory_type" in fields, f"{problem}")
        check(problem["type"] == "urn:switchboard:problem:validation-failed", problem["type"])
        check(response.headers.get("x-switchboard-tries") == "1" and took < 2, f"{took:.1f} s")
        d.append(f"422 problem+json from Switchboard naming {fields}, 1 try, {took:.1f} s")

    with report.path('memory: 400,000 x "€" (1.2 MB in UTF-8) refused before Switchboard') as d:
        content = "€" * 400_000
        response, took = n8n.webhook(
            "switchboard-memory",
            {
                "user_id": str(user_id),
                "agent_name": "Collect_Create_Data_Agent",
                "memory_type": "data_collection",
                "memory_content": content,
            },
        )
        check(response.status_code == 413, f"{response.status_code} {response.text[:300]}")
        problem = response.json()
        check(problem["errors"][0]["field"] == "memory_content", f"{problem}")
        check("1200002 bytes" in problem["errors"][0]["message"], problem["errors"][0]["message"])
        rows = sql(db, "SELECT count(*) AS n FROM memories WHERE length(content::text) > 400000")
        check(rows[0]["n"] == 0, "stored anyway")
        d.append(f"413 '{problem['errors'][0]['message']}', nothing stored, {took:.1f} s")

    with report.path("memory: 4 items through another workflow, each its own result") as d:
        items = [
            {
                "user_id": str(user_id),
                "agent_name": "Make_Plan_Agent",
                "memory_type": "planning",
                "memory_content": {"marker": marker + "-1", "goal": "save 10%"},
            },
            {
                "user_id": str(user_id),
                "memory_type": "planning",
                "memory_content": {"marker": marker + "-2"},
            },
            {
                "user_id": str(user_id),
                "agent_name": "Educate_Customer_Agent",
                "memory_type": "education",
                "memory_content": {"marker": marker + "-3"},
            },
            {
                "user_id": str(user_id),
                "agent_name": "Make_Plan_Agent",
                "memory_type": "planning",
                "memory_content": {"marker": marker + "-4", "text": "€" * 400_000},
            },
        ]
        response, took = n8n.webhook("e2e-memory-batch", {"items": items})
        check(response.status_code == 200, f"{response.status_code} {response.text[:300]}")
        results = response.json()
        statuses = [r["status"] for r in results]
        check(statuses == [200, 422, 200, 413], f"statuses {statuses}: {results}")
        check([r["index"] for r in results] == [0, 1, 2, 3], "not in request order")
        check(
            results[1]["body"]["errors"] == [{"field": "agent_name", "message": "required"}],
            f"{results[1]}",
        )
        stored = [memories(marker + f"-{i}") for i in (1, 2, 3, 4)]
        check(stored == [1, 0, 1, 0], f"rows per item: {stored}")
        d.append(f"statuses {statuses} in order, rows per item {stored}, {took:.1f} s")

    def cleanup_runs() -> dict[str, int]:
        rows = sql(
            db,
            "SELECT status, count(*) AS n FROM job_runs WHERE trigger = 'manual' GROUP BY status",
        )
        return {r["status"]: int(r["n"]) for r in rows}

    def execute(workflow_id: str) -> tuple[subprocess.CompletedProcess[str], float]:
        started = time.monotonic()
        done = n8n.cli("execute", f"--id={workflow_id}")
        return done, time.monotonic() - started

    with report.path("cleanup: `n8n execute --id` runs all jobs") as d:
        before = cleanup_runs()
        done, took = execute(cleanup_id)
        check(
            done.returncode == 0,
            f"exit {done.returncode}: {done.stdout[-800:]}{done.stderr[-800:]}",
        )
        check("Execution was successful" in done.stdout, done.stdout[-500:])
        after = cleanup_runs()
        added = after.get("succeeded", 0) - before.get("succeeded", 0)
        check(added == 7, f"{added} succeeded job runs, expected 7")
        d.append(f"exit 0, 7 job runs succeeded in PostgreSQL, {took:.1f} s")

    with report.path("cleanup: a rerun within the hour runs again (new key)") as d:
        before = cleanup_runs()
        done, took = execute(cleanup_id)
        check(done.returncode == 0, f"exit {done.returncode}: {done.stderr[-500:]}")
        added = cleanup_runs().get("succeeded", 0) - before.get("succeeded", 0)
        check(added == 7, f"{added} new job runs (a replay would add 0)")
        keys = sql(db, "SELECT key FROM idempotency_keys WHERE endpoint = '/webhooks/n8n/cleanup'")
        check(len({r["key"] for r in keys}) == 2, f"keys {keys}")
        d.append(f"7 more job runs, 2 distinct keys, {took:.1f} s")

    break_housekeeping = (
        "CREATE OR REPLACE FUNCTION e2e_refuse_purge() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'e2e: outbox_events is read-only'; END $$;"
        " CREATE TRIGGER e2e_refuse_purge BEFORE DELETE ON outbox_events"
        " FOR EACH STATEMENT EXECUTE FUNCTION e2e_refuse_purge()"
    )
    asyncio.run(_execute(db, break_housekeeping))
    try:
        with report.path("cleanup: a failed job fails the execution (no alert target)") as d:
            before = cleanup_runs()
            done, took = execute(cleanup_id)
            output = done.stdout + done.stderr
            check(
                done.returncode != 0 or "Execution was NOT successful" in output,
                f"exit {done.returncode}: {output[-800:]}",
            )
            check(
                "Switchboard cleanup failed" in output and "housekeeping" in output,
                f"{output[-800:]}",
            )
            failed = cleanup_runs().get("failed", 0) - before.get("failed", 0)
            check(failed == 4, f"{failed} failed housekeeping runs, expected 4 (4 tries)")
            last = n8n.executions(cleanup_id)[0]
            check(last["status"] == "error", f"n8n lists the execution as {last['status']}")
            stored = sql(
                db,
                "SELECT count(*) AS n FROM idempotency_keys"
                " WHERE endpoint = '/webhooks/n8n/cleanup' AND status = 'completed'",
            )
            check(stored[0]["n"] == 2, "the failed run's answer was stored")
            d.append(
                f"exit {done.returncode}, n8n lists it as '{last['status']}', "
                f"4 tries (4 failed housekeeping runs), answer not stored, {took:.1f} s"
            )

        sink = AlertSink()
        try:
            with report.path("cleanup: a failed job with an alert target posts the alert") as d:
                n8n.set_alert_url(cleanup_id, sink.url)
                done, took = execute(cleanup_id)
                check(
                    done.returncode != 0 or "NOT successful" in done.stdout,
                    f"exit {done.returncode}",
                )
                check(len(sink.received) == 1, f"{len(sink.received)} alerts")
                alert = sink.received[0]
                check(alert["failed"] == ["housekeeping"] and alert["status"] == 500, f"{alert}")
                d.append(
                    f"alert {{failed: {alert['failed']}, status: 500}} received, "
                    f"execution failed, {took:.1f} s"
                )
            n8n.set_alert_url(cleanup_id, "")
        finally:
            sink.close()
    finally:
        asyncio.run(
            _execute(
                db,
                "DROP TRIGGER e2e_refuse_purge ON outbox_events; DROP FUNCTION e2e_refuse_purge()",
            )
        )

    sb.stop()
    with report.path("unreachable: chat answers degraded after 4 tries") as d:
        response, took = n8n.webhook("switchboard-chat", {"user_id": 1, "text": "hello?"})
        check(response.status_code == 200, f"{response.status_code} {response.text}")
        body = response.json()
        check(body.get("degraded") is True and "unavailable" in body.get("response", ""), f"{body}")
        check(response.headers.get("x-switchboard-tries") == "4" and took >= 6, f"{took:.1f} s")
        d.append(f"200 degraded apology, 4 tries, {took:.1f} s")

    with report.path("unreachable: memory write answers 502") as d:
        response, took = n8n.webhook(
            "switchboard-memory",
            {
                "user_id": str(user_id),
                "agent_name": "Make_Plan_Agent",
                "memory_type": "planning",
                "memory_content": {"marker": marker + "-down"},
            },
        )
        check(response.status_code == 502, f"{response.status_code} {response.text}")
        check(response.json()["type"] == "urn:switchboard:problem:unreachable", response.text)
        d.append(f"502 problem+json (unreachable), 4 tries, {took:.1f} s")

    with report.path("unreachable: cleanup fails the execution") as d:
        done, took = execute(cleanup_id)
        output = done.stdout + done.stderr
        check(done.returncode != 0 or "NOT successful" in output, f"exit {done.returncode}")
        check("Switchboard did not answer" in output, output[-600:])
        d.append(f"execution failed ('Switchboard did not answer'), {took:.1f} s")


async def _execute(database_url: str, statement: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


# --------------------------------------------------------------------------- set-up


def set_up(n8n: N8n, sb: Switchboard, key: str, tmp: Path) -> dict[str, str]:
    """The README's steps: credential, import (files unchanged), the one edit, publish."""
    credential = [
        {
            "id": secrets.token_hex(8),  # any id: the workflows find it by its name
            "name": "Switchboard API Key",
            "type": "httpHeaderAuth",
            "data": {"name": "X-API-Key", "value": key},
        }
    ]
    (tmp / "credential.json").write_text(json.dumps(credential))
    for command in (
        ["import:credentials", f"--input={tmp / 'credential.json'}"],
        *(["import:workflow", f"--input={WORKFLOWS / f}"] for f in FILES.values()),
    ):
        done = n8n.cli(*command)
        if done.returncode != 0 or "Successfully imported" not in done.stdout + done.stderr:
            raise SystemExit(f"n8n {' '.join(command)}: {done.stdout}{done.stderr}")
    (tmp / "credential.json").unlink()
    n8n.start()
    names = n8n.workflow_ids()
    ids = {
        short: names[json.loads((WORKFLOWS / f).read_text())["name"]] for short, f in FILES.items()
    }
    for workflow_id in ids.values():
        try:
            n8n.set_base_url(workflow_id, sb.url)
        except AssertionError as exc:
            raise SystemExit(f"the README's one edit cannot be made: {exc}") from exc
        n8n.publish(workflow_id)
    n8n.create_workflow(caller("E2E chat batch", "e2e-chat-batch", ids["chat"]))
    n8n.create_workflow(caller("E2E memory batch", "e2e-memory-batch", ids["memory"]))
    return ids


def record(
    report: Report, started: dt.datetime, seconds: float, postgres: str, readme: Path = README
) -> None:
    """The run's summary into a README (n8n-workflows/ for the workflows' paths, n8n-nodes/
    for the nodes' paths), between the n8n-e2e markers."""
    checks = [c for c in report.checks if c.name.startswith("nodes:") == (readme == NODES_README)]
    rows = "\n".join(
        f"| {c.name} | {'pass' if c.ok else '**FAIL**'} | {c.detail} |" for c in checks
    )
    node = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    block = (
        f"Last run: {started:%Y-%m-%d %H:%M} UTC, n8n {N8N_VERSION} (community edition, no "
        f"licence), PostgreSQL {postgres}, Node.js {node}: "
        f"{sum(c.ok for c in checks)} of {len(checks)} paths passed, "
        f"{seconds:.0f} s in all (n8n already installed in the cache).\n\n"
        "| Path | Result | What was seen |\n|---|---|---|\n" + rows
    )
    text = readme.read_text()
    begin, end = "<!-- n8n-e2e:begin -->", "<!-- n8n-e2e:end -->"
    if begin not in text or end not in text:
        raise SystemExit(f"{readme} has no {begin} ... {end} markers")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    readme.write_text(f"{head}{begin}\n{block}\n{end}{tail}")
    print(f"recorded in {readme.relative_to(ROOT)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true", help="write the summary to the README")
    parser.add_argument("--keep", action="store_true", help="keep the temp folder and database")
    parser.add_argument(
        "--only",
        choices=("workflows", "nodes"),
        help="only the shipped workflows' paths, or only the node package's",
    )
    args = parser.parse_args()
    workflows, nodes = args.only in (None, "workflows"), args.only in (None, "nodes")
    started, t0 = dt.datetime.now(dt.UTC), time.monotonic()

    binary = install_n8n()
    print(f"n8n {N8N_VERSION}: {binary}", flush=True)
    server = dbutil.server_url()
    database = dbutil.unique_name("sb_n8n_e2e")
    asyncio.run(dbutil.create_database(server, database))
    postgres = str(sql(server, "SHOW server_version")[0][0]).split()[0]
    tmp = Path(tempfile.mkdtemp(prefix="switchboard-n8n-e2e-"))
    port = free_port()
    sb = Switchboard(
        url=f"http://127.0.0.1:{port}",
        database_url=dbutil.with_database(server, database),
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("SWITCHBOARD_")},
            "SWITCHBOARD_DATABASE_URL": dbutil.with_database(server, database),
            "SWITCHBOARD_DATA_DIR": str(tmp / "switchboard"),
            "SWITCHBOARD_PORT": str(port),
            "SWITCHBOARD_ADMIN_KEY": secrets.token_urlsafe(24),
            # n8n runs beside it on 127.0.0.1 (the README's "n8n on the same machine").
            "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",
            "SWITCHBOARD_LOG_LEVEL": "WARNING",
        },
        log=tmp / "switchboard.log",
    )
    n8n = N8n(binary=binary, folder=tmp / "n8n", port=free_port())
    n8n.folder.mkdir()
    report = Report()
    agents: Agents | None = None
    try:
        sb.start()
        key = sb.integration_key()
        agents = Agents()
        registered = agents.register(sb.url, sb.env["SWITCHBOARD_ADMIN_KEY"])
        print(f"agents {', '.join(registered)} answer from {agents.server.url}", flush=True)
        print(f"switchboard on {sb.url}, database {database}; n8n on {n8n.url}", flush=True)
        if nodes:
            version = install_package(n8n.folder)
            print(f"n8n-nodes-switchboard {version} installed into {n8n.folder}", flush=True)
        if workflows:
            ids = set_up(n8n, sb, key, tmp)
            print(f"imported, edited and published: {ids}", flush=True)
        else:
            n8n.start()
        if workflows:
            # First: its checks count the cleanup webhook's keys and stored answers, which
            # the node paths' job runs would add to. It ends with Switchboard stopped.
            run_paths(report, n8n, sb, ids)
        if nodes:
            if sb.process is None or sb.process.poll() is not None:
                sb.start()
            run_node_paths(report, n8n, sb, key, sb.env["SWITCHBOARD_ADMIN_KEY"], sql)
    finally:
        n8n.stop()
        sb.stop()
        if agents is not None:
            agents.close()
        if args.keep:
            print(f"kept: {tmp} and database {database}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
            asyncio.run(dbutil.drop_database(server, database))
    seconds = time.monotonic() - t0
    passed = sum(c.ok for c in report.checks)
    print(f"\n{passed} passed, {len(report.checks) - passed} failed in {seconds:.0f} s")
    if args.record:
        if workflows:
            record(report, started, seconds, postgres)
        if nodes:
            record(report, started, seconds, postgres, NODES_README)
    return 0 if report.ok and report.checks else 1


if __name__ == "__main__":
    sys.exit(main())
