"""A real HTTP agent on 127.0.0.1 for tests: it answers, fails, hangs, talks garbage or
hangs up, as the test tells it. Built on asyncio streams so it runs on the test's loop."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Behaviour = Literal["ok", "fail", "hang", "garbage", "close"]


@dataclass
class AgentServer:
    """One fake agent. Change ``behaviour`` and ``reply`` at any time."""

    behaviour: Behaviour = "ok"
    reply: dict[str, Any] = field(
        default_factory=lambda: {
            "success": True,
            "output_data": {"response": "Hello from the agent"},
        }
    )
    status: int = 200
    # With behaviour "ok": these bytes instead of ``reply`` (JSON orjson cannot write).
    raw_reply: bytes | None = None
    # With behaviour "close" or "fail": answer normally from this request number on.
    heal_after: int | None = None
    # Awaited before each answer: lets a test change things while the agent "works".
    before_reply: Callable[[], Awaitable[None]] | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    # Raw bodies and lower-cased headers of every request, for signature checks.
    bodies: list[bytes] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    # Connections accepted, whether or not a request came over them.
    connections: int = 0
    _server: asyncio.Server | None = None
    _scheme: str = "http"
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set)

    @property
    def url(self) -> str:
        """Where the agent listens."""
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{self._scheme}://{host}:{port}/agent"

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1].split("/", 1)[0])

    async def start(self, tls: ssl.SSLContext | None = None) -> AgentServer:
        """Listen on an ephemeral port of 127.0.0.1 (over TLS with ``tls``)."""
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0, ssl=tls)
        self._scheme = "https" if tls else "http"
        return self

    async def stop(self) -> None:
        """Stop listening and drop open connections (hanging handlers included)."""
        if self._server is not None:
            self._stopping.set()  # hanging handlers return instead of being cancelled
            self._server.close()
            for writer in list(self._writers):
                writer.close()  # idle keep-alive connections end their read loop
            if self._tasks:
                await asyncio.wait(list(self._tasks), timeout=5)
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        self.connections += 1
        try:
            await self._serve(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self._tasks.discard(task)
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            headers = {}
            for line in head.decode("latin-1").split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.strip():
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            body = await reader.readexactly(length) if length else b""
            self.headers.append(headers)
            self.bodies.append(body)
            self.requests.append(orjson.loads(body) if body else {})
            if self.heal_after is not None and len(self.requests) > self.heal_after:
                self.behaviour = "ok"
            if self.before_reply is not None:
                await self.before_reply()
            if self.behaviour == "hang":
                await self._stopping.wait()
                return
            if self.behaviour == "close":
                return
            if self.behaviour == "fail":
                payload, status = b'{"error": "boom"}', 500
            elif self.behaviour == "garbage":
                payload, status = b"<html>not json at all", 200
            elif self.raw_reply is not None:
                payload, status = self.raw_reply, self.status
            else:
                payload, status = orjson.dumps(self.reply), self.status
            writer.write(
                f"HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n"
                f"content-length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
