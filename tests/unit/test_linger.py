"""LingeringClose's decisions, driven by a fake server: when an answer is held back until the
rest of the body is discarded, when the connection may stay open, and the two bounds."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from app.linger import LingeringClose, discard_body

KIB = 1024


class Client:
    """The server side of one request: hands out body chunks, records what is sent back."""

    def __init__(self, chunks: list[bytes], *, stall: bool = False) -> None:
        self.chunks = list(chunks)
        self.stall = stall  # after the chunks, wait forever (a client that stopped writing)
        self.reads = 0
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.reads += 1
        if not self.chunks:
            if self.stall:
                await asyncio.Event().wait()
            return {"type": "http.disconnect"}
        body = self.chunks.pop(0)
        more = bool(self.chunks) or self.stall
        return {"type": "http.request", "body": body, "more_body": more}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def start_headers(self) -> list[tuple[bytes, bytes]]:
        return list(self.sent[0]["headers"])


def scope(headers: dict[str, str]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": "/v1/memories",
        "headers": [(k.encode(), v.encode()) for k, v in headers.items()],
    }


def answering(status: int, *, read_body: bool = False) -> Any:
    """An app that answers ``status`` with a small body, reading the request body first or not."""

    async def app(_scope: Any, receive: Any, send: Any) -> None:
        if read_body:
            while (await receive()).get("more_body", False):
                pass
        await send({"type": "http.response.start", "status": status, "headers": [(b"a", b"b")]})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    return app


async def run(
    app: Any,
    headers: dict[str, str],
    client: Client,
    max_bytes: int = 256 * KIB,
    seconds: float = 5.0,
) -> None:
    await LingeringClose(app, max_bytes=max_bytes, seconds=seconds)(
        scope(headers), client.receive, client.send
    )


async def test_an_answer_after_the_whole_body_passes_unchanged() -> None:
    client = Client([b"x" * KIB])
    await run(answering(200, read_body=True), {"content-length": str(KIB)}, client)
    assert client.sent == [
        {"type": "http.response.start", "status": 200, "headers": [(b"a", b"b")]},
        {"type": "http.response.body", "body": b"{}", "more_body": False},
    ]


async def test_a_request_without_body_passes_unchanged() -> None:
    client = Client([])
    await run(answering(401), {}, client)
    assert client.reads == 0
    assert client.sent[-1] == {"type": "http.response.body", "body": b"{}", "more_body": False}
    assert (b"connection", b"close") not in client.start_headers()


async def test_an_early_answer_is_finished_only_after_the_rest_is_discarded() -> None:
    client = Client([b"x" * (64 * KIB)] * 3)
    await run(answering(413), {"content-length": str(192 * KIB)}, client)
    assert client.chunks == []  # all of it read
    # The whole answer goes out first; its end waits for the body.
    assert client.sent[1] == {"type": "http.response.body", "body": b"{}", "more_body": True}
    assert client.sent[2] == {"type": "http.response.body", "body": b"", "more_body": False}
    # The body fits the bound, so it is read to its end and the connection may be reused.
    assert (b"connection", b"close") not in client.start_headers()


async def test_a_body_past_the_byte_bound_is_cut_and_the_connection_closed() -> None:
    client = Client([b"x" * (64 * KIB)] * 10)
    await run(answering(413), {"content-length": str(640 * KIB)}, client, max_bytes=128 * KIB)
    assert client.reads == 2  # 128 KiB discarded, then no more
    assert client.start_headers()[-1] == (b"connection", b"close")
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}


async def test_a_chunked_body_of_unknown_length_closes_the_connection() -> None:
    client = Client([b"x" * KIB])
    await run(answering(401), {"transfer-encoding": "chunked"}, client)
    assert client.chunks == []
    assert client.start_headers() == [(b"a", b"b"), (b"connection", b"close")]


async def test_a_partly_read_body_counts_what_the_app_read() -> None:
    # Litestar reads a chunked or lying body until it passes the limit, then answers 413.
    async def app(_scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await answering(413)(_scope, receive, send)

    client = Client([b"x" * (64 * KIB)] * 4)
    await run(app, {"content-length": str(256 * KIB)}, client, max_bytes=192 * KIB)
    assert client.chunks == []
    assert (b"connection", b"close") not in client.start_headers()


async def test_expect_100_continue_never_asked_for_is_not_waited_for() -> None:
    # The client waits for "100 Continue" before sending; nothing will come.
    client = Client([], stall=True)
    headers = {"content-length": str(8 * 1024 * KIB), "expect": "100-continue"}
    await asyncio.wait_for(run(answering(413), headers, client), timeout=1)
    assert client.reads == 0
    assert client.start_headers()[-1] == (b"connection", b"close")
    assert client.sent[-1] == {"type": "http.response.body", "body": b"{}", "more_body": False}


async def test_a_stalled_body_is_given_up_after_the_time_bound() -> None:
    client = Client([b"x" * KIB], stall=True)
    assert not await discard_body(client.receive, 1024 * KIB, 0.05)
    assert client.reads == 2


@pytest.mark.parametrize(("max_bytes", "seconds"), [(0, 5.0), (1024 * KIB, 0.0)])
async def test_turned_off_it_answers_and_closes(max_bytes: int, seconds: float) -> None:
    client = Client([b"x" * KIB], stall=True)
    await asyncio.wait_for(
        run(answering(413), {"content-length": "2048"}, client, max_bytes, seconds), timeout=1
    )
    assert client.reads == 0
    assert client.start_headers()[-1] == (b"connection", b"close")
    assert client.sent[-1]["more_body"] is False
