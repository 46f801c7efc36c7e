"""The ``switchboard`` command, run as a user runs it: a subprocess, its output and exit code."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SWITCHBOARD = Path(sys.executable).parent / "switchboard"


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(database_url: str, tmp_path: Path) -> Any:
    """Run ``switchboard <args>`` against this test's database."""
    env = {
        **os.environ,
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": "cli-test-admin-key-0123456789",
        "SWITCHBOARD_DATA_DIR": str(tmp_path / "data"),
        "SWITCHBOARD_LOG_LEVEL": "WARNING",
    }

    async def run(*args: str, **overrides: str) -> Ran:
        process = await asyncio.create_subprocess_exec(
            str(SWITCHBOARD),
            *args,
            env={**env, **overrides},
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=60)
        assert process.returncode is not None
        return Ran(process.returncode, out.decode(), err.decode())

    return run


def one_error_line(ran: Ran) -> str:
    """The single ``switchboard: error: …`` line a failed command prints (no traceback)."""
    assert "Traceback" not in ran.err, ran.err
    lines = ran.err.strip().splitlines()
    assert len(lines) == 1, ran.err
    assert lines[0].startswith("switchboard: error: "), ran.err
    return lines[0].removeprefix("switchboard: error: ")


async def test_agents_list_has_a_header_and_aligned_columns(cli: Any) -> None:
    created = await cli("agents", "create", "Report_Agent", "--role", "analytics")
    assert created.code == 0, created.err
    ran = await cli("agents", "list")
    assert ran.code == 0, ran.err
    lines = ran.out.rstrip("\n").splitlines()
    assert lines[0].split() == ["NAME", "ROLES", "KEY", "ENABLED", "URL"]
    # Every column starts where its header does.
    starts = [lines[0].index(title) for title in ("ROLES", "KEY", "ENABLED", "URL")]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert "Report_Agent" in rows
    assert "Make_Plan_Agent" in rows  # seeded
    for line in lines[1:]:
        for start in starts:
            assert line[start - 1] == " ", line
            assert line[start] != " ", line
    assert rows["Report_Agent"].split() == ["Report_Agent", "analytics", "active", "yes", "-"]
    assert rows["Educate_Customer_Agent"].split()[1:4] == ["-", "none", "yes"]


async def test_cli_errors_are_one_line_in_the_cli_s_words(cli: Any) -> None:
    assert (await cli("agents", "create", "Twice_Agent")).code == 0
    again = await cli("agents", "create", "Twice_Agent")
    assert again.code == 1
    assert again.out == ""
    message = one_error_line(again)
    assert "Twice_Agent" in message
    assert "switchboard agents rotate-key Twice_Agent" in message
    assert "/v1/" not in message

    for command in ("rotate-key", "disable"):
        missing = await cli("agents", command, "Nobody_Agent")
        assert missing.code == 1
        message = one_error_line(missing)
        assert "Nobody_Agent" in message
        assert "switchboard agents list" in message


async def test_cli_refuses_unknown_roles(cli: Any) -> None:
    typo = await cli("agents", "create", "Typo_Agent", "--role", "authorised")
    assert typo.code == 1
    message = one_error_line(typo)
    assert "'authorised'" in message
    assert "analytics, authorized, coordination_manager" in message
    listed = await cli("agents", "list")
    assert "Typo_Agent" not in listed.out


async def test_cli_usage_errors_exit_2_without_a_traceback(cli: Any) -> None:
    bad_name = await cli("agents", "create", "has space")
    assert bad_name.code == 2
    assert "Traceback" not in bad_name.err
    assert bad_name.err.strip().splitlines()[-1].startswith("switchboard agents create: error:")
    bad_role = await cli("agents", "create", "Ok_Agent", "--role", "Not-A-Role")
    assert bad_role.code == 2
    assert "Traceback" not in bad_role.err


async def test_cli_says_when_the_database_cannot_be_reached(cli: Any) -> None:
    ran = await cli(
        "agents", "list", SWITCHBOARD_DATABASE_URL="postgresql://postgres@127.0.0.1:1/nowhere"
    )
    assert ran.code == 1
    assert "cannot reach the database" in one_error_line(ran)


async def test_migrate_runs_from_any_directory(cli: Any) -> None:
    """A user runs the installed command from wherever they are, not the repository root:
    alembic must still find the migrations package (the fixture's cwd is a temp dir)."""
    ran = await cli("migrate")
    assert ran.code == 0, ran.err
    assert "Traceback" not in ran.err


async def test_a_bad_setting_is_one_line_naming_the_variable(cli: Any) -> None:
    ran = await cli("agents", "list", SWITCHBOARD_PORT="eighty")
    assert ran.code == 2
    assert one_error_line(ran).startswith("SWITCHBOARD_PORT: Input should be a valid integer")
    # A credential is named but never echoed.
    ran = await cli("agents", "list", SWITCHBOARD_ADMIN_KEY="short-secret")
    assert ran.code == 2
    line = one_error_line(ran)
    assert line.startswith("SWITCHBOARD_ADMIN_KEY: ")
    assert "short-secret" not in line


async def test_an_unusable_admin_key_file_is_one_line(cli: Any, tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text("too-short\n")
    ran = await cli(
        "serve",
        "--port",
        "0",
        "--no-migrate",
        SWITCHBOARD_ADMIN_KEY="",
        SWITCHBOARD_ADMIN_KEY_FILE=str(key_file),
    )
    assert ran.code == 1
    assert "holds no usable admin key" in one_error_line(ran)
