"""Event streams: the outbox as Server-Sent Events, for one session or (admin) for all.

A stream subscribes to the process's hub first, then catches up from the table (every
event after the client's cursor, page by page), then sends what the hub queued, skipping
what the catch-up already sent: the seam between the two neither loses nor repeats an
event. Each event's ``id`` is its position, so a client that reconnects with
``Last-Event-ID`` (or ``?after=``) resumes exactly after the last event it got. Without
a cursor a stream starts with the events after the newest one when it opened.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any
from uuid import UUID

from anyio import create_task_group
from litestar.response import Stream
from litestar.response.streaming import ASGIStreamingResponse

from app.db.pool import Connection, Database
from app.errors import BadRequest
from app.events import repository as repo
from app.events.frames import KEEP_ALIVE, retry_frame
from app.events.hub import EventHub, Subscriber
from app.events.schemas import EVENT_TYPES, StreamEvent
from app.sessions.service import SessionService
from app.settings import StreamSettings

CatchUp = Callable[[Connection, int, int], Awaitable[list[StreamEvent]]]

# A cursor is a position: a bigint, written in decimal.
_MAX_CURSOR_DIGITS = 19


def parse_cursor(last_event_id: str | None, after: str | None) -> int | None:
    """The position to resume after: ``Last-Event-ID`` (what EventSource sends when it
    reconnects) over ``?after=``; None for neither. 400 for anything but a position."""
    for name, value in (("Last-Event-ID", last_event_id), ("after", after)):
        if value is None:
            continue
        text = value.strip()
        if not text.isascii() or not text.isdigit() or len(text) > _MAX_CURSOR_DIGITS:
            raise BadRequest(
                f"{name} must be the id of an event this service sent (a whole number); "
                f"got {value[:40]!r}."
            )
        position = int(text)
        if position >= 2**63:
            raise BadRequest(f"{name} is past any event id.")
        return position
    return None


def parse_types(types: str | None) -> frozenset[str] | None:
    """``?types=a,b`` as a set of known event types (400 naming any unknown one)."""
    if types is None:
        return None
    wanted = frozenset(t.strip() for t in types.split(",") if t.strip())
    unknown = sorted(wanted - set(EVENT_TYPES))
    if not wanted or unknown:
        raise BadRequest(
            f"types must list event types separated by commas; unknown: {', '.join(unknown)}"
            if unknown
            else "types must name at least one event type.",
            known=list(EVENT_TYPES),
        )
    return wanted


class EventStream:
    """One open stream: its cursor, its place in the hub, its frames."""

    def __init__(
        self,
        hub: EventHub,
        database: Database,
        settings: StreamSettings,
        key: str,
        subscriber: Subscriber,
        catch_up: CatchUp,
        after: int,
    ) -> None:
        self._hub = hub
        self._db = database
        self._settings = settings
        self._key = key
        self.subscriber = subscriber
        self._catch_up = catch_up
        self._after = after
        self._closed = False
        self.frames_iterator = self.frames()

    def close(self) -> None:
        """Leave the hub and free the key's slot (once; safe to call again)."""
        if self._closed:
            return
        self._closed = True
        self._hub.unsubscribe(self.subscriber)
        self._hub.close_stream(self._key)

    async def frames(self) -> AsyncIterator[bytes]:
        """The retry field, the catch-up, then live events and keep-alive comments."""
        settings = self._settings
        queue = self.subscriber.queue
        yield retry_frame(settings.retry_ms)
        last = self._after
        while True:
            async with self._db.connection() as conn:
                page = await self._catch_up(conn, last, settings.batch)
            for event in page:
                yield event.frame
                last = event.position
            if len(page) < settings.batch:
                break
        loop = asyncio.get_running_loop()
        ends_at = loop.time() + settings.max_seconds if settings.max_seconds else None
        ready = self.subscriber.ready
        while not self.subscriber.evicted.is_set():
            if queue:
                event = queue.popleft()
                if event.position > last:  # the catch-up may have sent it
                    yield event.frame
                    last = event.position
                continue
            if self.subscriber.finished:
                return  # the server stops: the client resumes elsewhere with Last-Event-ID
            ready.clear()
            wait = settings.keepalive_seconds
            if ends_at is not None:
                wait = min(wait, ends_at - loop.time())
                if wait <= 0:
                    return
            try:
                await asyncio.wait_for(ready.wait(), timeout=wait)
            except TimeoutError:
                if ends_at is None or loop.time() < ends_at:
                    yield KEEP_ALIVE


