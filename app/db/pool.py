"""The connection pool: orjson JSON codecs registered once per connection, UTC sessions,
and one ``Database`` object that hands out connections and transactions with driver errors
translated to domain errors, and tells what they committed (``app/db/announce.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, cast

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from app.db.announce import MESSAGE, Announcer
from app.db.errors import translate
from app.db.queries import QUERIES
from app.settings import DatabaseSettings
from app.tracing import current_traceparent

# Told each announcement a pooled connection received: (holder, channel, payload).
Hear: TypeAlias = "Callable[[object, str | None, str | None], None]"

# What repositories receive: a pooled connection (a proxy) or, in scripts, a plain one.
Connection: TypeAlias = "asyncpg.Connection[asyncpg.Record] | PoolConnectionProxy[asyncpg.Record]"
T = TypeVar("T")
# Work that must commit with a write (a memory's, a session's): it gets the write's
# connection, inside its transaction, and what the write stored; raising rolls the write
# back. How an Idempotency-Key's answer is stored with its effect (app/webhooks/idempotency.py).
BeforeCommit = Callable[[Connection, T], Awaitable[None]]


def _json_default(value: Any) -> str:
    # asyncpg hands out its own UUID subclass, which orjson does not take as a UUID.
    return str(value)


def _encode_json(value: Any) -> str:
    # Times as the API writes them (msgspec: "…Z"), so a stored answer that is replayed
    # (an Idempotency-Key) reads exactly as the first one did.
    return orjson.dumps(value, default=_json_default, option=orjson.OPT_UTC_Z).decode()


async def _reset_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    """Nothing to undo when a connection goes back to the pool.

    asyncpg's default reset sends ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *;
    RESET ALL`` on every release: one more round trip per request. Pooled connections never
    carry session state here (no SET, LISTEN, session advisory locks or held cursors:
    tests/unit/test_queries.py checks the named queries, and LISTEN (app/db/listener.py)
    and the replica presence lock have connections of their own), and asyncpg still rolls back a
    transaction left open before calling this."""


async def _init_connection(conn: asyncpg.Connection[asyncpg.Record]) -> None:
    for type_name in ("json", "jsonb"):
        await conn.set_type_codec(
            type_name, encoder=_encode_json, decoder=orjson.loads, schema="pg_catalog"
        )


if TYPE_CHECKING:
    _PlainConnection: TypeAlias = asyncpg.Connection[asyncpg.Record]
else:  # asyncpg's Connection is generic in its stubs only
    _PlainConnection = asyncpg.Connection


class _AnnouncingConnection(_PlainConnection):
    """A pooled connection that hands what ``announce_after_commit()`` raises straight to
    its pool's announcer, on behalf of whoever holds it (``_proxy``: the ``connection()``
    that acquired it; nobody between uses, whose messages are dropped, as a listener
    removed at release dropped them).

    Why not ``add_log_listener``: asyncpg clears log listeners whenever a connection goes
    back to the pool (and warns of one left on it), so one had to be added and removed on
    every use: 3-4 µs of the 16 µs a ``connection()`` cost (docs/benchmarks.md, "The
    pool's share of a request"). ``_process_log_message`` is asyncpg's own (private)
    entry for every notice a connection receives; asyncpg is pinned to 0.32.x and
    tests/unit/test_pool_hook.py fails if it is ever renamed. Other log listeners still
    hear every message, these included."""

    __slots__ = ("_hear",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._hear: Hear | None = None

    def _process_log_message(self, fields: dict[str, str], last_query: str) -> None:
        if fields.get("M") == MESSAGE:
            holder = self._proxy  # type: ignore[attr-defined]  # (not in the stubs)
            if holder is not None and self._hear is not None:
                self._hear(holder, fields.get("D"), fields.get("H"))
        super()._process_log_message(fields, last_query)  # type: ignore[misc]  # (idem)


def _protocol_call(conn: Connection, name: str) -> Any:
    """asyncpg's protocol method ``name`` (private: the pool uses it the same way), or None
    if this asyncpg has no such method: then the pool's own wait, at release, is all."""
    protocol = getattr(getattr(conn, "_con", conn), "_protocol", None)
    return getattr(protocol, name, None)


def _cancelling(conn: Connection) -> bool:
    """True while asyncpg cancels the statement a cancelled caller left in flight."""
    is_cancelling = _protocol_call(conn, "_is_cancelling")
    return is_cancelling is not None and bool(is_cancelling())


class Database:
    """Owns the asyncpg pool; the only way services reach PostgreSQL."""

    def __init__(self, url: str, settings: DatabaseSettings) -> None:
        self._url = url
        self._settings = settings
        self._pool: asyncpg.Pool[asyncpg.Record] | None = None
        # Turns at the pool's connections, one per connection, handed out first come, first
        # served (``connection``).
        self._turns = asyncio.Semaphore(settings.pool_max_size)
        # What triggers announce (announce_after_commit) is told after the commit.
        self.announcer = Announcer(self._notify)

    @property
    def url(self) -> str:
        """The connection URL this database was opened with."""
        return self._url

    async def open(self) -> None:
        """Create the pool. Connections are made lazily beyond ``pool_min_size``."""
        self.announcer.reopen()
        self._pool = await asyncpg.create_pool(
            self._url,
            min_size=self._settings.pool_min_size,
            max_size=self._settings.pool_max_size,
            command_timeout=self._settings.command_timeout,
            # Every named query stays prepared: there are more than asyncpg's default 100.
            statement_cache_size=self._settings.statement_cache_size,
            init=self._init_connection,
            reset=_reset_connection,
            connection_class=_AnnouncingConnection,
            # debug1: the announcements of announce_after_commit() come with the replies.
            server_settings={
                "application_name": "switchboard",
                "timezone": "UTC",
                "client_min_messages": "debug1",
            },
            # Bounds every (re)connect, including one made for an acquire that was handed
            # an idle slot without a timeout (``connection`` below).
            timeout=self._settings.acquire_timeout,
        )

    async def _init_connection(self, conn: asyncpg.Connection[asyncpg.Record]) -> None:
        # The pool makes only these (connection_class); isinstance would not tell, as
        # asyncpg's metaclass counts any of its connections an instance of a subclass.
        cast("_AnnouncingConnection", conn)._hear = self.announcer.heard
        await _init_connection(conn)

    async def close(self) -> None:
        """Close the pool, waiting briefly for connections in use."""
        await self.announcer.close()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            try:
                await asyncio.wait_for(pool.close(), timeout=10)
            except TimeoutError:
                pool.terminate()

    @property
    def pool(self) -> asyncpg.Pool[asyncpg.Record]:
        """The open pool (raises if ``open`` was not awaited), for its sizes: work takes
        its connection from ``connection()`` or ``transaction()``, which tell what it
        announced and forget it; a connection acquired from the pool directly would leave
        its announcements with the announcer for good."""
        if self._pool is None:
            raise RuntimeError("Database.open() has not been awaited")
        return self._pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """A pooled connection in autocommit mode; driver errors become domain errors.

        Callers get the pool's connections in the order they asked. asyncpg's own queue
        does not keep that order: a connection given back is promised to the longest
        waiter, but any caller that asks before that waiter runs takes it, and the waiter
        queues again at the back. Under load (64 connections, 10 pooled) that is most
        hand-overs, and a few requests waited several rounds: the 64-connection tails
        (docs/benchmarks.md, "Read paths and the 64-connection tails"). So a caller first
        takes a turn, one per pooled connection, from a semaphore (asyncio's hands a
        released turn to its longest waiter, and a newcomer queues behind waiters), and
        only then asks the pool, which then always has a connection idle for it."""
        pool = self.pool
        turns = self._turns
        if turns.locked():
            # The acquire timeout (an asyncio timer set and cancelled per use) only guards
            # a pool that is in use.
            try:
                async with asyncio.timeout(self._settings.acquire_timeout):
                    await turns.acquire()
            except TimeoutError as exc:
                mapped = translate(exc)
                raise (mapped or exc) from exc
        else:
            await turns.acquire()
        try:
            # A turn normally means a connection is idle: then no timer. One is not when a
            # cancelled caller's turn came back while asyncpg still resets its connection
            # (the release is shielded from the cancel); the acquire timeout then bounds
            # this wait, and the release of a connection acquired with it.
            timeout = None if pool.get_idle_size() else self._settings.acquire_timeout
            async with pool.acquire(timeout=timeout) as conn:
                # What the statements announce reaches the announcer as they are answered,
                # on behalf of this ``conn`` (``_AnnouncingConnection``).
                try:
                    yield conn
                except (Exception, asyncio.CancelledError):
                    # A caller cancelled (or timed out) mid-statement: hear its answer.
                    if _cancelling(conn):
                        await self._settle(conn)
                    raise
                finally:
                    # After the commit (transaction() exits inside this): tell the
                    # process's own listeners at once, the others by a coalesced NOTIFY.
                    self.announcer.committed(conn)
        except Exception as exc:
            mapped = translate(exc)
            if mapped is None:
                raise
            raise mapped from exc
        finally:
            # After the connection is back in the pool: the next turn finds it idle.
            turns.release()

    async def _settle(self, conn: Connection) -> None:
        """Wait until the server has answered a statement whose caller was cancelled (a
        client that disconnected, a timeout): its write may have committed anyway, and
        what it announced comes with that answer. asyncpg's pool waits for the same thing
        when the connection is given back, but by then nobody holds it (its announcements
        are dropped, ``_AnnouncingConnection``) and ``committed`` has run, so the answer
        would be heard by nobody and the listeners would wait for their timers."""
        wait_for_cancellation = _protocol_call(conn, "_wait_for_cancellation")
        if wait_for_cancellation is None:
            return
        # Shielded: a second cancellation must not leave the wait half done for the pool.
        # The answer's announcements are heard as it is read, before this wait ends.
        with contextlib.suppress(Exception):
            await asyncio.shield(wait_for_cancellation(self._settings.command_timeout))

    @asynccontextmanager
    async def transaction(self, *, trace: bool = False) -> AsyncIterator[Connection]:
        """A pooled connection inside one transaction: all of it commits, or none of it.

        With ``trace``, PostgreSQL is told the current traceparent first (one statement
        more, about 30 µs here, hence not for every transaction): rows whose default is
        ``current_traceparent()``, outbox events, then carry the trace that wrote them."""
        async with self.connection() as conn, conn.transaction():
            if trace:
                traceparent = current_traceparent()
                if traceparent is not None:
                    await conn.execute(QUERIES.tracing.set_traceparent, traceparent)
            yield conn

    async def _notify(self, channels: list[str], payloads: list[str]) -> None:
        """One NOTIFY per channel and payload, in one short autocommit statement."""
        async with self.connection() as conn:
            await conn.execute(QUERIES.announce.notify, channels, payloads)

    async def ping(self) -> bool:
        """True if a trivial query succeeds within the acquire timeout."""
        try:
            async with self.connection() as conn:
                return bool(await conn.fetchval(QUERIES.health.ping, timeout=2))
        except Exception:  # readiness reports any failure as "not ready"
            return False
