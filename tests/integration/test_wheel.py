"""A built wheel works without the repository around it: it carries alembic.ini, the
migrations and the SQL, migrates an empty database and keeps its data outside the package.

The wheel is built by pip as a user builds it (pip wheel, build isolation on: setuptools comes
from PyPI), unpacked into a folder of its own and run from there with the venv's
dependencies; ``app`` must then be imported from the unpacked wheel, not from the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import asyncpg
import pytest

from tests import dbutil

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

# What a clone holds besides the source: venvs, caches, data, built files, npm's modules.
# Under `make test` the other test process writes some of these (Hypothesis's example database
# and charmap cache, bytecode) while this copy runs, and a file removed between listing and
# copying fails copytree.
_NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv*",
    ".switchboard",
    "build",
    "dist",
    "*.egg-info",
    "node_modules",
    "__pycache__",
    ".*_cache",
    ".schemathesis",
    ".hypothesis",
)


def _run(args: list[str], *, env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(  # noqa: S603 (pip and this interpreter, fixed arguments)
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{args}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


async def test_a_built_wheel_migrates_an_empty_database_on_its_own(
    server_url: str, tmp_path: Path
) -> None:
    # Built from a copy: pip builds in the source folder, and its build/ must not land in the
    # checkout (nor an old one there leak into this wheel).
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_NOT_SOURCE)
    wheels = tmp_path / "wheels"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "-w",
            str(wheels),
            str(source),
        ],
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        cwd=tmp_path,
    )
    (wheel,) = wheels.glob("switchboard-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(site)
    for migration in (ROOT / "migrations" / "versions").glob("*.py"):
        assert f"app/_project/migrations/versions/{migration.name}" in names
    for query_file in (ROOT / "sql" / "queries").glob("*.sql"):
        assert f"app/_project/sql/queries/{query_file.name}" in names
    assert "app/_project/alembic.ini" in names

    name = dbutil.unique_name("sbtest_wheel")
    await dbutil.create_database(server_url, name)
    url = dbutil.with_database(server_url, name)
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("SWITCHBOARD_") and key not in {"PYTHONPATH", "XDG_DATA_HOME"}
    }
    env |= {
        "PYTHONPATH": str(site),
        "HOME": str(tmp_path / "home"),
        "SWITCHBOARD_DATABASE_URL": url,
    }
    try:
        _run([sys.executable, "-m", "app.cli", "migrate"], env=env, cwd=tmp_path)
        where = _run(
            [
                sys.executable,
                "-c",
                "import app, app.settings as s, app.db.queries as q; "
                "print(app.__file__); print(s.Settings().data_dir); "
                "print(len(q.QUERIES._files))",
            ],
            env=env,
            cwd=tmp_path,
        ).split("\n")
        conn = await asyncpg.connect(url)
        try:
            head = await conn.fetchval("SELECT version_num FROM alembic_version")
            tables = await conn.fetchval(
                "SELECT count(*) FROM pg_tables WHERE tablename IN "
                "('session_coordination', 'memories', 'agent_tasks')"
            )
        finally:
            await conn.close()
    finally:
        await dbutil.drop_database(server_url, name)

    assert Path(where[0]).is_relative_to(site)
    assert Path(where[1]) == tmp_path / "home" / ".local" / "share" / "switchboard"
    assert int(where[2]) == len(list((ROOT / "sql" / "queries").glob("*.sql")))
    newest = sorted((ROOT / "migrations" / "versions").glob("*.py"))[-1].name.split("_")[0]
    assert head == newest
    assert tables == 3
