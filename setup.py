"""Only one thing pyproject.toml cannot say: a wheel carries the schema with it.

alembic.ini, migrations/ and sql/ sit at the top of the repository, beside app/, and are read
from there when Switchboard runs from a clone. A built wheel (pip install . without -e, or a
wheel copied into an image) has no repository around it, so build_py copies them into the
package as app/_project, where app/settings.py looks when the checkout's copy is absent.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BUNDLED = ("alembic.ini", "migrations", "sql")


class BuildWithSchema(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout itself
            return
        target = Path(self.build_lib) / "app" / "_project"
        # A build folder left by an earlier build keeps files since deleted or renamed (a
        # renumbered migration would then be applied twice): start from nothing.
        shutil.rmtree(target, ignore_errors=True)
        for name in BUNDLED:
            source = ROOT / name
            if source.is_dir():
                shutil.copytree(
                    source,
                    target / name,
                    dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                )
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / name)


setup(cmdclass={"build_py": BuildWithSchema})
