"""Drill: property-based fuzzing of every operation in the OpenAPI document (schemathesis),
as the admin and as an agent, on a fresh database of its own. No 5xx may come back, and
every answer must be documented: its status, content type, headers and body schema.
    .venv/bin/python -m drills.fuzz [--examples N]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.db.migrate import upgrade  # noqa: E402
from bench.serve import spawn  # noqa: E402

ADMIN = "fuzz-admin-key-0123456789abcdef"
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# not_a_server_error, and that the document tells the truth about every answer.
CHECKS = (
    "not_a_server_error,status_code_conformance,content_type_conformance,"
    "response_headers_conformance,response_schema_conformance"
)


def fuzz(
    base: str, auth_header: str, examples: int, phases: str = "examples,coverage,fuzzing"
) -> dict[str, Any]:
    """Run schemathesis once; cases generated, server errors found, answers the document
    does not describe, and operations where schemathesis itself failed (its own errors,
    not the server's, reported apart)."""
    result = subprocess.run(
        [
            str(SCHEMATHESIS),
            "run",
            f"{base}/schema/openapi.json",
            "-H",
            auth_header,
            "--checks",
            CHECKS,
            "--max-examples",
            str(examples),
            "--phases",
            phases,
            "-w",
            "2",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    counted = re.search(r"(\d+) generated", result.stdout)
    sections = re.split(r"^_+ (\S+ \S+) _+$", result.stdout, flags=re.M)
    server_errors, undocumented, tool_errors = [], [], []
    for operation, text in zip(sections[1::2], sections[2::2], strict=True):
        if "Server error" in text:
            server_errors.append(operation)
        elif re.search(r"^- ST\d+ ", text, flags=re.M):
            undocumented.append(operation)
        else:
            tool_errors.append(operation)
    return {
        "cases": int(counted.group(1)) if counted else 0,
        "server_errors": server_errors,
        "undocumented": undocumented,
        "tool_errors": tool_errors,
        "exit_code": result.returncode,
    }


def run(url: str, examples: int, phases: str = "examples,coverage,fuzzing") -> dict[str, Any]:
    """Fuzz a Switchboard served on ``url``'s database as the admin and as an agent."""
    server, port = spawn(
        "switchboard",
        {
            "SWITCHBOARD_DATABASE_URL": url,
            "SWITCHBOARD_ADMIN_KEY": ADMIN,
            "SWITCHBOARD_RATE_LIMIT_PER_SECOND": "0",
            "SWITCHBOARD_LOG_LEVEL": "ERROR",
            # An event stream never ends by itself; schemathesis reads each answer whole.
            "SWITCHBOARD_STREAM_MAX_SECONDS": "0.05",
        },
    )
    base = f"http://127.0.0.1:{port}"
    try:
        created = httpx.post(
            f"{base}/v1/agents",
            json={"name": "Fuzz_Agent", "roles": ["authorized"]},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        created.raise_for_status()
        agent_key = created.json()["api_key"]
        return {
            "admin": fuzz(base, f"Authorization: Bearer {ADMIN}", examples, phases),
            "agent": fuzz(base, f"X-API-Key: {agent_key}", examples, phases),
        }
    finally:
        server.terminate()
        server.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=40)
    args = parser.parse_args()
    from app.db.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory() as tmp:
        pg = EmbeddedPostgres(Path(tmp))
        url = pg.start()
        upgrade(url)
        result = run(url, args.examples)
        pg.stop()
    print(json.dumps(result, indent=2))
    ok = all(
        r["cases"] >= 1000
        and not r["server_errors"]
        and not r["undocumented"]
        and r["exit_code"] == 0
        for r in result.values()
    )
    print("drill passed" if ok else "drill FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
