"""Oversized and unauthenticated bodies get their answer, not a connection reset: a real
server process (uvicorn, as served) and a raw socket client that writes its whole body before
it reads, as urllib, requests and httpx do.

Most cases send ``Connection: close`` as urllib always does: that is when uvicorn closes right
after an early answer, and closing with the body unread sent a reset before the lingering close.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus

import pytest

from bench.serve import memory_kib, spawn
from tests import dbutil
from tests.conftest import ADMIN_KEY

MIB = 1024 * 1024
LINGER_MAX_BYTES = 64 * MIB
LINGER_SECONDS = 2


@dataclass
class Server:
    port: int
    pid: int
    baseline_peak_kib: int  # VmHWM after start-up and one early answer of each kind


def peak_rss_kib(pid: int) -> int:
    """The process's peak resident set size (VmHWM), in KiB."""
    return memory_kib(pid, "VmHWM")


@pytest.fixture(scope="module")
def server(server_url: str, template_database: str) -> Iterator[Server]:
    """One server process for the module, on a database of its own."""
    name = dbutil.unique_name("sbtest_linger")
    asyncio.run(dbutil.create_database(server_url, name, template=template_database))
    process, port = spawn(
        "switchboard",
        {
            "SWITCHBOARD_DATABASE_URL": dbutil.with_database(server_url, name),
            "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
            "SWITCHBOARD_MAX_BODY_BYTES": str(MIB),
            "SWITCHBOARD_LINGER_MAX_BYTES": str(LINGER_MAX_BYTES),
            "SWITCHBOARD_LINGER_SECONDS": str(LINGER_SECONDS),
        },
    )
    try:
        for key in (ADMIN_KEY, None):  # warm the early-answer paths before the baseline
            assert post(port, 2 * MIB, key=key).status in (401, 413)
        yield Server(port, process.pid, peak_rss_kib(process.pid))
    finally:
        process.terminate()
        process.wait(timeout=30)
        asyncio.run(dbutil.drop_database(server_url, name))


@dataclass
class Reply:
    sent: int  # body bytes the client managed to write
    send_error: OSError | None
    raw: bytes  # everything read back
    ended: str  # "eof" (an orderly close), "reset", "timeout"

    @property
    def status(self) -> int:
        return int(self.raw.split(b" ", 2)[1]) if self.raw else 0

    @property
    def headers(self) -> dict[str, str]:
        head = self.raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")[1:]
        return {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in head)}

    @property
    def problem(self) -> dict[str, object]:
        assert self.headers["content-type"].startswith("application/problem+json"), self.raw
        body = self.raw.split(b"\r\n\r\n", 1)[1][: int(self.headers["content-length"])]
        problem: dict[str, object] = json.loads(body)
        assert problem["status"] == self.status
        return problem


def post(
    port: int,
    size: int,
    *,
    key: str | None = ADMIN_KEY,
    path: str = "/v1/memories",
    chunked: bool = False,
    close: bool = True,
    expect_continue: bool = False,
    stall_after: int | None = None,
    then: bytes = b"",
) -> Reply:
    """Write headers and the whole body (``size`` bytes), only then read until the server
    closes (or 20 s pass). ``stall_after``: stop writing after that many bytes and read;
    ``then``: a second request written on the same connection after the first answer."""
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    head += [f"X-API-Key: {key}"] if key else []
    head += ["Transfer-Encoding: chunked"] if chunked else [f"Content-Length: {size}"]
    head += ["Connection: close"] if close else []
    head += ["Expect: 100-continue"] if expect_continue else []
    piece = b"x" * (256 * 1024)
    sent, send_error = 0, None
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
        limit = size if stall_after is None else stall_after
        try:
            while not expect_continue and sent < limit:
                data = piece[: min(len(piece), limit - sent)]
                sock.sendall(b"%x\r\n%b\r\n" % (len(data), data) if chunked else data)
                sent += len(data)
            if chunked and stall_after is None:
                sock.sendall(b"0\r\n\r\n")
        except OSError as error:  # BrokenPipeError, ConnectionResetError
            send_error = error
        raw, ended = b"", "eof"
        try:
            if then:
                raw = sock.recv(65536)
                sock.sendall(then)
            while chunk := sock.recv(65536):
                raw += chunk
        except ConnectionResetError:
            ended = "reset"
        except TimeoutError:
            ended = "timeout"
    return Reply(sent, send_error, raw, ended)


async def exchange(server: Server, size: int, **options: object) -> Reply:
    return await asyncio.to_thread(post, server.port, size, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [MIB + 1, 8 * MIB, 64 * MIB], ids=["1MiB+1", "8MiB", "64MiB"])
