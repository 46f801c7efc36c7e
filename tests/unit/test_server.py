"""The request-head limits of app/server.py, driven in-process: uvicorn's own protocol code
with a fake transport, so the boundaries are exact and no timing depends on a server.
tests/integration/test_header_limits.py does the same against a real server process."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from app.server import HeadLimits, LimitedHttpToolsProtocol, protocol_class, uvicorn_config
from app.settings import ServerSettings

LIMITS = HeadLimits(max_fields=100, max_bytes=16 * 1024, timeout=0.2)


class Transport(asyncio.Transport):
    """What uvicorn's protocol needs of a transport; records what is written."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closed = False
        self.reading = True
        self.protocol: asyncio.Protocol | None = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8080), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        assert not self.closed, "written after close"
        self.written += data

    def close(self) -> None:
        if not self.closed and self.protocol is not None:  # as asyncio does, soon after
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    @property
    def statuses(self) -> list[int]:
        return [int(status) for status in re.findall(rb"HTTP/1\.1 (\d{3}) ", self.written)]

    @property
    def problem(self) -> dict[str, Any]:
        head, _, body = bytes(self.written).partition(b"\r\n\r\n")
        assert b"content-type: application/problem+json" in head
        assert b"connection: close" in head
        problem: dict[str, Any] = json.loads(body)
        return problem


class Connection:
    """One connection to an app that answers 200 with the number of header fields it got."""

    def __init__(self, limits: HeadLimits = LIMITS, *, app_delay: float = 0.0) -> None:
        self.calls = 0

        async def app(scope: Any, receive: Any, send: Any) -> None:
            self.calls += 1
            while (await receive()).get("more_body"):
                pass
            await asyncio.sleep(app_delay)
            body = str(len(scope["headers"])).encode()
            headers = [(b"content-length", str(len(body)).encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        config = uvicorn.Config(
            app,
            http=protocol_class(limits),
            ws="none",
            log_config=None,
            lifespan="off",
            access_log=False,
        )
        config.load()
        self.transport = Transport()
        self.protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}
        )
        self.transport.protocol = self.protocol
        self.protocol.connection_made(self.transport)

    def feed(self, data: bytes, piece: int | None = None) -> int:
        """Hand ``data`` to the protocol in reads of ``piece`` bytes until the connection
        closes; how many bytes were handed over."""
        fed = 0
        piece = piece or len(data) or 1
        while fed < len(data) and not self.transport.closed:
            self.protocol.data_received(data[fed : fed + piece])
            fed += piece
        return min(fed, len(data))

    async def settle(self, seconds: float = 0.01) -> None:
        await asyncio.sleep(seconds)


def head(fields: int = 0, value: bytes = b"v", *, target: bytes = b"/", end: bool = True) -> bytes:
    lines = [b"GET " + target + b" HTTP/1.1", b"Host: x"]
    lines += [b"X-F-%03d: %b" % (n, value) for n in range(fields)]
    return b"\r\n".join(lines) + (b"\r\n\r\n" if end else b"\r\n")


async def test_the_protocol_is_uvicorns_httptools_protocol_with_the_limits() -> None:
    config = uvicorn_config(object(), ServerSettings(), host="127.0.0.1", port=1)
    assert issubclass(config.http, LimitedHttpToolsProtocol)  # type: ignore[arg-type]
    assert config.http.limits == HeadLimits(100, 16 * 1024, 10.0)  # type: ignore[union-attr]
    assert (config.timeout_keep_alive, config.limit_concurrency) == (5, 1000)
    assert config.ws == "none"


async def test_the_last_field_allowed_is_served_and_one_more_is_431() -> None:
    allowed = Connection()
    allowed.feed(head(fields=99))  # with Host: 100 fields
    await allowed.settle()
    assert allowed.transport.statuses == [200]
    assert allowed.transport.written.endswith(b"100")

    refused = Connection()
    refused.feed(head(fields=100))
    await refused.settle()
    assert refused.calls == 0
    assert refused.transport.statuses == [431]
    assert refused.transport.closed
    assert refused.transport.problem == {
        "type": "urn:switchboard:problem:request-header-fields-too-large",
        "title": "Request header fields too large",
        "status": 431,
        "detail": "The request has more than 100 header fields.",
    }


async def test_a_head_over_the_bytes_is_431_and_under_them_is_served() -> None:
    value = b"v" * 1000
    under = Connection()
    under.feed(head(fields=15, value=value))  # about 15.2 KiB
    await under.settle()
    assert under.transport.statuses == [200]

    over = Connection()
    over.feed(head(fields=17, value=value))  # about 17.2 KiB, in one read
    await over.settle()
    assert (over.calls, over.transport.statuses) == (0, [431])
    assert over.transport.problem["detail"] == "The request head is longer than 16384 bytes."


