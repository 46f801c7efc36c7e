"""Named SQL statements loaded from ``sql/queries/*.sql``.

Each file holds blocks introduced by ``-- name: <identifier>``; the text up to the next
marker is the statement. Statements use ``$n`` parameters only: SQL is never assembled
from strings at run time. A feature reads its statements as ``QUERIES.<file>.<name>``.
"""

from __future__ import annotations

import re
from pathlib import Path

from app.settings import PROJECT_ROOT

QUERY_DIR = PROJECT_ROOT / "sql" / "queries"
_NAME_LINE = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class QueryFile:
    """The named statements of one ``.sql`` file, as attributes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._statements = parse_named_queries(path.read_text(encoding="utf-8"), path.name)

    def __getattr__(self, name: str) -> str:
        try:
            return self._statements[name]
        except KeyError:
            raise AttributeError(f"{self.path.name} has no query named {name!r}") from None

    def names(self) -> list[str]:
        """List the statement names in file order."""
        return list(self._statements)


def parse_named_queries(text: str, source: str) -> dict[str, str]:
    """Split a file's text into ``{name: statement}``; duplicate or empty blocks are errors."""
    statements: dict[str, str] = {}
    markers = list(_NAME_LINE.finditer(text))
    for index, marker in enumerate(markers):
        end = markers[index + 1].start() if index + 1 < len(markers) else len(text)
        body = text[marker.end() : end].strip().rstrip(";").strip()
        name = marker.group(1)
        if not body:
            raise ValueError(f"{source}: query {name!r} is empty")
        if name in statements:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        statements[name] = body
    return statements


class Queries:
    """All query files, loaded once; ``QUERIES.sessions.get_session`` and so on."""

    def __init__(self, directory: Path = QUERY_DIR) -> None:
        self._files = {path.stem: QueryFile(path) for path in sorted(directory.glob("*.sql"))}

    def __getattr__(self, name: str) -> QueryFile:
        try:
            return self._files[name]
        except KeyError:
            raise AttributeError(f"no query file sql/queries/{name}.sql") from None

    def files(self) -> dict[str, QueryFile]:
        """Return every loaded file by stem."""
        return dict(self._files)


QUERIES = Queries()
