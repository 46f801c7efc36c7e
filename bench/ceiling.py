"""The ceiling: a bare Litestar app answering a constant JSON body, served exactly like
Switchboard (same uvicorn, one worker, same core). Every HTTP figure is a ratio to this.

With ``CEILING_DATABASE_URL`` set it also serves the *floor* of a database-backed path:
``GET /one-query/{id}`` fetches one session row with one pooled asyncpg query (pool of 10,
as Switchboard's) and returns it as JSON, with no authentication, validation or anything
else. What it loses against ``/constant`` is what one query costs in this stack.

With ``CEILING_FLOOR_PLANS`` (a file bench/run.py writes after capturing each path's SQL,
read at the first such request) it serves each path's *own floor*: ``/own-floor/{slug}``
replays that path's statements in the same transactions (bench/floors.py), with the
request's values from the query string, on a pool set up as Switchboard's, and returns the
last result as JSON: no authentication, validation or serialization beyond that."""

from __future__ import annotations

import os
from typing import Any
from uuid import UUID

import asyncpg
from litestar import Litestar, Request, get, post, route
from litestar.datastructures import State

from bench import floors

BODY = {"status": "ok", "service": "ceiling", "items": [1, 2, 3]}


@get("/constant", sync_to_thread=False)
def constant() -> dict[str, Any]:
    """The same small JSON answer every time."""
    return BODY


@post("/constant", status_code=200, sync_to_thread=False)
def constant_post(data: dict[str, Any]) -> dict[str, Any]:
    """Parse a JSON body, answer the constant (the ceiling for writes)."""
    return BODY


@get("/one-query/{session_id:uuid}")
async def one_query(session_id: UUID, state: State) -> dict[str, Any]:
    """One session row by one pooled query, as JSON."""
    row = await state.pool.fetchrow(
        "SELECT * FROM session_coordination WHERE session_id = $1", session_id
    )
    return dict(row) if row is not None else {}


@route("/own-floor/{slug:str}", http_method=["GET", "POST", "PATCH"], status_code=200)
async def own_floor(slug: str, request: Request[Any, Any, Any], state: State) -> Any:
    """A path's captured statements, replayed with this request's values."""
    if state.plans is None:
        state.plans = floors.load_plans(os.environ["CEILING_FLOOR_PLANS"])
    return await floors.replay(state.floor_pool, state.plans[slug], request.query_params)


async def _open_pool(app: Litestar) -> None:
    url = os.environ.get("CEILING_DATABASE_URL")
    app.state.pool = await asyncpg.create_pool(url, min_size=2, max_size=10) if url else None
    app.state.floor_pool = await floors.open_pool(url) if url else None
    app.state.plans = None


async def _close_pool(app: Litestar) -> None:
    for pool in (app.state.pool, app.state.floor_pool):
        if pool is not None:
            await pool.close()


app = Litestar(
    [constant, constant_post, one_query, own_floor],
    on_startup=[_open_pool],
    on_shutdown=[_close_pool],
)
