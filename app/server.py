"""The HTTP server: uvicorn with httptools, configured in one place, with nginx's limits on
what a client may send before it is authenticated.

uvicorn (0.54) with httptools puts no bound on a request head: llhttp counts nothing, and
httptools holds a header line in memory until its end arrives. One connection sending
100,000 header lines (about 21 MB) cost the process about 30 MB while it was open, five
about 170 MB, and nothing closed a connection that sent its head slowly, or nothing at all.
nginx's answer is the model (its defaults in brackets):

- **Header fields**: at most ``max_header_fields`` (100, Apache's ``LimitRequestFields``;
  nginx bounds only their bytes), else 431 Request Header Fields Too Large.
- **Head size**: the request line and header fields together at most ``max_header_bytes``
  (16 KiB, what uvicorn's h11 parser and Node.js allow; nginx's
  ``large_client_header_buffers 4 8k`` allow up to 32 KiB), else 431, or 414 URI Too Long
  when the request target alone is over it. The head is counted as it arrives, so a
  refusal comes after at most the limit plus one read from the socket (at most 256 KiB),
  never after the whole flood.
- **Header timeout**: the whole head within ``header_timeout`` seconds of the connection
  being accepted, or of the first byte of a later request on a kept-alive connection
  (``client_header_timeout``, 60 s; 10 s here), else 408 and close (a quiet close when
  not a byte of a request came).

uvicorn's own settings do the rest: ``timeout_keep_alive`` closes a kept-alive connection
idle between requests (``keepalive_timeout``, 75 s; uvicorn's 5 s here), and
``limit_concurrency`` answers 503 and closes once that many connections are open or
requests in progress (``worker_connections``, 512 by default; 1000 here).

The limits subclass uvicorn's ``HttpToolsProtocol`` (its parser callbacks, its refusal of a
malformed request, its per-request ``cycle``), so uvicorn is pinned to its minor version in
pyproject.toml; tests/unit/test_server.py and tests/integration/test_header_limits.py fail
if an upgrade changes what this relies on.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
import uvicorn
from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.errors import PROBLEM_JSON, PROBLEM_TYPE_PREFIX

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from app.settings import ServerSettings

logger = logging.getLogger("switchboard.server")


@dataclass(frozen=True)
class HeadLimits:
    """What a request head may be: how many header fields, how many bytes, how long."""

    max_fields: int
    max_bytes: int
    timeout: float


# Status -> reason phrase (RFC 9110), problem title and slug (as app/errors.py writes them).
_REFUSALS = {
    400: ("Bad Request", "Bad request", "bad-request"),
    408: ("Request Timeout", "Request timeout", "request-timeout"),
    414: ("URI Too Long", "URI too long", "uri-too-long"),
    431: (
        "Request Header Fields Too Large",
        "Request header fields too large",
        "request-header-fields-too-large",
    ),
    503: ("Service Unavailable", "Service unavailable", "service-unavailable"),
}


def problem_body(status: int, detail: str) -> bytes:
    """The problem+json document of a refusal the server gives before the app runs."""
    _, title, slug = _REFUSALS[status]
    return orjson.dumps(
        {"type": PROBLEM_TYPE_PREFIX + slug, "title": title, "status": status, "detail": detail}
    )


def refusal(status: int, detail: str) -> bytes:
    """A whole problem+json answer that closes the connection."""
    reason = _REFUSALS[status][0]
    body = problem_body(status, detail)
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: {PROBLEM_JSON}\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


class _HeadRefused(Exception):
    """Raised from a parser callback: stops httptools mid-head (uvicorn then calls
    ``send_400_response``, which sends this refusal instead)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a bounded request head and a header timeout."""

    limits: ClassVar[HeadLimits]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Between the end of one request (or the connection's start) and the end of the next
        # one's head: every byte that arrives then is part of a head.
        self._awaiting_head = True
        self._head_bytes = 0  # bytes of whole reads that came while awaiting a head
        self._head_begun = False  # the parser saw the head's first byte
        self._field_count = 0  # what the parser reported of the head: fields, and bytes
        self._field_bytes = 0  # of the request target and the fields
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused: _HeadRefused | None = None

    # The connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """Start the header clock: a connection that sends nothing is closed too."""
        super().connection_made(transport)
        self._start_head_clock()

    def connection_lost(self, exc: Exception | None) -> None:
        """Stop the header clock."""
        self._stop_head_clock()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Count what arrives while a head is awaited, then parse; refuse a head over the
        size limit as soon as a read leaves it over, even mid-line."""
        if self._refused is not None:
            return  # the answer is out and the connection closing: parse nothing more
        if self._awaiting_head:
            # A head that began inside an earlier read is counted from the next whole read
            # (the parser's own count catches it within that read): no byte is counted that
            # does not belong to the head, so no head under the limit is refused.
            self._head_bytes += len(data)
            self._start_head_clock()
        super().data_received(data)
        if (
            self._awaiting_head
            and self._head_bytes > self.limits.max_bytes
            and self._refused is None
            and not self.transport.is_closing()
        ):
            self._refused = _HeadRefused(*self._too_large())
            self._send_refusal()

    def send_400_response(self, msg: str) -> None:
        """The answer to a request that is not HTTP (uvicorn's text/plain 400 made a
        problem+json one), or the refusal that stopped the parser."""
        if self._refused is None:
            self._refused = _HeadRefused(400, f"The request is not valid HTTP/1.1: {msg}")
        self._send_refusal()

    # httptools callbacks

    def on_message_begin(self) -> None:
        """A new head: its own counts."""
        self._head_begun = True
        self._field_count = self._field_bytes = 0
        self._start_head_clock()  # a head pipelined behind a request starts it here
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        """Count the request target as it comes (httptools passes it in pieces)."""
        self._field_bytes += len(url)
        if self._field_bytes > self.limits.max_bytes:
            raise self._refuse(
                414, f"The request target is longer than {self.limits.max_bytes} bytes."
            )
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count one header field (also a chunked body's trailer fields)."""
        self._field_count += 1
        self._field_bytes += len(name) + len(value) + 4  # ": " and CRLF
        if self._field_count > self.limits.max_fields:
            raise self._refuse(
                431, f"The request has more than {self.limits.max_fields} header fields."
            )
        if self._field_bytes > self.limits.max_bytes:
            raise self._refuse(*self._too_large())
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is whole: stop its clock and its byte count."""
        self._stop_head_clock()
        self._awaiting_head = self._head_begun = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The request is whole: whatever comes next is the next head."""
        self._awaiting_head = True
        self._head_bytes = 0
        super().on_message_complete()

    # Refusals

    def _too_large(self) -> tuple[int, str]:
        return 431, f"The request head is longer than {self.limits.max_bytes} bytes."

    def _refuse(self, status: int, detail: str) -> _HeadRefused:
        self._refused = _HeadRefused(status, detail)
        return self._refused

    def _send_refusal(self) -> None:
        """Answer the refusal and close, without reading the rest. With an answer to an
        earlier request still being written (a pipelined head, a chunked body's trailers),
        close without one: nothing may be written into the middle of that answer."""
        refused = self._refused
        assert refused is not None
        self._stop_head_clock()
        logger.info("refused a request head from %s: %s", self._peer(), refused.detail)
        if self.transport.is_closing():
            return
        if not self._answering():
            self.transport.write(refusal(refused.status, refused.detail))
        self.transport.close()

    # The header clock

    def _start_head_clock(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.limits.timeout, self._head_timed_out)

    def _stop_head_clock(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        """The head did not come whole in time: 408 if some of it came, and close."""
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self._answering():
            # A pipelined head is late while the answer before it is still being written:
            # finish that answer, then close.
            self.cycle.keep_alive = False
            return
        if self._head_begun:
            detail = f"The request head did not arrive within {self.limits.timeout:g} s."
            logger.info("closed a slow request head from %s: %s", self._peer(), detail)
            self.transport.write(refusal(408, detail))
        self.transport.close()

    def _answering(self) -> bool:
        """An answer to an earlier request on this connection is not finished yet."""
        return self.cycle is not None and not self.cycle.response_complete

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "?"


async def _overloaded(scope: Any, receive: Any, send: Any) -> None:
    """What a request past ``limit_concurrency`` gets: 503 as problem+json, like every other
    refusal (uvicorn's own is text/plain), with Retry-After."""
    body = problem_body(503, "Too many connections are open; retry in a moment.")
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", PROBLEM_JSON.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


# uvicorn answers a request past limit_concurrency with this module-level ASGI app and has no
# setting for it; uvicorn is pinned (see the module doc) and test_header_limits checks it.
httptools_impl.service_unavailable = _overloaded  # type: ignore[attr-defined]


def protocol_class(limits: HeadLimits) -> type[LimitedHttpToolsProtocol]:
    """The protocol class uvicorn instantiates per connection, carrying ``limits``."""
    configured = limits

    class Protocol(LimitedHttpToolsProtocol):
        limits: ClassVar[HeadLimits] = configured

    return Protocol


def uvicorn_config(app: Any, server: ServerSettings, *, host: str, port: int) -> uvicorn.Config:
    """How Switchboard is served, for ``switchboard serve`` and the benchmarks alike (by
    one process, or by each of ``--workers N``: app/supervisor.py): uvloop, httptools with
    the head limits, no WebSocket (no route needs one, and an upgraded connection would
    leave these limits for the websockets library's).

    uvicorn's logging is left to app/logs.py (no config of its own, its loggers go to the
    one handler) and its access log is off: the app logs each request itself, structured
    and with the trace id (app/tracing.py)."""
    limits = HeadLimits(server.max_header_fields, server.max_header_bytes, server.header_timeout)
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol_class(limits),
        ws="none",
        timeout_keep_alive=server.keep_alive_timeout,
        limit_concurrency=server.max_connections,
        log_config=None,
        log_level=None,
        access_log=False,
        # Forwarded headers count only from the proxies named in SWITCHBOARD_TRUSTED_PROXIES.
        proxy_headers=bool(server.trusted_proxies),
        forwarded_allow_ips=[str(network) for network in server.trusted_proxies] or None,
        server_header=False,
    )


class PortUnavailable(Exception):
    """The address cannot be listened on (in use, not this host's, not permitted)."""


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` but not yet listening: taking the port first
    makes a port in use fail at once, before the database or migrations are touched,
    while a client that connects early is refused rather than left waiting; uvicorn
    starts listening on it once the app has started."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        reason = exc.strerror or str(exc)
        raise PortUnavailable(f"cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class _Server(uvicorn.Server):
    """uvicorn's server, saying where it listens once it does (never before), and ending
    the app's event streams when it stops."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """End the open event streams first: uvicorn waits for every open connection
        before the app's own shutdown runs, and a stream never ends by itself."""
        state = getattr(self.config.app, "state", None)
        hub = state.get("event_hub") if state is not None else None
        if hub is not None:
            hub.end_streams()
        await super().shutdown(sockets)

    on_listening: Callable[[], None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and sockets:
            url = _url(sockets[0])
            logger.info(
                "Switchboard listening on %s (OpenAPI: %s/schema)", url, url, extra={"url": url}
            )
            if self.on_listening is not None:
                self.on_listening()


def run(
    config: uvicorn.Config,
    sock: socket.socket,
    on_listening: Callable[[], None] | None = None,
) -> bool:
    """Serve on ``sock`` (from ``bind``) until stopped (SIGINT, SIGTERM); false when the
    server never started. ``on_listening`` is called once it listens (a worker tells its
    supervisor, app/supervisor.py)."""
    server = _Server(config)
    server.on_listening = on_listening
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn raises the signal again on exit
            server.run(sockets=[sock])
    finally:
        sock.close()
    return server.started
