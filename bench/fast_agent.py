"""A fast local agent for the benchmarks: ``python -m bench.fast_agent PORT`` (or ``fd:N``:
on a socket inherited bound, as bench/serve.py's ``spawn`` serves).

A plain asyncio HTTP/1.1 server on 127.0.0.1 that answers every request at once with the
same agent reply (``{"success": true, "output_data": {...}}``), keeping connections alive.
It runs in a process of its own, pinned off the server's CPU 0 (``FastAgent(cpu=1)``), so
what a message through a durable task measures is Switchboard's path, not the agent's work.
Unlike tests/agent_server.py it records nothing: it answers millions of requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench.serve import inherited, reserve_port

ROOT = Path(__file__).resolve().parent.parent
REPLY = b'{"success": true, "output_data": {"response": "Here is your plan"}}'
ANSWER = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    b"content-length: " + str(len(REPLY)).encode() + b"\r\n\r\n" + REPLY
)


def content_length(head: bytes) -> int:
    """The Content-Length of a request head (0 without one)."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answer each request of one connection at once, until the client closes it."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = content_length(head)
            if length:
                await reader.readexactly(length)
            writer.write(ANSWER)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def serve(port_argument: str) -> None:
    """Listen on 127.0.0.1 (the port given, or the socket ``fd:N`` names) until killed."""
    sock = inherited(port_argument)
    if sock is None:
        server = await asyncio.start_server(answer, "127.0.0.1", int(port_argument), backlog=1024)
    else:
        server = await asyncio.start_server(answer, sock=sock, backlog=1024)
    async with server:
        await server.serve_forever()


class FastAgent:
    """The agent in a process of its own, pinned to ``cpu`` (when taskset exists), on
    ``port`` (0: a free one, reserved for it: ``reserve_port``)."""

    def __init__(self, port: int = 0, cpu: int | None = 1) -> None:
        with reserve_port() if port == 0 else contextlib.nullcontext() as sock:
            self.port = sock.getsockname()[1] if sock is not None else port
            argument = f"fd:{sock.fileno()}" if sock is not None else str(port)
            command = [sys.executable, "-m", "bench.fast_agent", argument]
            if cpu is not None and shutil.which("taskset"):
                command = ["taskset", "-c", str(cpu), *command]
            fds = (sock.fileno(),) if sock is not None else ()
            self._proc = subprocess.Popen(command, cwd=ROOT, pass_fds=fds)
        self.url = f"http://127.0.0.1:{self.port}/agent"
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.post(self.url, json={}, timeout=1).status_code == 200:
                    return
            if self._proc.poll() is not None:
                break
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the fast agent did not start on port {self.port}")

    def stop(self) -> None:
        """End the agent's process."""
        if self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=10)


def main() -> None:
    """Serve on the port given, with uvloop when installed (as Switchboard is served)."""
    port_argument = sys.argv[1]
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(port_argument))
    else:
        uvloop.run(serve(port_argument))


if __name__ == "__main__":
    main()