async def test_a_client_writing_the_whole_body_first_reads_the_413(
    server: Server, size: int
) -> None:
    reply = await exchange(server, size)
    assert reply.send_error is None
    assert reply.sent == size
    assert reply.status == 413
    assert reply.problem["title"] == "Payload too large"
    assert reply.ended == "eof"  # the server read it all, so its close is orderly


async def test_a_chunked_body_over_the_limit_reads_the_413(server: Server) -> None:
    reply = await exchange(server, 8 * MIB, chunked=True)
    assert (reply.send_error, reply.sent) == (None, 8 * MIB)
    assert reply.status == 413
    assert reply.problem["status"] == 413
    assert reply.headers["connection"] == "close"
    assert reply.ended == "eof"


async def test_an_unauthenticated_big_body_reads_the_401(server: Server) -> None:
    # The key is checked before the body is read: an early answer like the 413.
    reply = await exchange(server, 8 * MIB, key=None)
    assert (reply.send_error, reply.sent) == (None, 8 * MIB)
    assert reply.status == 401
    assert reply.problem["title"] == "Unauthorized"
    assert reply.ended == "eof"


async def test_an_unknown_path_with_a_big_body_reads_the_404(server: Server) -> None:
    # Answered by routing, outside the Litestar middleware stack.
    reply = await exchange(server, 8 * MIB, path="/v1/no-such-route")
    assert (reply.send_error, reply.sent) == (None, 8 * MIB)
    assert reply.status == 404
    assert reply.problem["status"] == 404
    assert reply.ended == "eof"


async def test_a_kept_alive_connection_serves_the_next_request_after_a_413(
    server: Server,
) -> None:
    health = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    reply = await exchange(server, 8 * MIB, close=False, then=health)
    assert reply.status == 413
    assert "connection" not in reply.headers  # the body fits the bound: read to its end
    status_lines = re.findall(rb"HTTP/1\.1 \d{3} [^\r]*", reply.raw)
    # uvicorn takes the reason phrase from http.HTTPStatus: "Request Entity Too Large" before
    # Python 3.13, RFC 9110's "Content Too Large" since.
    too_large = f"HTTP/1.1 413 {HTTPStatus(413).phrase}".encode()
    assert status_lines == [too_large, b"HTTP/1.1 200 OK"]
    assert reply.ended == "eof"


async def test_a_body_past_the_bound_is_cut_after_the_413_was_sent(server: Server) -> None:
    size = LINGER_MAX_BYTES + 32 * MIB
    reply = await exchange(server, size)
    assert reply.headers["connection"] == "close"
    # The server stopped reading after the bound (what the kernels buffer comes on top), so
    # closing with data unread resets the connection and the client's write fails ...
    assert isinstance(reply.send_error, BrokenPipeError | ConnectionResetError)
    assert LINGER_MAX_BYTES <= reply.sent < size
    # ... but the answer went out first: it is already in the client's socket, and Linux
    # hands received data to the reader before the reset. (A client that reads only when
    # its write succeeds, like urllib, still sees the error: that is the bound.)
    assert reply.status == 413
    assert reply.problem["title"] == "Payload too large"


async def test_a_stalled_body_is_closed_after_the_time_bound(server: Server) -> None:
    # Chunked, so no promise of the connection: 2 MiB and then silence.
    reply = await exchange(server, 8 * MIB, chunked=True, stall_after=2 * MIB)
    assert reply.status == 413
    assert reply.headers["connection"] == "close"
    assert reply.ended == "eof"  # after LINGER_SECONDS, well before the client's 20 s


async def test_expect_100_continue_gets_the_answer_instead_of_continue(server: Server) -> None:
    # curl's way with large bodies: headers, then wait. The answer comes at once and the
    # connection closes without waiting for a body that will not be sent.
    reply = await exchange(server, 8 * MIB, expect_continue=True)
    assert reply.raw.startswith(b"HTTP/1.1 413 ")
    assert reply.headers["connection"] == "close"
    assert reply.ended == "eof"


async def test_memory_does_not_grow_with_the_discarded_bodies(server: Server) -> None:
    for options in ({}, {"chunked": True}, {"key": None}):
        assert (await exchange(server, 64 * MIB, **options)).status in (401, 413)
    # A body kept anywhere would show as 64 MiB or more; chunks of up to a few hundred KiB
    # come and go, so allow a little for the allocator.
    growth_kib = peak_rss_kib(server.pid) - server.baseline_peak_kib
    assert growth_kib < 16 * 1024, f"peak RSS grew by {growth_kib} KiB"