async def test_a_flood_of_lines_is_refused_after_the_limit_not_after_the_flood() -> None:
    connection = Connection()
    flood = head(fields=0, end=False) + b"".join(
        b"X-Flood-%06d: %b\r\n" % (n, b"f" * 190) for n in range(100_000)
    )
    fed = connection.feed(flood, piece=64 * 1024)
    assert connection.transport.statuses == [431]
    assert fed <= 64 * 1024  # the 101st field came within the first read
    assert connection.calls == 0


async def test_one_endless_header_line_is_refused_after_the_limit_and_one_read() -> None:
    # httptools reports a field only at its end: the bytes of whole reads are counted.
    connection = Connection()
    fed = connection.feed(head(end=False) + b"X-Long: " + b"a" * 20_000_000, piece=4096)
    assert connection.transport.statuses == [431]
    assert fed <= 16 * 1024 + 4096


async def test_a_long_request_target_is_414() -> None:
    connection = Connection()
    connection.feed(head(target=b"/" + b"a" * 20_000), piece=4096)
    assert connection.transport.statuses == [414]
    assert connection.transport.problem["title"] == "URI too long"


async def test_each_request_on_a_connection_has_its_own_limits() -> None:
    # Three heads of 99 fields back to back, in one read and then byte-split reads.
    connection = Connection()
    connection.feed(head(fields=98) * 3)
    await connection.settle(0.05)
    assert connection.transport.statuses == [200, 200, 200]
    connection.feed(head(fields=98, value=b"v" * 150) * 2, piece=1000)  # about 15 KiB each
    await connection.settle(0.05)
    assert connection.transport.statuses == [200] * 5
    assert not connection.transport.closed


async def test_a_body_is_not_counted_as_head() -> None:
    connection = Connection()
    body = b"x" * 300_000
    request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    connection.feed(request, piece=64 * 1024)
    await connection.settle()
    assert connection.transport.statuses == [200]
    connection.feed(request)  # a whole request with its body in one read
    await connection.settle()
    assert connection.transport.statuses == [200, 200]


async def test_a_head_not_whole_in_time_is_408_and_closed() -> None:
    connection = Connection()
    connection.feed(head(fields=3, end=False))
    await connection.settle(LIMITS.timeout / 2)
    assert not connection.transport.closed
    await connection.settle(LIMITS.timeout)
    assert connection.transport.statuses == [408]
    assert connection.transport.problem["detail"] == "The request head did not arrive within 0.2 s."
    assert connection.transport.closed
    assert connection.calls == 0


async def test_a_connection_that_sends_nothing_is_closed_quietly() -> None:
    connection = Connection()
    await connection.settle(LIMITS.timeout * 1.5)
    assert connection.transport.closed
    assert connection.transport.written == b""


async def test_the_clock_stops_when_the_head_is_whole() -> None:
    # The app takes longer than the header timeout: its answer is not cut by a 408.
    connection = Connection(app_delay=LIMITS.timeout * 2)
    connection.feed(head(fields=3))
    await connection.settle(LIMITS.timeout * 3)
    assert connection.transport.statuses == [200]
    assert not connection.transport.closed


async def test_a_later_request_gets_its_own_clock_from_its_first_byte() -> None:
    connection = Connection()
    connection.feed(head())
    await connection.settle(LIMITS.timeout * 0.7)
    connection.feed(b"GET / HTTP/1.1\r\n")  # the next head starts
    await connection.settle(LIMITS.timeout * 0.7)  # 1.4 timeouts after the connection began
    assert not connection.transport.closed
    await connection.settle(LIMITS.timeout * 0.6)
    assert connection.transport.statuses == [200, 408]


@pytest.mark.parametrize("late", [False, True], ids=["refused", "late"])
async def test_a_pipelined_head_never_writes_into_the_answer_before_it(late: bool) -> None:
    # The first request is still being answered when the next head is refused or late:
    # the connection closes after (or instead of) the answer, never with a 431 inside it.
    connection = Connection(app_delay=LIMITS.timeout * 2)
    following = head(fields=3, end=False) if late else head(fields=100)
    connection.feed(head() + following)
    await connection.settle(LIMITS.timeout * 3)
    # Late: the answer is finished, then the connection closes. Refused: closed at once.
    assert connection.transport.statuses == ([200] if late else [])
    assert connection.transport.closed
