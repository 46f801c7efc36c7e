"""What a client may do before it is authenticated, against a real server process (served as
``switchboard serve`` serves, app/server.py): header floods are refused early and cost no
memory, slow or silent heads and idle kept-alive connections are closed, connections past
the limit get 503, and ordinary requests are served as before.

The flood and slow-head clients are the header-flood drill's (drills/header_flood.py).
"""

from __future__ import annotations

import asyncio
import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from bench.serve import memory_kib, spawn
from drills.header_flood import flood, flood_size, slow_head
from tests import dbutil
from tests.conftest import ADMIN_KEY

MIB = 1024 * 1024
HEADER_TIMEOUT = 3
KEEP_ALIVE_TIMEOUT = 1
MAX_CONNECTIONS = 8


@dataclass
class Server:
    port: int
    pid: int

    def bytes_read(self) -> int:
        """Bytes the process has read from files and sockets so far (/proc/<pid>/io)."""
        for line in Path(f"/proc/{self.pid}/io").read_text().splitlines():
            if line.startswith("rchar:"):
                return int(line.split()[1])
        raise AssertionError("no rchar in /proc/<pid>/io")

    def reset_peak_rss(self) -> None:
        """Start VmHWM again from the current resident set (Linux: clear_refs 5)."""
        Path(f"/proc/{self.pid}/clear_refs").write_text("5")


@pytest.fixture(scope="module")
def server(server_url: str, template_database: str) -> Iterator[Server]:
    """One server process for the module, on a database of its own, with short timeouts and
    a small connection limit; the head limits are the defaults (100 fields, 16 KiB)."""
    name = dbutil.unique_name("sbtest_heads")
    asyncio.run(dbutil.create_database(server_url, name, template=template_database))
    process, port = spawn(
        "switchboard",
        {
            "SWITCHBOARD_DATABASE_URL": dbutil.with_database(server_url, name),
            "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
            "SWITCHBOARD_HEADER_TIMEOUT": str(HEADER_TIMEOUT),
            "SWITCHBOARD_KEEP_ALIVE_TIMEOUT": str(KEEP_ALIVE_TIMEOUT),
            "SWITCHBOARD_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
        },
    )
    try:
        yield Server(port, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=30)
        asyncio.run(dbutil.drop_database(server_url, name))


def request(sock: socket.socket, head: bytes) -> bytes:
    """Send a GET head and read one answer (its head and its content-length body)."""
    sock.sendall(head)
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, f"closed before an answer: {raw!r}"
        raw += chunk
    answer_head, _, body = raw.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in answer_head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return answer_head + b"\r\n\r\n" + body


def get(path: str = "/health", fields: int = 0, value: bytes = b"v") -> bytes:
    lines = [
        f"GET {path} HTTP/1.1".encode(),
        b"Host: 127.0.0.1",
        b"X-API-Key: " + ADMIN_KEY.encode(),
    ]
    lines += [b"X-Extra-%03d: %b" % (n, value) for n in range(fields)]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def closed_after(sock: socket.socket, bound: float) -> float | None:
    """Seconds until the server closes ``sock`` (reading and dropping what it sends), or
    None if it is still open after ``bound``."""
    started = time.monotonic()
    while (left := bound - (time.monotonic() - started)) > 0:
        if select.select([sock], [], [], left)[0]:
            try:
                if not sock.recv(65536):
                    return time.monotonic() - started
            except ConnectionResetError:
                return time.monotonic() - started
    return None


async def test_a_flood_of_header_lines_is_refused_early(server: Server) -> None:
    read_before = server.bytes_read()
    flooded = await asyncio.to_thread(flood, server.port)
    assert flooded.status == 431
    # The server closed long before the flood's end: the client's writes failed after what
    # the kernels' buffers took (a few MB here), of which the server read almost nothing.
    assert flooded.write_error in ("BrokenPipeError", "ConnectionResetError")
    assert flooded.sent < flood_size()
    assert server.bytes_read() - read_before < 2 * MIB


async def test_five_floods_at_once_leave_memory_flat(server: Server) -> None:
    # Before the limits, five floods took the peak RSS up by about 170 MB.
    before = memory_kib(server.pid, "VmRSS")
    server.reset_peak_rss()
    with ThreadPoolExecutor(5) as pool:
        results = await asyncio.gather(
            *(
                asyncio.get_running_loop().run_in_executor(pool, flood, server.port)
                for _ in range(5)
            )
        )
    assert [r.status for r in results] == [431] * 5
    growth_kib = memory_kib(server.pid, "VmHWM") - before
    assert growth_kib < 20 * 1024, f"peak RSS grew by {growth_kib} KiB"


async def test_a_head_sent_a_byte_a_second_is_closed_after_the_header_timeout(
    server: Server,
) -> None:
    slow = await asyncio.to_thread(slow_head, server.port, 1.0, HEADER_TIMEOUT + 12)
    assert slow.closed_by_server
    assert slow.status == 408
    assert slow.closed_after_s >= HEADER_TIMEOUT - 0.5  # not before the timeout
    assert slow.sent <= HEADER_TIMEOUT + 10  # and well before the head was done


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(
    server: Server,
) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        after = await asyncio.to_thread(closed_after, sock, HEADER_TIMEOUT + 10)
    assert after is not None
    assert after >= HEADER_TIMEOUT - 0.5


async def test_an_idle_kept_alive_connection_is_closed_after_the_idle_timeout(
    server: Server,
) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        assert request(sock, get()).startswith(b"HTTP/1.1 200 ")
        after = await asyncio.to_thread(closed_after, sock, HEADER_TIMEOUT + 10)
    # uvicorn's own default would be 5 s, the header timeout 3 s: the setting closed it.
    assert after is not None
    assert after < HEADER_TIMEOUT - 0.5


async def test_a_connection_past_the_limit_gets_503(server: Server) -> None:
    with ExitStack() as stack:
        # The limit counts the connection asking: MAX_CONNECTIONS - 1 others are enough.
        for _ in range(MAX_CONNECTIONS - 1):
            stack.enter_context(socket.create_connection(("127.0.0.1", server.port)))
        await asyncio.sleep(0.3)  # let the server accept them all
        with socket.create_connection(("127.0.0.1", server.port)) as sock:
            answer = await asyncio.to_thread(request, sock, get())
        assert answer.startswith(b"HTTP/1.1 503 ")
        head, body = answer.split(b"\r\n\r\n", 1)
        assert b"content-type: application/problem+json" in head.lower()
        assert b"retry-after: 1" in head.lower()
        assert orjson.loads(body)["status"] == 503
    await asyncio.sleep(0.3)  # the server sees them close
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        assert (await asyncio.to_thread(request, sock, get())).startswith(b"HTTP/1.1 200 ")


async def test_ordinary_requests_are_served_as_before(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        # Kept alive: several requests on one connection, one with 99 fields in about 15 KiB.
        assert request(sock, get()).startswith(b"HTTP/1.1 200 ")
        big = get("/v1/agents", fields=97, value=b"v" * 140)
        assert len(big) > 15_000
        assert request(sock, big).startswith(b"HTTP/1.1 200 ")
        assert request(sock, get("/v1/agents")).startswith(b"HTTP/1.1 200 ")
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        answer = request(sock, get("/v1/agents", fields=99))
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert b"content-type: application/problem+json" in answer


async def test_a_request_that_is_not_http_gets_a_problem_400(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(b"HELLO THERE\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    head, body = answer.split(b"\r\n\r\n", 1)
    assert b"content-type: application/problem+json" in head.lower()
    assert orjson.loads(body)["detail"].startswith("The request is not valid HTTP/1.1")
