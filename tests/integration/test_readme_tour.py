"""The README's tour, run as a user runs it: its bash block, pasted as is, against a real
``switchboard serve`` process on this test's database, twice (a second run must work too)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import pytest

from app.settings import PROJECT_ROOT
from tests.integration.helpers import listening_port

SWITCHBOARD = Path(sys.executable).parent / "switchboard"
TOUR = re.compile(r"<!-- tour:start -->\n```bash\n(.*?)\n```\n<!-- tour:end -->", re.DOTALL)


def tour_block() -> str:
    """The one bash block between the tour markers of README.md, exactly as a user copies it."""
    blocks = TOUR.findall((PROJECT_ROOT / "README.md").read_text())
    assert len(blocks) == 1, "README.md needs exactly one ```bash block between the tour markers"
    script: str = blocks[0]
    return script


@dataclass(frozen=True)
class Served:
    api: str
    home: Path  # the directory a user runs the tour from: .switchboard/admin.key is in it


@pytest.fixture
async def served(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    """``switchboard serve`` on a port the kernel picks (``--port 0``: it says which in its
    log), with no admin key given: it generates one into
    ``<tmp_path>/.switchboard/admin.key``, as ``make run`` does in the repository."""
    log = tmp_path / "serve.log"
    # The defaults a user has (no test-wide settings such as the rate limit switched off).
    env = {key: value for key, value in os.environ.items() if not key.startswith("SWITCHBOARD_")}
    env |= {
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_DATA_DIR": str(tmp_path / ".switchboard"),
    }
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            # From the repository, as `make run` serves (the migrations are found from there).
            str(SWITCHBOARD),
            *("serve", "--port", "0"),
            env=env,
            cwd=PROJECT_ROOT,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
        )
    api = ""
    try:
        async with httpx.AsyncClient() as probe:
            for _ in range(150):
                assert process.returncode is None, "switchboard serve exited during start-up"
                port = listening_port(log)
                api = f"http://127.0.0.1:{port}"
                try:
                    if port and (await probe.get(f"{api}/ready", timeout=1)).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("switchboard serve did not become ready within 15 s")
        yield Served(api, tmp_path)
    finally:
        if process.returncode is None:
            process.terminate()
        await asyncio.wait_for(process.wait(), timeout=30)


async def run_tour(served: Served, **env: str) -> tuple[int, str, str]:
    """Run the tour's block with bash from the user's directory; its exit code and output."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        tour_block(),
        env={"PATH": os.environ["PATH"], "HOME": str(served.home), **env},
        cwd=served.home,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_readme_tour_runs_as_written_and_runs_again(
    served: Served, database_url: str
) -> None:
    # First run: the admin key from .switchboard/admin.key, as after a first `make run`.
    code, out, err = await run_tour(served, SWITCHBOARD_API=served.api)
    assert (code, err) == (0, ""), out + err
    assert "a stale writer gets 409: Session " in out, out
    # Second run: the agents already have keys (POST /v1/agents answers 409) and the user
    # exists; the admin key from the environment this time.
    admin_key = (served.home / ".switchboard" / "admin.key").read_text().strip()
    code, again, err = await run_tour(
        served, SWITCHBOARD_API=served.api, SWITCHBOARD_ADMIN_KEY=admin_key
    )
    assert (code, err) == (0, ""), again + err
    assert "a stale writer gets 409: Session " in again, again

    conn = await asyncpg.connect(database_url)
    try:
        user_ids = await conn.fetch("SELECT id FROM users WHERE external_ref = 'crm-42'")
        assert len(user_ids) == 1  # the second run found the same user
        sessions = await conn.fetch(
            "SELECT session_id, version, progress_percentage, current_agent, session_state"
            " FROM session_coordination WHERE user_id = $1 ORDER BY created_at",
            user_ids[0]["id"],
        )
        assert len(sessions) == 2
        for session, printed in zip(sessions, (out, again), strict=True):
            assert str(session["session_id"]) in printed
            # created, patched, handed over, a coordinator message, rolled back to 2: version 5.
            assert session["version"] == 5
            history = await conn.fetch(
                "SELECT version, changed_by, change_reason, current_agent, progress_percentage"
                " FROM session_state_versions WHERE session_id = $1 ORDER BY version",
                session["session_id"],
            )
            assert [row["version"] for row in history] == [1, 2, 3, 4, 5]
            # The stale writer's 409 changed nothing: version 2 is the tour's own patch.
            assert history[1]["progress_percentage"] == 40
            assert history[2]["change_reason"].startswith("handoff to Educate_Customer_Agent")
            assert history[2]["current_agent"] == "Educate_Customer_Agent"
            assert history[3]["changed_by"] == "Educate_Customer_Agent"
            # The rollback made version 5 equal to version 2: no current agent, 40 %.
            assert (session["current_agent"], session["progress_percentage"]) == (None, 40)
            decisions = await conn.fetch(
                "SELECT chosen_agent, outcome FROM coordination_decisions WHERE session_id = $1",
                session["session_id"],
            )
            assert [tuple(row) for row in decisions] == [("Educate_Customer_Agent", "fallback")]
        url = await conn.fetchval("SELECT url FROM agents WHERE name = 'Make_Plan_Agent'")
        assert url == "http://10.0.0.5:5678/webhook/make-plan"
    finally:
        await conn.close()
