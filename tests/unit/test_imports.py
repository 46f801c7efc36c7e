"""Which package may import which: ``scheduler`` (the scheduler process's entry point)
imports ``app``; ``app`` never imports ``scheduler``, so the two cannot form a cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from app.settings import PROJECT_ROOT


def imported_modules(source: str) -> set[str]:
    """The absolute module names a module's source imports (relative imports excluded)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def top_level(module: str) -> str:
    return module.split(".", 1)[0]


def sources(package: str) -> list[Path]:
    return sorted((PROJECT_ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(
    ("source", "modules"),
    [
        ("import scheduler\n", {"scheduler"}),
        ("from scheduler.__main__ import main\n", {"scheduler.__main__"}),
        ("def f():\n    from scheduler import x\n", {"scheduler"}),
        ("from app.jobs.scheduler import Scheduler\n", {"app.jobs.scheduler"}),
        ("from . import sibling\n", set()),
        ("import app.db.pool as pool, os\n", {"app.db.pool", "os"}),
    ],
)
def test_the_import_scan(source: str, modules: set[str]) -> None:
    # The tests below are only as good as this scan: imports inside functions count too.
    assert imported_modules(source) == modules


def test_app_never_imports_the_scheduler_package() -> None:
    offenders = [
        f"{path.relative_to(PROJECT_ROOT)}: {module}"
        for path in sources("app")
        for module in imported_modules(path.read_text(encoding="utf-8"))
        if top_level(module) == "scheduler"
    ]
    assert sources("app"), "no app sources found"
    assert offenders == []


def test_the_scheduler_package_is_only_an_entry_point_into_app() -> None:
    first_party = {
        top_level(module)
        for path in sources("scheduler")
        for module in imported_modules(path.read_text(encoding="utf-8"))
        if (PROJECT_ROOT / top_level(module)).is_dir()
    }
    assert first_party == {"app"}


def test_importing_all_of_app_loads_no_scheduler_module() -> None:
    # What the scan cannot see (importlib, __import__ with a computed name) shows here: every
    # module of app imported in a fresh interpreter leaves no `scheduler` module loaded.
    modules = [
        ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in sources("app")
    ]
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scheduler'))\n"
    )
    done = subprocess.run(  # noqa: S603 (this interpreter, a fixed script)
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout.strip() == "[]"
