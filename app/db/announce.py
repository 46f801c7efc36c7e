"""Telling listeners of a commit without a NOTIFY inside the writing transaction.

Why: a transaction that queued a NOTIFY takes one database-wide lock at commit
(``PreCommit_Notify``), held through its commit's WAL flush, so every commit that queued
one waits for the one before it. Every session write writes an outbox event, so a NOTIFY
from the outbox trigger serialised all of them (issue 22: 8 connections of one-row inserts
made 214-329 commits/s with it against 1,145-1,477/s without).

How: the triggers that used to NOTIFY call ``announce_after_commit(channel, payload)``
(sql/schema.sql) instead: a DEBUG message that travels in the statement's own reply to the
client that wrote, no round trip more. The pool asks for such messages
(``client_min_messages = debug1``, app/db/pool.py), whose connections hand them to
``Announcer.heard`` as they arrive (no log listener: ``pool._AnnouncingConnection`` says
why), which remembers what each holder of a connection announced. When
``Database.connection()`` gives the connection back (after its transaction committed;
for a caller cancelled while its statement was in flight, once the server has answered
it, since the write may have committed anyway), ``Announcer.committed`` then

- calls this process's own listeners of each channel at once, in-process (the event hub,
  the task worker, task waiters): the writer's own streams and waiters need no database
  round trip;
- queues the channel and payload for one coalesced NOTIFY, sent by one background task
  from a short autocommit statement on a pooled connection, off the request path: at most
  one in flight at a time, and whatever was announced meanwhile goes in the next one.
  That NOTIFY's commit takes the same lock, but only announcers (one per process) queue
  behind it, never a request. Waiting for a pooled connection behind the requests is
  also what coalesces a burst: a connection of its own was tried, and 200 concurrent
  commits then sent 73-79 NOTIFYs instead of 3, each waking every other process's hub.

Why here and not in the services: every write path goes through ``Database.connection()``
(``transaction()`` is built on it), and the database itself says which statements wrote
something worth telling, so a new writer (a new trigger, a new service) cannot forget to
announce. Reads announce nothing. What other tools write (psql, a migration: they do not
ask for DEBUG messages) and a NOTIFY that is lost (a listener reconnecting) are found by
each listener's timer, the safety net, not the main path.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable

logger = logging.getLogger("switchboard.announce")

# The message announce_after_commit() raises (its DETAIL is the channel, its HINT the payload).
MESSAGE = "switchboard announce"

# A local listener is handed each announced payload; it runs on the event loop.
OnAnnounce = Callable[[str], None]
# Sends NOTIFYs: one per (channel, payload), in one statement.
Send = Callable[[list[str], list[str]], Awaitable[None]]


class Announcer:
    """What the connections of one pool announced, handed to this process's listeners
    after the commit and to the other processes by one coalesced NOTIFY per burst."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._heard: dict[object, set[tuple[str, str]]] = {}
        self._listeners: dict[str, list[OnAnnounce]] = {}
        self._pending: dict[str, set[str]] = {}
        self._sender: asyncio.Task[None] | None = None
        self._closed = False
        self.notifies_sent = 0  # statements sent (tests, metrics)
        # An empty payload goes out as this token, so this process's own listeners can
        # skip the echo of what they were told at the commit (one Database per process:
        # the supervisor's workers build theirs after the fork).
        self.origin = uuid.uuid4().hex

    def listen(self, channel: str, on_announce: OnAnnounce) -> None:
        """Call ``on_announce(payload)`` after every commit in this process that announced
        on ``channel``."""
        self._listeners.setdefault(channel, []).append(on_announce)

    def unlisten(self, channel: str, on_announce: OnAnnounce) -> None:
        """Stop calling ``on_announce``."""
        listeners = self._listeners.get(channel, [])
        if on_announce in listeners:
            listeners.remove(on_announce)

    def from_elsewhere(self, payload: str) -> bool:
        """False for the echo of a NOTIFY this announcer sent with an empty payload."""
        return payload != self.origin

    def heard(self, conn: object, channel: str | None, payload: str | None) -> None:
        """``conn`` (the holder of a pooled connection) received an announcement on
        ``channel``: remember it until ``committed``."""
        if not channel:
            return
        self._heard.setdefault(conn, set()).add((channel, payload or ""))

    def committed(self, conn: object) -> None:
        """``conn`` is given back, its work committed (or rolled back: a wake for nothing
        costs a read): tell what it announced."""
        announced = self._heard.pop(conn, None)
        if not announced:
            return
        for channel, payload in announced:
            for on_announce in list(self._listeners.get(channel, ())):
                try:
                    on_announce(payload)
                except Exception:  # one bad listener must not stop the others
                    logger.warning("a listener of %s failed", channel, exc_info=True)
            self._pending.setdefault(channel, set()).add(payload)
        if self._closed:
            return  # the pool is closing: the other processes' timers find it
        if self._sender is None or self._sender.done():
            # A context of its own: the sender outlives the request that started it.
            self._sender = asyncio.get_running_loop().create_task(
                self._send_pending(), name="announce", context=contextvars.Context()
            )

    async def _send_pending(self) -> None:
        while self._pending:
            pending, self._pending = self._pending, {}
            channels = [c for c, payloads in pending.items() for _ in payloads]
            payloads = [p or self.origin for values in pending.values() for p in values]
            try:
                await self._send(channels, payloads)
                self.notifies_sent += 1
            except Exception:
                # The database is away (or the pool stayed full): the batch goes back, to be
                # sent with the next commit's; meanwhile the listeners' timers find it.
                for channel, values in pending.items():
                    self._pending.setdefault(channel, set()).update(values)
                logger.warning("announcing a commit failed", exc_info=True)
                return

    def reopen(self) -> None:
        """The pool is (re)opened: commits are told again."""
        self._closed = False

    async def close(self) -> None:
        """Send what is pending (briefly), then stop: a commit told after this starts no
        sender (the pool it would borrow from is closing)."""
        self._closed = True
        sender, self._sender = self._sender, None
        if sender is not None and not sender.done():
            try:
                await asyncio.wait_for(asyncio.shield(sender), timeout=2)
            except Exception:
                sender.cancel()
        self._heard.clear()
        self._pending.clear()
