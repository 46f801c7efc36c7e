"""One process's fan-out of new outbox events to the streams it holds.

A process that serves streams is woken three ways, each waking one pump:

- in-process, right after a commit of this process wrote events (the outbox trigger
  announces them, ``app/db/announce.py``): no database round trip between the writer's
  commit and the pump;
- by a NOTIFY on ``switchboard_outbox``, on one LISTEN connection of its own
  (``app/db/listener.py``) however many streams it holds: another process (a replica, the
  scheduler) that committed events sends one, coalesced, after its commits;
- every ``sync_seconds`` (default 1 s), for what nobody announced: a write from psql or
  another tool, a NOTIFY lost while the LISTEN connection was down.

The trigger itself sends no NOTIFY: a transaction that queues one takes a database-wide
lock at commit, so every session write would wait for the one before it (issue 22).

The pump numbers the events committed since (``outbox_sequence()``: whichever replica
numbers first, the others find nothing left), reads every numbered event after the last
one it read, and offers each to the streams that want it. An event made on another replica
reaches the streams here the same way: through the table and the NOTIFY.

Each stream has a bounded queue. A stream whose queue is full (its client reads too
slowly) is evicted: it gets nothing more, its response is ended, and the client resumes
with ``Last-Event-ID`` from the table. Memory per stream is bounded by the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections import Counter, deque
from collections.abc import Callable

from app.common.background import stop_loop
from app.db.listener import Listener
from app.db.pool import Database
from app.errors import TooManyStreams
from app.events import repository as repo
from app.events.schemas import StreamEvent
from app.settings import StreamSettings

logger = logging.getLogger("switchboard.events.hub")

CHANNEL = "switchboard_outbox"
# How long stopping waits for a numbering run in flight (one batch takes milliseconds).
NUMBERING_STOP_SECONDS = 5.0


class Subscriber:
    """One stream's place in the hub: what it wants, and the events waiting for it."""

    def __init__(self, wants: Callable[[StreamEvent], bool], capacity: int) -> None:
        self._wants = wants
        self._capacity = capacity
        self.queue: deque[StreamEvent] = deque()
        self.ready = asyncio.Event()
        # Set once the queue overflowed: the stream must end (the client resumes).
        self.evicted = asyncio.Event()
        # Set when the server stops: the stream sends what is queued, then ends cleanly.
        self.finished = False

    def finish(self) -> None:
        """End the stream once its queue is sent (the server is stopping)."""
        self.finished = True
        self.ready.set()

    def offer(self, event: StreamEvent) -> bool:
        """Queue ``event`` if wanted; False once the queue is full (evicted)."""
        if self.evicted.is_set():
            return False
        if not self._wants(event):
            return True
        if len(self.queue) >= self._capacity:
            self.queue.clear()
            self.evicted.set()
            self.ready.set()
            return False
        self.queue.append(event)
        self.ready.set()
        return True


