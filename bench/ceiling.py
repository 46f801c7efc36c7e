"""The ceiling: a bare Litestar app answering a constant JSON body, served exactly like
Switchboard (same uvicorn, one worker, same core). Every HTTP figure is a ratio to this."""

from __future__ import annotations

from typing import Any

from litestar import Litestar, get, post

BODY = {"status": "ok", "service": "ceiling", "items": [1, 2, 3]}


@get("/constant", sync_to_thread=False)
def constant() -> dict[str, Any]:
    """The same small JSON answer every time."""
    return BODY


@post("/constant", status_code=200, sync_to_thread=False)
def constant_post(data: dict[str, Any]) -> dict[str, Any]:
    """Parse a JSON body, answer the constant (the ceiling for writes)."""
    return BODY


app = Litestar([constant, constant_post])
