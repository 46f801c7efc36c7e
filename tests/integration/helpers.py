"""Small helpers shared by the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import httpx
import uvicorn
from litestar import Litestar

from app.db.queries import QUERIES
from app.server import bind, uvicorn_config
from app.settings import ServerSettings

T = TypeVar("T")
# What ``switchboard serve`` logs (at INFO, as text or JSON) once it listens.
LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


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


def listening_port(log: Path) -> int | None:
    """The port ``switchboard serve --port 0`` (the kernel picks a free one, taken at
    once) said in ``log`` it listens on; None until it has."""
    found = LISTENING.search(log.read_text(errors="replace")) if log.exists() else None
    return int(found.group(1)) if found else None


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


# The advisory lock the first turn's commit waits for (end_the_task_read_after_the_turn).
TURN_HOLD = 22_022


async def end_the_task_read_after_the_turn(database_url: str, send: Awaitable[T]) -> tuple[T, int]:
    """``send``'s result, and how many reads of a task (``get_task``) PostgreSQL ended
    after the first coordinator turn committed: what a database lost right after that
    commit does to the request that wrote it.

    The turn's transaction is held at its COMMIT (a deferred trigger on the decision it
    inserts waits for an advisory lock) while a second connection queues for
    ``agent_tasks`` exclusively; the commit lets it in, so the reads of a task that
    follow wait behind it, and their connections are ended there. Once: a sequence counts
    the turns."""
    admin = await asyncpg.connect(database_url)
    holder = await asyncpg.connect(database_url)
    locker = await asyncpg.connect(database_url)
    sending: asyncio.Future[T] = asyncio.ensure_future(send)
    try:
        await admin.execute(
            f"""
            CREATE SEQUENCE turn_holds;
            CREATE FUNCTION hold_the_turn() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF nextval('turn_holds') = 1 THEN
                PERFORM pg_advisory_xact_lock_shared({TURN_HOLD});
              END IF;
              RETURN NULL;
            END $$;
            CREATE CONSTRAINT TRIGGER hold_the_turn AFTER INSERT ON coordination_decisions
              DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION hold_the_turn();
            """
        )
        await holder.execute("SELECT pg_advisory_lock($1)", TURN_HOLD)

        async def turn_held() -> bool:
            assert not sending.done(), "the request ended before its turn committed"
            held: bool = await admin.fetchval(
                "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = 0 AND objid = $1 AND NOT granted)",
                TURN_HOLD,
            )
            return held

        await eventually(turn_held)
        exclusive = locker.transaction()
        await exclusive.start()
        locking = asyncio.ensure_future(
            locker.execute("LOCK TABLE agent_tasks IN ACCESS EXCLUSIVE MODE")
        )

        async def queued() -> bool:
            asked: bool = await admin.fetchval(
                "SELECT EXISTS (SELECT FROM pg_locks WHERE pid = $1 "
                "AND relation = 'agent_tasks'::regclass)",
                locker.get_server_pid(),
            )
            return asked

        await eventually(queued)
        await holder.execute("SELECT pg_advisory_unlock($1)", TURN_HOLD)
        await locking  # granted: the turn has committed

        async def reads_waiting() -> list[int]:
            rows = await admin.fetch(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query = $1",
                QUERIES.tasks.get_task,
            )
            return [row["pid"] for row in rows]

        waiting = await eventually(reads_waiting)
        for pid in waiting:
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
        await exclusive.rollback()
        return await sending, len(waiting)
    finally:
        if not sending.done():
            sending.cancel()
        await asyncio.gather(sending, return_exceptions=True)
        for conn in (locker, holder, admin):
            await conn.close()
