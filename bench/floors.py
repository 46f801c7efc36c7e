"""Each HTTP path's own floor: the SQL the real path sends, captured at bench time and
replayed by a bare Litestar + asyncpg route (bench/ceiling.py ``/own-floor/{slug}``).

Three parts:

- **Capture** (inside a Switchboard server started by ``bench.serve`` with
  ``SWITCHBOARD_BENCH_CAPTURE=<dir>``): every asyncpg call a request tagged with the
  ``X-Bench-Capture`` header makes (``fetch``, ``fetchrow``, ``fetchval``, ``fetchmany``,
  ``execute``, ``executemany``; transaction control included, since asyncpg sends ``BEGIN``,
  ``COMMIT`` and savepoints through ``execute``) is recorded with its arguments, its result
  and its connection, and written to ``<dir>/<tag>.pickle`` when the request ends.
- **Plan** (``build_plan``): two captures of the same path with different per-request
  values are aligned statement by statement, and each argument becomes a binding: one of
  the request's values (``Var``), a value an earlier statement returned (``FromResult``:
  a version read before an UPDATE), a constant with the request's values substituted
  inside (``Template``: a merged JSON document), a constant, or a value made fresh per
  request (``Fresh``: ids and timestamps the application generates).
- **Replay** (``replay``): the plan's statements on pooled connections, one acquire per
  run of statements the real path sent on one connection, with the request's values.
  ``check`` compares statuses (``UPDATE 1`` against ``UPDATE 0``) and row counts with the
  capture, so a floor that silently no-ops or conflicts is caught before it is measured.
"""

from __future__ import annotations

import contextvars
import os
import pickle
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import orjson

