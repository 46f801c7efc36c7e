"""The named-query loader, and the shape of every statement in sql/queries."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.db.queries import QUERIES, QUERY_DIR, Queries, parse_named_queries
from app.settings import PROJECT_ROOT

# What PostgreSQL ignores when it looks for $n parameters: string literals and line comments.
_LITERAL_OR_COMMENT = re.compile(r"'(?:[^']|'')*'|--[^\n]*")
# str.format / %-formatting placeholders: SQL must never be assembled from strings. Checked
# on the whole text, literals included (a placeholder in quotes is the classic injection);
# the price is that a one-element array literal such as '{admin}' must be written ARRAY[...].
_FORMAT_PLACEHOLDER = re.compile(r"\{\s*[A-Za-z_][A-Za-z0-9_.]*\s*(?:![rsa])?(?::[^{}]*)?\}")
_PERCENT_PLACEHOLDER = re.compile(r"%(?:\([A-Za-z_][A-Za-z0-9_]*\))?[sdr]")
_PARAMETER = re.compile(r"\$(\d+)")
# Session state a pooled connection would carry to the next request. The pool skips the
# reset round trip on release (app/db/pool.py), so no named query may leave any behind:
# SET without LOCAL, set_config(..., false), LISTEN, session-level advisory locks, cursors.
_SESSION_STATE = re.compile(
    r"(?:\A|;)\s*SET\s+(?!LOCAL\b)"  # a SET command, not UPDATE ... SET
    r"|\bset_config\s*\([^)]*\bfalse\s*\)"
    r"|\b(?:LISTEN|DECLARE)\b"
    r"|\bpg_(?:try_)?advisory_lock(?:_shared)?\s*\(",
    re.IGNORECASE,
)


# Statements that hold session state on purpose, sent only on a connection of their own
# (never a pooled one): the replica presence lock, which must last as long as its connection.
DEDICATED_CONNECTION = {("presence", "take_replica_presence")}


def executable_text(statement: str) -> str:
    """The statement without its literals and comments."""
    return _LITERAL_OR_COMMENT.sub(" ", statement)


def all_statements() -> list[tuple[str, str, str]]:
    """(file, name, statement) for every query the application can run."""
    return [
        (stem, name, getattr(query_file, name))
        for stem, query_file in QUERIES.files().items()
        for name in query_file.names()
    ]


STATEMENTS = all_statements()


def test_blocks_are_split_by_name_markers() -> None:
    text = (
        "-- File header: ignored, it comes before the first marker.\n"
        "\n"
        "-- name: first\n"
        "SELECT 1\n"
        "\n"
        "-- name: second_2\n"
        "-- A comment that belongs to the statement.\n"
        "SELECT $1\n"
        "FROM t\n"
        "--name:third\n"
        "SELECT 3\n"
    )
    parsed = parse_named_queries(text, "x.sql")
    assert parsed == {
        "first": "SELECT 1",
        "second_2": "-- A comment that belongs to the statement.\nSELECT $1\nFROM t",
        "third": "SELECT 3",
    }
    assert list(parsed) == ["first", "second_2", "third"]


def test_trailing_semicolons_and_whitespace_are_stripped() -> None:
    parsed = parse_named_queries(
        "-- name: a\nSELECT 1;\n\n-- name: b\n  SELECT 2 ;  \n-- name: c\nSELECT 3;;\n", "x.sql"
    )
    assert parsed == {"a": "SELECT 1", "b": "SELECT 2", "c": "SELECT 3"}


def test_inner_semicolons_are_kept() -> None:
    parsed = parse_named_queries("-- name: a\nSELECT ';' AS semicolon;\n", "x.sql")
    assert parsed == {"a": "SELECT ';' AS semicolon"}


def test_text_without_markers_has_no_statements() -> None:
    assert parse_named_queries("SELECT 1;\n-- just a comment\n", "x.sql") == {}


def test_a_marker_must_be_a_whole_line() -> None:
    parsed = parse_named_queries("-- name: a\nSELECT 1 -- name: b\n", "x.sql")
    assert parsed == {"a": "SELECT 1 -- name: b"}


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match=r"dup\.sql.*'a'.*twice"):
        parse_named_queries(
            "-- name: a\nSELECT 1\n-- name: b\nSELECT 2\n-- name: a\nSELECT 3\n", "dup.sql"
        )


@pytest.mark.parametrize(
    "text",
    [
        "-- name: a\n",
        "-- name: a",
        "-- name: a\n   \n\n",
        "-- name: a\n;\n",
        "-- name: a\n;;\n",
        "-- name: a\n-- name: b\nSELECT 1\n",
        "-- name: b\nSELECT 1\n-- name: a\n\n",
    ],
)
def test_empty_blocks_are_rejected(text: str) -> None:
    with pytest.raises(ValueError, match=r"empty\.sql.*'a'.*empty"):
        parse_named_queries(text, "empty.sql")


def test_every_query_file_is_loaded() -> None:
    on_disk = sorted(path.stem for path in QUERY_DIR.glob("*.sql"))
    assert on_disk, "no query files found"
    assert sorted(QUERIES.files()) == on_disk
    for stem in on_disk:
        assert QUERIES.files()[stem].names(), f"{stem}.sql defines no queries"


def test_every_marker_line_in_the_files_is_recognised() -> None:
    # A marker the loader does not recognise (say "-- name: getUser") would silently glue
    # its statement onto the previous one.
    for stem, query_file in QUERIES.files().items():
        text = query_file.path.read_text(encoding="utf-8")
        markers = [
            line.split(":", 1)[1].strip()
            for line in text.splitlines()
            if re.match(r"\s*--\s*name\s*:", line, re.IGNORECASE)
        ]
        assert markers == query_file.names(), stem


def test_statements_are_reachable_as_attributes() -> None:
    stem, name, statement = STATEMENTS[0]
    assert getattr(getattr(QUERIES, stem), name) == statement
    with pytest.raises(AttributeError, match="no query named"):
        _ = getattr(QUERIES, stem).no_such_query
    with pytest.raises(AttributeError, match="no query file"):
        _ = QUERIES.no_such_file


def test_a_directory_is_loaded_file_by_file(tmp_path: Path) -> None:
    directory = tmp_path
    (directory / "b.sql").write_text("-- name: one\nSELECT 1;\n", encoding="utf-8")
    (directory / "a.sql").write_text("-- name: two\nSELECT 2\n", encoding="utf-8")
    (directory / "ignored.txt").write_text("-- name: three\nSELECT 3\n", encoding="utf-8")
    queries = Queries(directory)
    assert list(queries.files()) == ["a", "b"]
    assert queries.b.one == "SELECT 1"
    assert queries.a.two == "SELECT 2"


def test_there_are_statements_to_check() -> None:
    assert len(STATEMENTS) > 50


@pytest.mark.parametrize(
    ("stem", "name", "statement"),
    STATEMENTS,
    ids=[f"{stem}.{name}" for stem, name, _ in STATEMENTS],
)
def test_statement_shape(stem: str, name: str, statement: str) -> None:
    assert statement.strip(), f"{stem}.{name} is empty"
    assert executable_text(statement).strip(), f"{stem}.{name} is only comments"
    assert not statement.rstrip().endswith(";")
    assert not _FORMAT_PLACEHOLDER.search(statement), _FORMAT_PLACEHOLDER.findall(statement)
    assert not _PERCENT_PLACEHOLDER.search(statement), _PERCENT_PLACEHOLDER.findall(statement)
    numbers = sorted({int(n) for n in _PARAMETER.findall(executable_text(statement))})
    assert numbers == list(range(1, len(numbers) + 1)), f"{stem}.{name} uses ${numbers}"
    leftover = _SESSION_STATE.search(executable_text(statement))
    if (stem, name) in DEDICATED_CONNECTION:
        assert leftover is not None, f"{stem}.{name} no longer needs its exemption"
        return
    assert leftover is None, f"{stem}.{name} leaves session state: {leftover.group(0)!r}"


def test_session_state_queries_run_only_on_their_own_connection() -> None:
    # The exempt queries' file is used by one module, which never touches the pool.
    users = [
        path.relative_to(PROJECT_ROOT).as_posix()
        for path in sorted((PROJECT_ROOT / "app").rglob("*.py"))
        if "QUERIES.presence" in path.read_text(encoding="utf-8")
    ]
    assert users == ["app/db/presence.py"]
    assert ".pool" not in (PROJECT_ROOT / "app/db/presence.py").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("statement", "numbers"),
    [
        ("SELECT $1, $2", [1, 2]),
        ("SELECT $2, $1, $2", [1, 2]),
        ("SELECT 1 -- $1 in a comment\n", []),
        ("SELECT '$1' AS literal, $1", [1]),
        ("SELECT 'it''s $3', $1", [1]),
        ("SELECT $10, $2", [2, 10]),
    ],
)
def test_parameter_scan(statement: str, numbers: list[int]) -> None:
    # The scan above is only as good as this helper: it must see real parameters only.
    assert sorted({int(n) for n in _PARAMETER.findall(executable_text(statement))}) == numbers


@pytest.mark.parametrize(
    ("text", "stateful"),
    [
        ("SET statement_timeout = 5", True),
        ("SET SESSION work_mem TO '64MB'", True),
        ("SET LOCAL statement_timeout = 5", False),
        ("UPDATE agents SET roles = $2 WHERE name = $1", False),
        ("INSERT INTO t VALUES (1) ON CONFLICT (a) DO UPDATE SET b = excluded.b", False),
        ("SELECT set_config('x.y', $1, false)", True),
        ("SELECT set_config('x.y', $1, true)", False),
        ("LISTEN breaker_changes", True),
        ("SELECT pg_advisory_lock(1)", True),
        ("SELECT pg_try_advisory_lock(1)", True),
        ("SELECT pg_advisory_xact_lock(1)", False),
        ("DECLARE c CURSOR WITH HOLD FOR SELECT 1", True),
    ],
)
def test_session_state_pattern(text: str, stateful: bool) -> None:
    assert bool(_SESSION_STATE.search(text)) is stateful


@pytest.mark.parametrize(
    ("text", "placeholder"),
    [
        ("SELECT * FROM {table}", True),
        ("SELECT {0}", False),
        ("SELECT * FROM t WHERE id = {ident!r}", True),
        ("SELECT coalesce(x, '{}')", False),
        ("SELECT '{a,b}'::text[]", False),
        ("SELECT '{admin}'::text[]", True),
        ("SELECT '{\"key\": 1}'::jsonb", False),
        ("WHERE name = %s", True),
        ("WHERE name = %(name)s", True),
        ("WHERE name LIKE 'a%'", False),
    ],
)
def test_placeholder_patterns(text: str, placeholder: bool) -> None:
    found = bool(_FORMAT_PLACEHOLDER.search(text) or _PERCENT_PLACEHOLDER.search(text))
    assert found is placeholder


# -- query names ---------------------------------------------------------------------------
# Code reaches a statement as an attribute, QUERIES.<file>.<name> or Q.<name> after
# Q = QUERIES.<file>, and the loader answers any name at run time: a misspelt one would fail
# only when its line runs. So the code that sends queries is read here: every name it uses
# must be defined, every defined name must be used (a statement nobody sends is dead), and
# a use the scan cannot check (QUERIES or a file passed around, getattr) is refused.
QUERY_USERS = ("app", "scheduler", "bench", "drills")
# Attributes of a loaded file and of the loader that are not statements.
FILE_ATTRIBUTES = {"names", "path"}


@dataclass(frozen=True, slots=True)
class QueryUse:
    """One place that names a statement (or uses the loader in a way the scan cannot read)."""

    where: str
    stem: str
    name: str | None  # None: a use the scan cannot check


def query_uses(source: str, where: str) -> list[QueryUse]:
    """The statements a module names, and its uses of the loader the scan cannot check."""
    tree = ast.parse(source)
    loaders = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "app.db.queries"
        for alias in node.names
        if alias.name == "QUERIES"
    }
    files: dict[str, str] = {}  # a name bound to QUERIES.<file> -> the file
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Attribute)
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id in loaders
        ):
            files[node.targets[0].id] = node.value.attr
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    uses: list[QueryUse] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name) or node.id not in loaders | set(files):
            continue
        at = f"{where}:{node.lineno}"
        parent = parents.get(node)
        if isinstance(node.ctx, ast.Store) or isinstance(parent, ast.alias):
            continue
        if node.id in files:
            if isinstance(parent, ast.Attribute) and parent.attr not in FILE_ATTRIBUTES:
                uses.append(QueryUse(at, files[node.id], parent.attr))
            else:
                uses.append(QueryUse(at, files[node.id], None))
            continue
        # The loader itself: QUERIES.<file>.<name>, or Q = QUERIES.<file> (seen above).
        grandparent = parents.get(parent) if parent is not None else None
        if not isinstance(parent, ast.Attribute):
            uses.append(QueryUse(at, "?", None))
        elif isinstance(grandparent, ast.Attribute) and grandparent.attr not in FILE_ATTRIBUTES:
            uses.append(QueryUse(at, parent.attr, grandparent.attr))
        elif not (isinstance(grandparent, ast.Assign) and parent is grandparent.value):
            uses.append(QueryUse(at, parent.attr, None))
    return uses


def tree_query_uses() -> list[QueryUse]:
    """Every use of a named statement in the code that sends them."""
    return [
        use
        for folder in QUERY_USERS
        for path in sorted((PROJECT_ROOT / folder).rglob("*.py"))
        for use in query_uses(
            path.read_text(encoding="utf-8"), path.relative_to(PROJECT_ROOT).as_posix()
        )
    ]


DEFINED = {(stem, name) for stem, name, _ in STATEMENTS}


def test_every_statement_the_code_names_exists() -> None:
    uses = tree_query_uses()
    assert len(uses) > 50, "the scan found too few uses to be reading the code"
    unchecked = [use for use in uses if use.name is None]
    assert unchecked == [], "uses of the query loader the scan cannot check"
    missing = [use for use in uses if (use.stem, use.name) not in DEFINED]
    assert missing == [], "named in code, defined in no sql/queries file"


def test_every_statement_is_used() -> None:
    used = {(use.stem, use.name) for use in tree_query_uses()}
    assert sorted(DEFINED - used) == [], "defined, but no code sends it: remove it"


def test_no_statement_is_named_like_a_file_attribute() -> None:
    # QUERIES.<file>.names is the method, never a statement: the scan relies on it.
    assert {name for _, name, _ in STATEMENTS} & FILE_ATTRIBUTES == set()
    assert set(QUERIES.files()) & {"files"} == set()


@pytest.mark.parametrize(
    ("source", "found"),
    [
        (
            "from app.db.queries import QUERIES\nQ = QUERIES.sessions\nQ.get_session\n",
            [("sessions", "get_session")],
        ),
        ("from app.db.queries import QUERIES\nQUERIES.health.ping\n", [("health", "ping")]),
        (
            "from app.db.queries import QUERIES as L\nF = L.users\nasync def f(c):\n"
            "    await c.fetch(F.get_user, 1)\n    await c.fetch(L.agents.list_agents)\n",
            [("users", "get_user"), ("agents", "list_agents")],
        ),
        # Uses the scan cannot check are reported as such (name None).
        ("from app.db.queries import QUERIES\nQ = QUERIES.users\nrun(Q)\n", [("users", None)]),
        (
            "from app.db.queries import QUERIES\nQ = QUERIES.users\ngetattr(Q, 'x')\n",
            [("users", None)],
        ),
        ("from app.db.queries import QUERIES\nrun(QUERIES)\n", [("?", None)]),
        ("from app.db.queries import QUERIES\nQUERIES.users\n", [("users", None)]),
        ("from app.db.queries import QUERIES\nQUERIES.files()\n", [("files", None)]),
        # A file's own attributes are not statements: the scan cannot check such a use.
        ("from app.db.queries import QUERIES\nQ = QUERIES.users\nQ.names()\n", [("users", None)]),
        # Another object's attributes are not statements.
        ("Q = object()\nQ.get_session\n", []),
    ],
)
def test_query_use_scan(source: str, found: list[tuple[str, str | None]]) -> None:
    # The two tests above are only as good as this scan: it must see every use.
    assert [(use.stem, use.name) for use in query_uses(source, "m.py")] == found
