"""Small helpers shared by the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import uvicorn
from litestar import Litestar

from app.server import bind, uvicorn_config
from app.settings import ServerSettings


@contextlib.asynccontextmanager
async def served(app: Litestar, server: ServerSettings | None = None) -> AsyncIterator[str]:
    """``app`` served by uvicorn on 127.0.0.1 as ``switchboard serve`` serves it (with
    ``server``'s settings: head limits, trusted proxies); its base URL."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    config = uvicorn_config(app, server or ServerSettings(), host="127.0.0.1", port=port)
    running_server = uvicorn.Server(config)
    running = asyncio.create_task(running_server.serve(sockets=[sock]))
    while not running_server.started:
        assert not running.done(), "the server did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        running_server.should_exit = True
        await running


async def store_content_a_rule_now_refuses(database_url: str, session_id: str) -> None:
    """Give a session content an older version could store and today's rules refuse (a
    pending action with a 5,000-character description), behind the API's back."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            "UPDATE session_coordination SET session_state = jsonb_set(session_state, "
            "'{pending_actions}', jsonb_build_array(jsonb_build_object('type', 'x', "
            "'description', repeat('d', 5000)))) WHERE session_id = $1",
            UUID(session_id),
        )
    finally:
        await conn.close()


def assert_problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """Assert an RFC 9457 problem response with ``status`` and return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:switchboard:problem:")
    assert body["title"]
    assert body["detail"]
    return body


async def create_user(client: httpx.AsyncClient, external_ref: str | None = None) -> str:
    """Create a user and return its id."""
    response = await client.post("/v1/users", json={"external_ref": external_ref})
    assert response.status_code == 201, response.text
    user_id: str = response.json()["id"]
    return user_id


async def create_session(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    """Create a session (and a user for it unless ``user_id`` is given); return the body."""
    if "user_id" not in fields:
        fields["user_id"] = await create_user(client)
    response = await client.post("/v1/sessions", json=fields)
    assert response.status_code == 201, response.text
    body: dict[str, Any] = response.json()
    return body


def if_match(version: int) -> dict[str, str]:
    """The If-Match header for a version."""
    return {"If-Match": f'"{version}"'}


async def eventually(
    probe: Callable[[], Awaitable[Any]], *, within: float = 15.0, interval: float = 0.05
) -> Any:
    """``probe``'s first truthy value, or fail after ``within`` seconds (generous: the suite
    shares a small machine with other work)."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if value:
            return value
        assert time.monotonic() < deadline, "timed out waiting"
        await asyncio.sleep(interval)


async def drop_the_connection_at_the_seal(database_url: str, key_like: str) -> None:
    """The first time an Idempotency-Key matching ``key_like`` (SQL LIKE) gets its answer
    stored, PostgreSQL ends the connection storing it, inside that statement: what a lost
    connection or a crash at the seal does to its transaction. The seal is an UPDATE of
    the claim, or the claim itself inserted completed (the memory webhook's one-statement
    write). Once: a sequence counts (nextval is not rolled back with the transaction it
    dies in)."""
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(
            """
            CREATE SEQUENCE seal_drops;
            CREATE TABLE seal_drop_keys (pattern text NOT NULL);
            CREATE FUNCTION drop_at_seal() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF NEW.key LIKE ANY (SELECT pattern FROM seal_drop_keys)
                 AND nextval('seal_drops') = 1 THEN
                PERFORM pg_terminate_backend(pg_backend_pid());
                -- Should the end not have come yet, nothing of the transaction commits.
                RAISE EXCEPTION 'the connection was ended at the seal';
              END IF;
              RETURN NEW;
            END $$;
            CREATE TRIGGER drop_at_seal BEFORE INSERT OR UPDATE ON idempotency_keys
              FOR EACH ROW WHEN (NEW.status = 'completed') EXECUTE FUNCTION drop_at_seal();
            """
        )
        await conn.execute("INSERT INTO seal_drop_keys VALUES ($1)", key_like)
    finally:
        await conn.close()


async def seal_drops(database_url: str) -> int:
    """How many seals ``drop_the_connection_at_the_seal`` saw (the sequence's last value)."""
    conn = await asyncpg.connect(database_url)
    try:
        count: int = await conn.fetchval(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM seal_drops"
        )
    finally:
        await conn.close()
    return count
