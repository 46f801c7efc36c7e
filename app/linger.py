"""Lingering close: an answer given before the request body was read still reaches a client
that writes its whole body before it reads.

Switchboard answers some requests without reading their body: 413 when Content-Length is over
the limit, 401 (the key is checked first), 415, 404 for an unknown path. If the server then
closes the connection, the rest of the body is still unread in the kernel, and closing a
socket with unread data sends a TCP reset: a client still writing (urllib, requests, httpx
write everything first) gets BrokenPipeError or "connection reset" instead of the answer.
uvicorn closes right after the answer when the connection is not kept alive (the client sent
``Connection: close``, as urllib always does, or spoke HTTP/1.0); on a kept-alive connection
it discards the rest of the body itself, however large and however slow.

nginx's lingering close is the model: answer first, keep reading and discarding the rest for a
bounded number of bytes and time, then close. Here the answer's last message is held back
until the rest of the body has been discarded, so the server (uvicorn) cannot close earlier;
chunks are dropped as they arrive, and uvicorn stops reading from the socket while one is
waiting, so memory does not grow with the body.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, cast

from litestar.enums import ScopeType

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

_CONNECTION_CLOSE = (b"connection", b"close")


async def discard_body(receive: Receive, max_bytes: int, seconds: float) -> bool:
    """Read and drop the rest of a request body, at most ``max_bytes`` for at most
    ``seconds``; true when it ended (or the client left) within those bounds."""
    discarded = 0
    try:
        async with asyncio.timeout(seconds):
            while discarded < max_bytes:
                message = await receive()
                if message["type"] != "http.request":
                    return True  # http.disconnect: nothing more will come
                discarded += len(message.get("body", b""))
                if not message.get("more_body", False):
                    return True
    except TimeoutError:
        pass
    return False


class LingeringClose:
    """ASGI middleware: after an answer given before the body was read, discard the rest of
    the body (bounded) before the answer is finished, so the client is still being read
    while it writes and the close that follows does not reset the answer away."""

    def __init__(self, app: ASGIApp, *, max_bytes: int, seconds: float) -> None:
        self.app = app
        self.max_bytes = max_bytes if seconds > 0 else 0
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request through; linger only if it was answered with body unread."""
        exchange = _Exchange.of(scope, receive, send, self.max_bytes)
        if exchange is None:
            await self.app(scope, receive, send)
            return
        await self.app(scope, exchange.receive, exchange.send)
        if exchange.holding:
            await discard_body(receive, self.max_bytes, self.seconds)
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _Exchange:
    """One request with a body: what the app has read of it, and how its answer ends."""

    __slots__ = (
        "_receive",
        "_send",
        "asked",
        "body_read",
        "expects_continue",
        "holding",
        "length",
        "linger",
        "max_bytes",
        "received",
    )

    def __init__(
        self,
        receive: Receive,
        send: Send,
        length: int | None,
        expects_continue: bool,
        max_bytes: int,
    ) -> None:
        self._receive = receive
        self._send = send
        self.length = length  # Content-Length; None when chunked
        self.expects_continue = expects_continue
        self.max_bytes = max_bytes
        self.received = 0
        self.asked = False  # the app asked for the body at least once
        self.body_read = False  # the app saw its end, or the client left
        self.linger = False  # answered early: discard the rest before finishing
        self.holding = False  # the answer's last message is still to be sent

    @classmethod
    def of(cls, scope: Scope, receive: Receive, send: Send, max_bytes: int) -> _Exchange | None:
        """An exchange to watch, or None for a request that has no body (nothing to linger on)."""
        if scope["type"] != ScopeType.HTTP:
            return None
        length: int | None = 0
        chunked = expects_continue = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = None  # the server rejects it before the app; be safe anyway
            elif name == b"transfer-encoding":
                chunked = True
            elif name == b"expect":
                expects_continue = value.lower() == b"100-continue"
        if chunked:
            length = None
        elif length == 0:
            return None
        return cls(receive, send, length, expects_continue, max_bytes)

    async def receive(self) -> ReceiveMessage:
        """The app reads the body: count what it got and whether it reached the end."""
        self.asked = True
        message = await self._receive()
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.body_read = not message.get("more_body", False)
        else:
            self.body_read = True
        return message

    async def send(self, message: Message) -> None:
        """Mark an early answer on its start; hold back its last message."""
        if message["type"] == "http.response.start" and not self.body_read:
            message = self._early_answer(message)
        elif (
            message["type"] == "http.response.body"
            and self.linger
            and not message.get("more_body", False)
        ):
            message = cast("Message", {**message, "more_body": True})
            self.holding = True
        await self._send(message)

    def _early_answer(self, start: Message) -> Message:
        """Decide at the answer's start: linger or not, and whether the connection can stay
        open. It can when the rest of the body fits the byte bound, so it will be read to
        its end (by this lingering, or by the server if the time bound cuts in first);
        otherwise the answer says ``Connection: close``."""
        # A client that sent ``Expect: 100-continue`` and was never told to continue sends
        # no body (curl does this for large bodies); closing after the answer loses nothing.
        self.linger = self.max_bytes > 0 and not (self.expects_continue and not self.asked)
        fits = self.length is not None and self.length - self.received <= self.max_bytes
        if self.linger and fits:
            return start
        fields = cast("dict[str, Any]", start)
        headers = [(k, v) for k, v in fields.get("headers", ()) if k.lower() != b"connection"]
        headers.append(_CONNECTION_CLOSE)
        return cast("Message", {**fields, "headers": headers})