class EventStreams:
    """Opens streams: who may, from where, with which events."""

    def __init__(
        self,
        database: Database,
        hub: EventHub,
        sessions: SessionService,
        settings: StreamSettings,
    ) -> None:
        self._db = database
        self._hub = hub
        self._sessions = sessions
        self._settings = settings

    async def session_stream(self, session_id: UUID, key: str, after: int | None) -> EventStream:
        """The events of one session (404 for a session that is not live)."""
        await self._sessions.get_session(session_id)
        wanted = str(session_id)
        return await self._open(
            key,
            lambda event: event.session_id == wanted,
            partial(_session_catch_up, session_id),
            after,
        )

    async def stream(
        self, key: str, types: frozenset[str] | None, after: int | None
    ) -> EventStream:
        """Every event, or those of ``types``."""
        if types is None:
            return await self._open(key, lambda _event: True, _all_catch_up, after)
        type_list = sorted(types)
        return await self._open(
            key,
            lambda event: event.event_type in types,
            partial(_typed_catch_up, type_list),
            after,
        )

    async def _open(
        self,
        key: str,
        wants: Callable[[StreamEvent], bool],
        catch_up: CatchUp,
        after: int | None,
    ) -> EventStream:
        await self._hub.start()
        self._hub.open_stream(key)  # 429 past the key's limit
        subscriber = self._hub.subscribe(wants)
        try:
            if after is None:
                # "From now": every event committed before the stream opened is numbered
                # first, so the newest position covers it.
                await self._hub.number_committed()
            # Read after subscribing: what is numbered later reaches the queue.
            async with self._db.connection() as conn:
                if after is None:
                    after = await repo.last_position(conn)
                elif after > await repo.position_bound(conn):
                    raise BadRequest("Last-Event-ID is past the newest event id.")
        except BaseException:
            self._hub.unsubscribe(subscriber)
            self._hub.close_stream(key)
            raise
        return EventStream(self._hub, self._db, self._settings, key, subscriber, catch_up, after)


async def _all_catch_up(conn: Connection, after: int, limit: int) -> list[StreamEvent]:
    return await repo.events_after(conn, after, limit)


async def _typed_catch_up(
    types: list[str], conn: Connection, after: int, limit: int
) -> list[StreamEvent]:
    return await repo.events_of_types_after(conn, types, after, limit)


async def _session_catch_up(
    session_id: UUID, conn: Connection, after: int, limit: int
) -> list[StreamEvent]:
    return await repo.session_events_after(conn, session_id, after, limit)


class _EvictableStreamingResponse(ASGIStreamingResponse):
    """Litestar's streaming response, ended also when the hub evicts the stream: a client
    that stopped reading leaves ``send`` waiting on the socket for ever, so the eviction
    cancels it (the server then closes the connection). The stream leaves the hub however
    the response ends."""

    def __init__(self, *, stream: EventStream, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.event_stream = stream

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.event_stream.close()

    async def send_body(self, send: Any, receive: Any) -> None:
        """The frames until they end, the client disconnects or the stream is evicted."""
        evicted = self.event_stream.subscriber.evicted
        async with create_task_group() as task_group:
            scope = task_group.cancel_scope

            async def end_when_evicted() -> None:
                await evicted.wait()
                scope.cancel()

            async def stream_then_stop() -> None:
                await self._stream(send)
                scope.cancel()

            task_group.start_soon(end_when_evicted)
            task_group.start_soon(stream_then_stop)
            await self._listen_for_disconnect(cancel_scope=scope, receive=receive)


class EventStreamResponse(Stream):
    """``text/event-stream`` of an :class:`EventStream`, uncached and unbuffered."""

    def __init__(self, stream: EventStream) -> None:
        super().__init__(
            stream.frames_iterator,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
        self.event_stream = stream

    def to_asgi_response(
        self,
        app: Any,
        request: Any,
        *,
        background: Any = None,
        cookies: Any = None,
        encoded_headers: Any = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: Any = None,
        status_code: int | None = None,
        type_encoders: Any = None,
    ) -> ASGIStreamingResponse:
        """What ``Stream.to_asgi_response`` builds, made evictable."""
        merged = {**headers, **self.headers} if headers is not None else self.headers
        return _EvictableStreamingResponse(
            stream=self.event_stream,
            background=self.background or background,
            content_length=0,
            cookies=itertools.chain(self.cookies, cookies or ()),
            encoded_headers=encoded_headers,
            encoding=self.encoding,
            headers=merged,
            is_head_response=is_head_response,
            iterator=self.event_stream.frames_iterator,
            media_type="text/event-stream",
            status_code=self.status_code or status_code,
        )
