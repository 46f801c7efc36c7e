"""The Makefile's choice of interpreter (scripts/venv.sh), with stand-in interpreters that
say which version they are: an unsupported one is refused before any venv is made, and a
venv built by another Python is rebuilt when PYTHON is chosen."""

# ruff: noqa: S603, S607  (this file runs make as a user would)
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from app.settings import PROJECT_ROOT

STAND_IN = """#!/bin/sh
# Says it is Python {version}; `-m venv DIR` makes DIR/bin/python a copy of itself.
if [ "$1" = "-c" ]; then echo {version}; exit 0; fi
if [ "$1 $2" = "-m venv" ]; then mkdir -p "$3/bin" && cp "$0" "$3/bin/python"; exit 0; fi
exit 0
"""


def interpreter(tmp_path: Path, version: str) -> Path:
    path = tmp_path / f"python{version}"
    path.write_text(STAND_IN.format(version=version))
    path.chmod(0o755)
    return path


def make_install(venv: Path, python: Path | None = None) -> subprocess.CompletedProcess[str]:
    chosen = [f"PYTHON={python}"] if python else []
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "VENV", "MAKEFLAGS")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(PROJECT_ROOT), "install", f"VENV={venv}",
         *chosen],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip


def venv_version(venv: Path) -> str:
    """The version the venv's (stand-in) python says it is."""
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "version"], capture_output=True, text=True, check=True
    )
    return ran.stdout.strip()


def test_an_unsupported_python_is_refused_before_a_venv_is_made(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    for version in ("3.10", "3.15"):
        ran = make_install(venv, interpreter(tmp_path, version))
        assert ran.returncode != 0
        said = [line for line in ran.stderr.splitlines() if line.startswith("make: `")]
        assert len(said) == 1, ran.stderr
        assert f"is Python {version};" in said[0]
        assert "supports CPython 3.11 through 3.14" in said[0]
        assert "make run PYTHON=python3.12" in said[0]
        assert not venv.exists()

    missing = make_install(venv, tmp_path / "no-such-python")
    assert missing.returncode != 0
    assert "no `" in missing.stderr
    assert "3.11 through 3.14" in missing.stderr
    assert not venv.exists()


def test_a_venv_built_by_another_python_is_rebuilt_when_python_is_chosen(
    tmp_path: Path,
) -> None:
    venv = tmp_path / "venv"
    built = make_install(venv, interpreter(tmp_path, "3.12"))
    assert built.returncode == 0, built.stderr
    assert venv_version(venv) == "3.12"
    assert (venv / ".switchboard-installed").exists()

    rebuilt = make_install(venv, interpreter(tmp_path, "3.13"))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "was built with Python 3.12; rebuilding it with" in rebuilt.stderr
    assert venv_version(venv) == "3.13"

    # No PYTHON given: the venv there is kept, whatever python3 is.
    kept = make_install(venv)
    assert kept.returncode == 0, kept.stderr
    assert "rebuilding" not in kept.stderr
    assert venv_version(venv) == "3.13"

    # A venv whose interpreter no longer runs is rebuilt.
    (venv / "bin" / "python").write_text("#!/bin/sh\nexit 127\n")
    revived = make_install(venv, interpreter(tmp_path, "3.11"))
    assert revived.returncode == 0, revived.stderr
    assert "no longer runs" in revived.stderr
    assert venv_version(venv) == "3.11"
