"""Runs a shipped workflow's Code node (its JavaScript, unchanged) with Node.js, the way n8n's
task runner does: ``$input``, ``$(node)``, ``$runIndex``, ``$workflow``, ``$execution`` and
``Buffer`` in scope, the code as the body of an async function. Without ``node`` on the PATH
the tests that need it are skipped (`make n8n-e2e` runs the nodes in a real n8n)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from app.settings import PROJECT_ROOT

NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="Node.js is not installed")
WORKFLOWS = PROJECT_ROOT / "n8n-workflows"

HARNESS = r"""
const input = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const wrap = (json) => ({ json });
const items = input.items.map(wrap);
const $input = { all: () => items, first: () => items[0], last: () => items[items.length - 1] };
const $ = (name) => {
  const outputs = input.nodes[name];
  if (outputs === undefined) throw new Error(`Node '${name}' hasn't been executed`);
  const branch = (index) => (outputs[index ?? 0] ?? []).map(wrap);
  return {
    all: (index) => branch(index),
    first: (index) => branch(index)[0],
    last: (index) => branch(index).at(-1),
  };
};
const run = new Function(
  '$input', '$', '$runIndex', '$workflow', '$execution', 'Buffer',
  `return (async () => {${input.code}\n})();`,
);
run($input, $, input.runIndex, { id: input.workflowId }, { id: input.executionId }, Buffer)
  .then((out) => process.stdout.write(JSON.stringify(out.map((item) => item.json))))
  .catch((error) => { console.error(error.stack); process.exit(1); });
"""


def load(file: str) -> dict[str, Any]:
    """A shipped workflow file."""
    data: dict[str, Any] = json.loads((WORKFLOWS / file).read_text(encoding="utf-8"))
    return data


def code_of(workflow: dict[str, Any], node: str) -> str:
    """The JavaScript of the Code node named ``node``."""
    for candidate in workflow["nodes"]:
        if candidate["name"] == node:
            code: str = candidate["parameters"]["jsCode"]
            return code
    raise LookupError(node)


def run_code(
    code: str,
    items: list[dict[str, Any]],
    *,
    nodes: dict[str, list[list[dict[str, Any]]]] | None = None,
    run_index: int = 0,
    workflow_id: str = "wfAbc123",
    execution_id: str = "41",
) -> list[dict[str, Any]]:
    """The items (their json) the code returns for input ``items``; ``nodes`` gives other
    nodes' outputs (per output index) for ``$(name)``."""
    assert NODE is not None
    payload = {
        "code": code,
        "items": items,
        "nodes": nodes or {},
        "runIndex": run_index,
        "workflowId": workflow_id,
        "executionId": execution_id,
    }
    done = subprocess.run(  # noqa: S603 (node on the PATH, a fixed script; data on stdin)
        [NODE, "-e", HARNESS],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(PROJECT_ROOT),
    )
    assert done.returncode == 0, done.stderr
    result: list[dict[str, Any]] = json.loads(done.stdout)
    return result