CAPTURE_ENV = "SWITCHBOARD_BENCH_CAPTURE"
CAPTURE_HEADER = "x-bench-capture"
METHODS = ("fetch", "fetchrow", "fetchval", "fetchmany", "execute", "executemany")
CONTROL = ("BEGIN", "START TRANSACTION", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE")


# -- capture --------------------------------------------------------------------------------


@dataclass(slots=True)
class Call:
    """One asyncpg call as the real path made it."""

    method: str
    query: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    connection: int  # which connection (an id within one capture)
    at: datetime  # when it was sent: fresh timestamps keep their offset from it
    rows: list[dict[Any, Any]] = field(default_factory=list)  # fetchval: column None
    status: str | None = None  # ``execute``'s command tag
    raised: str | None = None  # the exception's class, if the call failed

    @property
    def control(self) -> bool:
        """BEGIN, COMMIT, ROLLBACK or a savepoint: a round trip, not a statement."""
        return is_control(self.query)


def is_control(query: str) -> bool:
    """True for transaction-control statements."""
    return query.lstrip().upper().startswith(CONTROL)


def plain(value: Any) -> Any:
    """``value`` with asyncpg's own types made plain (its UUID subclass, records), so that
    captures compare and pickle alike."""
    if isinstance(value, uuid.UUID):
        return value if type(value) is uuid.UUID else uuid.UUID(bytes=value.bytes)
    if isinstance(value, asyncpg.Record):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(plain(v) for v in value)
    return value


def rows_of(method: str, result: Any) -> list[dict[Any, Any]]:
    """A call's result as rows of columns (``fetchval``'s value is column ``None``)."""
    if method in ("fetch", "fetchmany"):
        return [plain(r) for r in result]
    if method == "fetchrow":
        return [] if result is None else [plain(result)]
    if method == "fetchval":
        return [{None: plain(result)}]
    return []


@dataclass(slots=True)
class _Recording:
    calls: list[Call] = field(default_factory=list)
    connections: dict[int, int] = field(default_factory=dict)  # id(connection) -> number


_capture: contextvars.ContextVar[_Recording | None] = contextvars.ContextVar(
    "bench_capture", default=None
)


def _recording(name: str, original: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
    async def method(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        recording = _capture.get()
        if recording is None:
            return await original(self, query, *args, **kwargs)
        ids = recording.connections
        call = Call(
            name,
            query,
            plain(args),
            {k: v for k, v in kwargs.items() if k != "timeout"},
            ids.setdefault(id(self), len(ids)),
            datetime.now(UTC),
        )
        recording.calls.append(call)
        try:
            result = await original(self, query, *args, **kwargs)
        except Exception as exc:
            call.raised = type(exc).__name__
            raise
        if name == "execute":
            call.status = result
        else:
            call.rows = rows_of(name, result)
        return result

    return method


def patch_connections() -> Callable[[], None]:
    """Make asyncpg's ``Connection`` record calls made inside a capture; returns the undo.
    Outside a capture a patched method only reads a context variable."""
    originals = {name: getattr(asyncpg.Connection, name) for name in METHODS}
    for name, original in originals.items():
        setattr(asyncpg.Connection, name, _recording(name, original))

    def undo() -> None:
        for name, original in originals.items():
            setattr(asyncpg.Connection, name, original)

    return undo


def install_capture(app: Any, directory: str) -> Any:
    """Record the asyncpg calls of every request that carries ``X-Bench-Capture: <tag>``
    into ``directory/<tag>.pickle`` (written, then renamed, when the request ends); ``app``
    wrapped as an ASGI app. For the capture server only: it patches asyncpg's
    ``Connection`` class, which pooled connections' proxies call through."""
    patch_connections()
    target = Path(directory)

    async def capturing(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        tag = None
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                # The tag names a file: letters, digits, '-' and '_' only.
                if key == CAPTURE_HEADER.encode() and re.fullmatch(rb"[\w-]{1,64}", value):
                    tag = value.decode()
        if tag is None:
            await app(scope, receive, send)
            return
        recording = _Recording()
        token = _capture.set(recording)
        try:
            await app(scope, receive, send)
        finally:
            _capture.reset(token)
            partial = target / f"{tag}.part"
            partial.write_bytes(pickle.dumps(recording.calls))
            os.replace(partial, target / f"{tag}.pickle")

    return capturing


# -- plan -----------------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _from_text(kind: str, text: str) -> Any:
    return uuid.UUID(text) if kind == "uuid" else int(text) if kind == "int" else text


def _matches(value: Any, text: str) -> str | None:
    """How a request value (always text: it travels in a URL) appears as ``value``."""
    if isinstance(value, uuid.UUID) and str(value) == text:
        return "uuid"
    if type(value) is int and str(value) == text:
        return "int"
    if isinstance(value, str) and value == text:
        return "str"
    return None


@dataclass(frozen=True, slots=True)
class Var:
    """The request's value ``name``, as a UUID, int or str."""

    name: str
    kind: str

    def value(self, values: Mapping[str, str], results: Sequence[Any]) -> Any:
        return _from_text(self.kind, values[self.name])


@dataclass(frozen=True, slots=True)
class FromResult:
    """A column an earlier statement returned: of row ``row``, or of every row (``row``
    None) as a list. ``method`` is that statement's asyncpg method."""

    step: int
    method: str
    row: int | None
    column: Any

    def value(self, values: Mapping[str, str], results: Sequence[Any]) -> Any:
        out = results[self.step]
        if self.method == "fetchval":
            return out
        if self.method == "fetchrow":
            return out[self.column]
        if self.row is None:
            return [r[self.column] for r in out]
        return out[self.row][self.column]


@dataclass(frozen=True, slots=True)
class Appended:
    """A list an earlier statement returned, with items added at its end (a session's
    agent sequence with this request's execution): grows as the real one does."""

    source: FromResult
    tail: tuple[Any, ...]

    def value(self, values: Mapping[str, str], results: Sequence[Any]) -> Any:
        return [*self.source.value(values, results), *self.tail]


@dataclass(frozen=True, slots=True)
class Template:
    """A constant with request values inside it: at each ``places`` (a path of keys and
    indexes into the constant), the leaf is the value, or a text holding it."""

    constant: Any
    places: tuple[tuple[tuple[Any, ...], str, str, str], ...]  # path, name, kind, sample

    def value(self, values: Mapping[str, str], results: Sequence[Any]) -> Any:
        out = self.constant
        for path, name, kind, sample in self.places:
            out = _replace_at(out, path, name, kind, sample, values[name])
        return out


@dataclass(frozen=True, slots=True)
class Const:
    """The same value for every request."""

    constant: Any

    def value(self, values: Mapping[str, str], results: Sequence[Any]) -> Any:
        return self.constant


@dataclass(frozen=True, slots=True)
class Fresh:
    """A value the application makes anew per request: a new UUID, a timestamp at the same
    offset from now, a new random text; anything else keeps the captured value."""

    sample: Any
    offset: timedelta | None = None

    def value(self, values: Mapping[str, str], results: Sequence[Any]) -> Any:
        if isinstance(self.sample, uuid.UUID):
            return _uuid7()
        if isinstance(self.sample, datetime) and self.offset is not None:
            now = (
                datetime.now(UTC) if self.sample.tzinfo else datetime.now(UTC).replace(tzinfo=None)
            )
            return now + self.offset
        if isinstance(self.sample, bytes):
            return os.urandom(len(self.sample))
        if isinstance(self.sample, str):
            return secrets.token_hex(max(len(self.sample), 2) // 2 + 1)[: len(self.sample)]
        return self.sample


Binding = Var | FromResult | Appended | Template | Const | Fresh


@dataclass(frozen=True, slots=True)
class Step:
    """One statement of a plan, with its arguments' bindings and what the capture saw."""

    method: str
    query: str
    args: tuple[Binding, ...]
    kwargs: dict[str, Any]
    segment: int  # statements of one segment run on one acquired connection
    status: str | None
    row_count: int
    raised: str | None

    @property
    def control(self) -> bool:
        """Transaction control: a round trip, not a statement."""
        return is_control(self.query)


@dataclass(frozen=True, slots=True)
class Plan:
    """A path's statements in order, and how to fill each one's arguments."""

    steps: tuple[Step, ...]

    @property
    def statements(self) -> int:
        """Statements sent, not counting transaction control."""
        return sum(not s.control for s in self.steps)

    @property
    def round_trips(self) -> int:
        """Every call is one round trip (asyncpg keeps the statements prepared)."""
        return len(self.steps)

    @property
    def segments(self) -> list[list[int]]:
        """Step indexes grouped by the connection acquire they run under."""
        out: list[list[int]] = []
        for i, step in enumerate(self.steps):
            if not out or self.steps[out[-1][-1]].segment != step.segment:
                out.append([])
            out[-1].append(i)
        return out

    def describe(self) -> list[str]:
        """One line per statement: its bindings and the first line of its SQL."""
        lines = []
        for step in self.steps:
            sql = " ".join(step.query.split())[:100]
            kinds = ",".join(type(b).__name__ for b in step.args)
            lines.append(f"[conn {step.segment}] {step.method}({kinds}) {sql}")
        return lines


class CaptureMismatch(Exception):
    """The two captures of a path did not send the same statements."""


def _result_places(value: Any, earlier: Sequence[Call]) -> list[tuple[int, int | None, Any]]:
    if value is None or isinstance(value, bool):
        return []
    places: list[tuple[int, int | None, Any]] = []
    for index, call in enumerate(earlier):
        if call.control:
            continue
        for row_index, row in enumerate(call.rows):
            places += [(index, row_index, col) for col, v in row.items() if _same(v, value)]
        if isinstance(value, list) and call.rows:
            for col in call.rows[0]:
                if _same([r.get(col) for r in call.rows], value):
                    places.append((index, None, col))
    return places


def _appended(
    va: Any, vb: Any, earlier_a: Sequence[Call], earlier_b: Sequence[Call]
) -> Appended | None:
    """``va`` (and ``vb`` in the other capture) as a list an earlier statement's first row
    returned, with items after it."""
    if not (isinstance(va, list) and isinstance(vb, list)):
        return None
    for index, (a, b) in enumerate(zip(earlier_a, earlier_b, strict=True)):
        if a.control or not a.rows or not b.rows:
            continue
        for column, ra in a.rows[0].items():
            rb = b.rows[0].get(column)
            if (
                isinstance(ra, list)
                and isinstance(rb, list)
                and len(va) > len(ra)
                and va[: len(ra)] == ra
                and len(vb) > len(rb)
                and vb[: len(rb)] == rb
            ):
                return Appended(FromResult(index, a.method, 0, column), tuple(va[len(ra) :]))
    return None


def _var_places(
    value: Any, values: Mapping[str, str], path: tuple[Any, ...] = ()
) -> list[tuple[tuple[Any, ...], str, str, str]]:
    """Where the request's values sit inside ``value`` (leaves equal to one, or texts
    holding one)."""
    out: list[tuple[tuple[Any, ...], str, str, str]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _var_places(v, values, (*path, k))
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            out += _var_places(v, values, (*path, i))
    else:
        for name, text in values.items():
            kind = _matches(value, text)
            if kind is not None:
                out.append((path, name, kind, text))
            elif isinstance(value, str) and len(text) >= 4 and text in value:
                out.append((path, name, "in", text))
    return out


def _replace_at(
    obj: Any, path: tuple[Any, ...], name: str, kind: str, sample: str, text: str
) -> Any:
    """``obj`` with the leaf at ``path`` replaced (copies along the path only)."""
    if not path:
        return obj.replace(sample, text) if kind == "in" else _from_text(kind, text)
    key, rest = path[0], path[1:]
    if isinstance(obj, dict):
        copy: Any = dict(obj)
    elif isinstance(obj, tuple):
        copy = list(obj)
    else:
        copy = list(obj)
    copy[key] = _replace_at(obj[key], rest, name, kind, sample, text)
    return tuple(copy) if isinstance(obj, tuple) else copy


def _bind(
    index: int,
    position: int,
    a: Call,
    b: Call,
    capture_a: Sequence[Call],
    capture_b: Sequence[Call],
    values_a: Mapping[str, str],
    values_b: Mapping[str, str],
) -> Binding:
    va, vb = a.args[position], b.args[position]
    for name, text in values_a.items():
        kind = _matches(va, text)
        if kind is not None and _matches(vb, values_b[name]) == kind:
            return Var(name, kind)
    in_b = set(_result_places(vb, capture_b[:index]))
    for step, row, column in _result_places(va, capture_a[:index]):
        if (step, row, column) in in_b:
            return FromResult(step, capture_a[step].method, row, column)
    appended = _appended(va, vb, capture_a[:index], capture_b[:index])
    if appended is not None:
        return appended
    places = _var_places(va, values_a)
    if places:
        return Template(va, tuple(places))
    if _same(va, vb):
        return Const(va)
    if isinstance(va, datetime):
        return Fresh(va, va - (a.at if va.tzinfo else a.at.replace(tzinfo=None)))
    return Fresh(va)


def build_plan(
    capture_a: Sequence[Call],
    capture_b: Sequence[Call],
    values_a: Mapping[str, str],
    values_b: Mapping[str, str],
) -> Plan:
    """The replay plan of a path from two captures of it made with different request
    values (``values_a`` and ``values_b``: name -> the text the request carried)."""
    if [(c.method, c.query) for c in capture_a] != [(c.method, c.query) for c in capture_b]:
        raise CaptureMismatch(
            f"{len(capture_a)} calls then {len(capture_b)}, not the same statements"
        )
    steps = []
    segment = 0
    for index, (a, b) in enumerate(zip(capture_a, capture_b, strict=True)):
        if index and a.connection != capture_a[index - 1].connection:
            segment += 1
        args = tuple(
            _bind(index, p, a, b, capture_a, capture_b, values_a, values_b)
            for p in range(len(a.args))
        )
        steps.append(
            Step(a.method, a.query, args, a.kwargs, segment, a.status, len(a.rows), a.raised)
        )
    return Plan(tuple(steps))


# -- replay ---------------------------------------------------------------------------------


def _uuid7() -> uuid.UUID:
    # The application's ids are version 7 (time-ordered): so are the floor's.
    from app.common.ids import uuid7

    return uuid7()


def _encode_json(value: Any) -> str:
    return orjson.dumps(value, default=str, option=orjson.OPT_UTC_Z).decode()


async def init_connection(conn: asyncpg.Connection[Any]) -> None:
    """The JSON codecs Switchboard's pool registers (orjson), so captured documents
    are sent as they were."""
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=_encode_json, decoder=orjson.loads, schema="pg_catalog"
        )


async def no_reset(conn: asyncpg.Connection[Any]) -> None:
    """Switchboard's pool sends nothing on release (app/db/pool.py): nor does the floor's."""


async def open_pool(url: str, max_size: int = 10) -> asyncpg.Pool[Any]:
    """A pool set up as Switchboard's: same codecs, statement cache and reset."""
    pool: asyncpg.Pool[Any] = await asyncpg.create_pool(
        url,
        min_size=2,
        max_size=max_size,
        statement_cache_size=512,
        init=init_connection,
        reset=no_reset,
        server_settings={"timezone": "UTC"},
    )
    return pool


class ReplayMismatch(Exception):
    """A replayed statement did not do what the captured one did."""


async def replay(
    pool: asyncpg.Pool[Any], plan: Plan, values: Mapping[str, str], *, check: bool = False
) -> Any:
    """Run ``plan`` with the request's ``values``; the last statement's result (not
    counting transaction control) as JSON-ready data. With ``check``, raise
    ``ReplayMismatch`` where a status, a row count or a failure differs from the capture."""
    results: list[Any] = [None] * len(plan.steps)
    last: Any = None
    for segment in plan.segments:
        async with pool.acquire() as conn:
            for i in segment:
                step = plan.steps[i]
                args = [b.value(values, results) for b in step.args]
                try:
                    out = await getattr(conn, step.method)(step.query, *args, **step.kwargs)
                except Exception as exc:
                    if step.raised is None:
                        raise
                    if check and type(exc).__name__ != step.raised:
                        raise ReplayMismatch(f"step {i} raised {exc!r}, not {step.raised}") from exc
                    out = None
                else:
                    if check:
                        _check(i, step, out)
                results[i] = out
                if not step.control:
                    last = out
    if isinstance(last, list):
        return [dict(r) for r in last]
    if isinstance(last, asyncpg.Record):
        return dict(last)
    return last


def _check(index: int, step: Step, out: Any) -> None:
    if step.raised is not None:
        raise ReplayMismatch(f"step {index} succeeded where the capture raised {step.raised}")
    if step.method == "execute":
        if out != step.status:
            raise ReplayMismatch(f"step {index}: {out!r}, captured {step.status!r}")
        return
    if step.method == "fetchval":
        return
    count = len(rows_of(step.method, out))
    if (count == 0) != (step.row_count == 0):
        raise ReplayMismatch(f"step {index}: {count} rows, captured {step.row_count}")


def load_plans(path: str) -> dict[str, Plan]:
    """The plans a bench run wrote for the floor server, by slug."""
    # Written by this bench run into its own temporary directory, never taken from outside.
    plans: dict[str, Plan] = pickle.loads(Path(path).read_bytes())  # noqa: S301
    return plans