class EventHub:
    """The process's LISTEN connection and pump, the streams it feeds, and the per-key
    count of open streams."""

    def __init__(self, database: Database, settings: StreamSettings) -> None:
        self._db = database
        self._settings = settings
        self._subscribers: set[Subscriber] = set()
        self._open: Counter[str] = Counter()
        self._last = 0  # the position of the last event offered
        self._wake = asyncio.Event()
        self._stopping = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()
        # The process's numbering runs (``number_committed``): the one in flight, and the
        # one queued behind it that every caller arriving meanwhile shares.
        self._numbering: asyncio.Task[None] | None = None
        self._numbering_next: asyncio.Task[None] | None = None
        # Set by ``end_streams``: the server stops, every stream (even a new one) ends.
        self._ending = False
        self._listener = Listener(
            database.url,
            CHANNEL,
            self._on_notify,
            catch_up=self._catch_up,
            interval=settings.sync_seconds,
        )
        # This process's own commits wake the pump at once, with no NOTIFY.
        database.announcer.listen(CHANNEL, lambda _payload: self._wake.set())
        self.evictions = 0
        self.passes = 0  # times the pump woke and read (tests)

    @property
    def started(self) -> bool:
        """True once the pump runs (the first stream started it)."""
        return self._pump_task is not None

    @property
    def streams(self) -> int:
        """Streams open in this process."""
        return len(self._subscribers)

    async def start(self) -> None:
        """Start listening and pumping, once; the first stream of the process calls it.
        The last position is read before any stream subscribes: an event after it is
        offered, one up to it is in the table for the stream's catch-up."""
        async with self._start_lock:
            if self._pump_task is not None:
                return
            # What committed before the process's first stream is history, read from the
            # table by a catch-up, not news: it is numbered before the last position is
            # read, or the pump would offer all of it to every new stream (and evict them).
            await self.number_committed()
            async with self._db.connection() as conn:
                self._last = await repo.last_position(conn)
            self._stopping.clear()
            # A context of its own: started from the first stream's request, the pump must
            # not run (and trace every query it makes) inside that request's trace for ever.
            self._pump_task = asyncio.create_task(
                self._pump(), name="event-hub", context=contextvars.Context()
            )
            await self._listener.start()
            self._wake.set()  # number what was written while nobody listened

    async def stop(self) -> None:
        """Stop listening and pumping; open streams end."""
        await self._listener.stop()
        if self._pump_task is not None:
            self._wake.set()
            await stop_loop(self._pump_task, self._stopping)
            self._pump_task = None
        for subscriber in list(self._subscribers):
            subscriber.evicted.set()
            subscriber.ready.set()
        # A numbering run in flight (a stream's, the scheduler's) finishes its batch before
        # the pool closes under it (cut off, it would roll back: nothing lost, work wasted).
        runs = [r for r in (self._numbering, self._numbering_next) if r is not None]
        if runs:
            await asyncio.wait(runs, timeout=NUMBERING_STOP_SECONDS)

    def end_streams(self) -> None:
        """The server is stopping: every open stream sends what is queued and ends, and a
        stream opened from now on ends after its catch-up. uvicorn waits for open
        connections before the app's shutdown runs (and ``stop`` with it): a stream left
        open would hold the process for up to ``max_seconds``."""
        self._ending = True
        for subscriber in list(self._subscribers):
            subscriber.finish()

    def open_stream(self, key: str) -> None:
        """Count a stream of ``key`` (429 past the per-key limit); ``close_stream`` ends it."""
        if self._open[key] >= self._settings.max_per_key:
            raise TooManyStreams(
                f"This key already holds {self._open[key]} open event streams here "
                f"(the limit is {self._settings.max_per_key}); close one first.",
                retry_after=max(1, round(self._settings.keepalive_seconds)),
            )
        self._open[key] += 1

    def close_stream(self, key: str) -> None:
        """A stream of ``key`` ended."""
        self._open[key] -= 1
        if self._open[key] <= 0:
            del self._open[key]

    def subscribe(self, wants: Callable[[StreamEvent], bool]) -> Subscriber:
        """A new stream's queue; events after the hub's last position are offered to it."""
        subscriber = Subscriber(wants, self._settings.queue_events)
        if self._ending:
            subscriber.finish()
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        """The stream ended: nothing more is queued for it."""
        self._subscribers.discard(subscriber)
        subscriber.queue.clear()

    def _on_notify(self, payload: str) -> None:
        # This process's own NOTIFY woke the pump already, at its commit.
        if self._db.announcer.from_elsewhere(payload):
            self._wake.set()

    async def _catch_up(self) -> None:
        self._wake.set()

    async def _pump(self) -> None:
        while not self._stopping.is_set():
            await self._wake.wait()
            self._wake.clear()
            if self._stopping.is_set():
                return
            self.passes += 1
            try:
                await self._advance()
            except Exception:
                # The database is away: the listener's next catch-up wakes the pump again.
                logger.warning("the event hub could not read new events", exc_info=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), timeout=1)
                self._wake.set()

    async def number_committed(self) -> None:
        """Give every event committed before the call its position (whichever replica's
        turn comes first numbers it; the others find nothing left).

        The process's callers share runs: a run already in flight may have passed the
        caller's commits, so a caller waits for the next run, which starts once the one in
        flight ends and serves everyone who came meanwhile. Each run holds one pool
        connection while it waits for the numbering's turn (an advisory lock), so a
        hundred streams opening at once hold one connection, not the whole pool. A caller
        that goes away (its client disconnected) does not cancel the run the others wait for."""
        run = self._numbering_next
        if run is None:
            run = asyncio.get_running_loop().create_task(
                self._number_after(self._numbering),
                name="event-numbering",
                # Shared by many requests: it runs in none of their traces.
                context=contextvars.Context(),
            )
            run.add_done_callback(self._numbering_done)
            self._numbering_next = run
        await asyncio.shield(run)

    def _numbering_done(self, run: asyncio.Task[None]) -> None:
        """A run ended: it is no longer one to join or wait for (a run cancelled before it
        started must not be joined by every later caller), and its failure, which reaches
        its callers, is retrieved here too (no 'exception never retrieved' when they all
        went away)."""
        if self._numbering_next is run:
            self._numbering_next = None
        if self._numbering is run:
            self._numbering = None
        if not run.cancelled():
            run.exception()

    async def _number_after(self, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # its outcome is its own callers'
        self._numbering = self._numbering_next
        self._numbering_next = None
        batch = self._settings.batch
        # Each batch resumes where the one before it ended, so a run reads the entries of
        # the events it numbered once (revision 0036); what commits behind that key during
        # the run is numbered by the next run, which the commit's announcement starts.
        after: repo.NumberingKey | None = None
        while True:
            async with self._db.transaction() as conn:
                numbered, after = await repo.sequence_events(conn, batch, after)
            if numbered < batch:
                return

    async def _advance(self) -> None:
        """Number what committed since, then offer every numbered event after the last."""
        batch = self._settings.batch
        await self.number_committed()
        while True:
            async with self._db.connection() as conn:
                events = await repo.events_after(conn, self._last, batch)
            for event in events:
                self._offer(event)
                self._last = event.position
            if len(events) < batch:
                return

    def _offer(self, event: StreamEvent) -> None:
        for subscriber in list(self._subscribers):
            if not subscriber.offer(event):
                self._subscribers.discard(subscriber)
                self.evictions += 1
                logger.info("an event stream read too slowly and was disconnected")
