"""The n8n webhook endpoints: happy paths, idempotent replays, key reuse, auth, bad input,
signatures, and acting on behalf of agents."""

from __future__ import annotations

import hashlib
import hmac
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest

from app.asgi import create_app
from app.clock import FrozenClock, SystemClock
from app.db.pool import Database
from app.errors import (
    Conflict,
    NotFound,
    RateLimited,
    ServiceUnavailable,
    SwitchboardError,
    ValidationFailed,
    VersionConflict,
)
from app.settings import DatabaseSettings, Settings, WebhookSettings
from app.webhooks.idempotency import IdempotencyService, Seal
from tests.conftest import ADMIN_KEY, app_client, lifespan_of
from tests.integration.helpers import assert_problem, create_session, create_user

SECRET = "webhook-secret-0123456789"


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        webhooks=WebhookSettings(secret=SECRET),
    )


async def test_coordination_starts_then_continues_a_session(client: httpx.AsyncClient) -> None:
    first = await client.post(
        "/webhooks/n8n/coordination",
        json={"user_ref": "telegram:42", "text": "make me a budget", "channel": "telegram"},
    )
    assert first.status_code == 200, first.text
    body = first.json()
    assert body["session_created"] is True
    assert body["agent"] == "Make_Plan_Agent"
    assert body["degraded"] is True
    assert body["routed_to"] is None  # Make_Plan_Agent's own fallback answered
    assert body["response"]
    assert isinstance(body["pending_actions"], list)
    assert body["progress"] == 0

    second = await client.post(
        "/webhooks/n8n/coordination", json={"user_ref": "telegram:42", "text": "what is a budget?"}
    )
    assert second.json()["session_id"] == body["session_id"]
    assert second.json()["session_created"] is False
    session = (await client.get(f"/v1/sessions/{body['session_id']}")).json()
    assert session["session_state"]["conversation_context"]["channel"] == "telegram"
    assert session["session_state"]["conversation_context"]["turn_count"] == 2

    other_type = await client.post(
        "/webhooks/n8n/coordination",
        json={"user_ref": "telegram:42", "text": "hello", "session_type": "education"},
    )
    assert other_type.json()["session_id"] != body["session_id"]


async def test_coordination_with_explicit_session_and_user(client: httpx.AsyncClient) -> None:
    user = await create_user(client)
    session = await create_session(client, user_id=user)
    response = await client.post(
        "/webhooks/n8n/coordination",
        json={"user_id": user, "session_id": session["session_id"], "text": "hello"},
    )
    assert response.json()["session_id"] == session["session_id"]
    stranger = await create_user(client)
    assert_problem(
        await client.post(
            "/webhooks/n8n/coordination",
            json={"user_id": stranger, "session_id": session["session_id"], "text": "hi"},
        ),
        422,
    )


async def test_idempotent_replay_gives_one_effect_and_the_same_response(
    client: httpx.AsyncClient,
) -> None:
    body = {"user_ref": "u-1", "text": "make a plan"}
    headers = {"Idempotency-Key": "n8n-exec-77"}
    first = await client.post("/webhooks/n8n/coordination", json=body, headers=headers)
    second = await client.post("/webhooks/n8n/coordination", json=body, headers=headers)
    assert first.status_code == second.status_code == 200
    assert second.json() == first.json()
    assert second.headers["idempotent-replayed"] == "true"
    assert "idempotent-replayed" not in first.headers
    decisions = (await client.get(f"/v1/sessions/{first.json()['session_id']}/decisions")).json()[
        "items"
    ]
    assert len(decisions) == 1

    body_key = {"user_ref": "u-1", "text": "make a plan", "idempotency_key": "k-body"}
    a = await client.post("/webhooks/n8n/coordination", json=body_key)
    b = await client.post("/webhooks/n8n/coordination", json=body_key)
    assert a.json() == b.json()

    reused = await client.post(
        "/webhooks/n8n/coordination", json={"user_ref": "u-1", "text": "other"}, headers=headers
    )
    problem = assert_problem(reused, 422)
    assert problem["errors"][0]["field"] == "idempotency_key"


async def test_client_errors_are_stored_and_replayed_too(client: httpx.AsyncClient) -> None:
    body = {"user_id": "01900000-0000-7000-8000-000000000000", "text": "hi"}
    headers = {"Idempotency-Key": "bad-user"}
    first = await client.post("/webhooks/n8n/coordination", json=body, headers=headers)
    second = await client.post("/webhooks/n8n/coordination", json=body, headers=headers)
    assert first.status_code == second.status_code == 404
    assert second.headers["content-type"].startswith("application/problem+json")
    assert second.json() == first.json()


async def test_a_conflict_is_not_stored_so_the_retry_runs_again(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user_id = await create_user(client)
    profile = {
        "user_id": user_id,
        "category": "user_profile",
        "key": "income",
        "memory_type": "data_collection",
        "content": 5000,
    }  # authorized_agents: hidden from the agent below, but it holds the key
    held = (await client.put("/v1/memories/by-key", json=profile)).json()
    write = {
        "agent_name": "Notes_Agent",
        "user_id": user_id,
        "memory_type": "orchestrator",
        "category": "user_profile",
        "key": "income",
        "access_level": "all_agents",
        "memory_content": 4000,
    }
    headers = {"Idempotency-Key": "exec-409"}
    agent = await make_agent_client("Notes_Agent", [])
    async with agent:
        first = await agent.post("/webhooks/n8n/memory", json=write, headers=headers)
        assert_problem(first, 409)
        # The conflict goes away (the memory holding the key is deleted)...
        assert (await client.delete(f"/v1/memories/{held['memory_id']}")).status_code == 204
        # ...and n8n's retry with the same key runs again instead of replaying the 409.
        second = await agent.post("/webhooks/n8n/memory", json=write, headers=headers)
        assert second.status_code == 200, second.text
        assert "idempotent-replayed" not in second.headers
        assert second.json()["memory"]["content"] == 4000
        third = await agent.post("/webhooks/n8n/memory", json=write, headers=headers)
        assert third.headers["idempotent-replayed"] == "true"
        assert third.json()["memory"]["memory_id"] == second.json()["memory"]["memory_id"]


@pytest.mark.parametrize(
    ("error", "stored"),
    [
        (VersionConflict("stale", current_version=3), False),
        (Conflict("busy; retry", retryable=True), False),
        (RateLimited("slow down", retry_after=1), False),
        (ServiceUnavailable("database away"), False),
        (NotFound("no such user"), True),
        (ValidationFailed("bad", errors=[]), True),
    ],
    ids=["version-conflict", "retryable-conflict", "429", "503", "404", "422"],
)
async def test_only_outcomes_a_retry_cannot_change_are_replayed(
    database_url: str, error: SwitchboardError, stored: bool
) -> None:
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    try:
        service = IdempotencyService(
            database, SystemClock(), timedelta(hours=24), timedelta(seconds=15)
        )
        calls = 0

        async def handler(_seal: Seal | None) -> tuple[int, dict[str, Any]]:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise error
            return 200, {"ok": True}

        async def run() -> tuple[int, bool]:
            try:
                answer = await service.run("n8n", "exec-1", "/webhooks/n8n/x", {"a": 1}, handler)
            except SwitchboardError as raised:
                return raised.status, False
            return answer.status, answer.replayed

        assert await run() == (error.status, False)
        if stored:
            assert await run() == (error.status, True)  # the same answer, replayed
            assert calls == 1
        else:
            assert await run() == (200, False)  # the retry ran again
            assert await run() == (200, True)
            assert calls == 2
    finally:
        await database.close()


async def test_webhooks_need_a_key(anon: httpx.AsyncClient) -> None:
    for path in ("coordination", "memory", "cleanup"):
        assert_problem(await anon.post(f"/webhooks/n8n/{path}", json={}), 401)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("coordination", {"text": "no user"}),
        ("coordination", {"user_ref": "x", "text": ""}),
        (
            "coordination",
            {"user_ref": "x", "user_id": "01900000-0000-7000-8000-000000000000", "text": "a"},
        ),
        ("coordination", {"user_ref": "x", "text": "a", "context_flags": "urgent"}),
        (
            "memory",
            {"agent_name": "Make_Plan_Agent", "memory_type": "planning", "memory_content": 1},
        ),
        (
            "memory",
            {
                "user_id": "01900000-0000-7000-8000-000000000000",
                "memory_type": "planning",
                "memory_content": 1,
            },
        ),
        ("memory", {"agent_name": "Make_Plan_Agent", "action": "read"}),
        ("memory", {"agent_name": "Make_Plan_Agent", "action": "delete"}),
        ("cleanup", {"job": ""}),
        ("cleanup", {"dry_run": "maybe"}),
    ],
)
async def test_bad_input_is_a_4xx_problem(
    client: httpx.AsyncClient, path: str, body: dict[str, Any]
) -> None:
    response = await client.post(f"/webhooks/n8n/{path}", json=body)
    assert 400 <= response.status_code < 500, response.text
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_memory_write_read_query_for_an_agent(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user = await create_user(client)
    manager = await make_agent_client("Orchestrator_Agent", ["coordination_manager"])
    async with manager:
        written = await manager.post(
            "/webhooks/n8n/memory",
            json={
                "user_id": user,
                "agent_name": "Collect_Create_Data_Agent",
                "memory_type": "data_collection",
                "memory_content": {"monthly_income": 3200},
                "category": "user_profile",
                "key": "finances",
            },
        )
        assert written.status_code == 200, written.text
        memory = written.json()["memory"]
        assert memory["agent_name"] == "Collect_Create_Data_Agent"
        assert memory["category"] == "user_profile"

        read = await manager.post(
            "/webhooks/n8n/memory",
            json={
                "action": "read",
                "agent_name": "Collect_Create_Data_Agent",
                "user_id": user,
                "category": "user_profile",
                "key": "finances",
            },
        )
        assert read.json()["memory"]["content"] == {"monthly_income": 3200}
        by_id = await manager.post(
            "/webhooks/n8n/memory",
            json={
                "action": "read",
                "agent_name": "Make_Plan_Agent",
                "memory_id": memory["memory_id"],
            },
        )
        assert by_id.status_code == 200
        query = await manager.post(
            "/webhooks/n8n/memory",
            json={"action": "query", "agent_name": "Make_Plan_Agent", "user_id": user},
        )
        assert query.json()["count"] == 1
        # Educate_Customer_Agent has no role: user_profile is not for it
        hidden = await manager.post(
            "/webhooks/n8n/memory",
            json={
                "action": "read",
                "agent_name": "Educate_Customer_Agent",
                "memory_id": memory["memory_id"],
            },
        )
        assert_problem(hidden, 404)
        assert_problem(
            await manager.post(
                "/webhooks/n8n/memory",
                json={"action": "query", "agent_name": "Nobody_Agent", "user_id": user},
            ),
            422,
        )

    audit = (
        await client.get("/v1/audit/memory", params={"agent": "Collect_Create_Data_Agent"})
    ).json()
    assert audit["items"][-1]["acting_principal"] == "Orchestrator_Agent"
    denied = (
        await client.get("/v1/audit/memory", params={"agent": "Educate_Customer_Agent"})
    ).json()
    assert denied["items"][0]["allowed"] is False
    assert denied["items"][0]["acting_principal"] == "Orchestrator_Agent"


async def test_the_memory_webhook_stores_an_agents_results_where_it_cannot_read_by_role(
    client: httpx.AsyncClient,
) -> None:
    """n8n acting for Make_Plan_Agent: its planning results go to agent_outputs (for the
    coordination manager), it reads them back as their writer, an agent without the role
    does not see them."""
    user = await create_user(client)
    written = await client.post(
        "/webhooks/n8n/memory",
        json={
            "user_id": user,
            "agent_name": "Make_Plan_Agent",
            "memory_type": "planning",
            "memory_content": {"plan": "50/30/20"},
        },
    )
    assert written.status_code == 200, written.text
    memory = written.json()["memory"]
    assert (memory["category"], memory["access_level"]) == ("agent_outputs", "coordination_manager")

    def read_as(agent: str) -> dict[str, Any]:
        return {"action": "read", "agent_name": agent, "memory_id": memory["memory_id"]}

    back = await client.post("/webhooks/n8n/memory", json=read_as("Make_Plan_Agent"))
    assert back.status_code == 200, back.text
    assert back.json()["memory"]["content"] == {"plan": "50/30/20"}
    manager = await client.post("/webhooks/n8n/memory", json=read_as("Orchestrator_Agent"))
    assert manager.status_code == 200, manager.text
    assert_problem(
        await client.post("/webhooks/n8n/memory", json=read_as("Consult_Customer_Agent")), 404
    )


async def test_memory_size_limit_and_delegation_rules(
    client: httpx.AsyncClient, make_agent_client: Any
) -> None:
    user = await create_user(client)
    big = {
        "user_id": user,
        "agent_name": "Make_Plan_Agent",
        "memory_type": "planning",
        "memory_content": "x" * (1024 * 1024 + 10),
    }
    response = await client.post("/webhooks/n8n/memory", json=big)
    assert response.status_code == 413
    plain = await make_agent_client("Make_Plan_Agent", ["authorized"])
    async with plain:
        own = await plain.post(
            "/webhooks/n8n/memory",
            json={
                "user_id": user,
                "agent_name": "Make_Plan_Agent",
                "memory_type": "planning",
                "memory_content": {"plan": 1},
                "access_level": "authorized_agents",
            },
        )
        assert own.status_code == 200, own.text
        other = await plain.post(
            "/webhooks/n8n/memory",
            json={
                "user_id": user,
                "agent_name": "Consult_Customer_Agent",
                "memory_type": "consultation",
                "memory_content": 1,
            },
        )
        assert_problem(other, 403)
        assert_problem(await plain.post("/webhooks/n8n/cleanup", json={}), 403)


async def test_cleanup_runs_jobs_and_reports_counts(client: httpx.AsyncClient) -> None:
    response = await client.post("/webhooks/n8n/cleanup", json={"job": "all", "dry_run": True})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body["jobs"]) == {
        "agent_cards",
        "archival",
        "expiry_cleanup",
        "expiry_extension",
        "expiry_warning",
        "housekeeping",
        "inactivity_timeout",
        "memory_retention",
    }
    assert body["failed"] == []
    one = await client.post("/webhooks/n8n/cleanup", json={"job": "expiry_cleanup"})
    assert set(one.json()["jobs"]) == {"expiry_cleanup"}
    assert_problem(await client.post("/webhooks/n8n/cleanup", json={"job": "nope"}), 404)


# A statement-level trigger fires even when the purge finds nothing to delete, so the
# housekeeping job fails on every run while it exists (what a lock timeout or a broken
# migration would do), and every other job still runs.
BREAK_HOUSEKEEPING = """
CREATE FUNCTION refuse_purge() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'outbox_events is read-only for this test'; END $$;
CREATE TRIGGER refuse_purge BEFORE DELETE ON outbox_events
  FOR EACH STATEMENT EXECUTE FUNCTION refuse_purge();
"""


async def test_a_cleanup_with_a_failed_job_is_a_500_that_is_never_replayed(
    client: httpx.AsyncClient, database_url: str
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(BREAK_HOUSEKEEPING)
        key = {"Idempotency-Key": "n8n:cleanup:exec-7"}
        body = {"job": "all", "dry_run": False}
        first = assert_problem(
            await client.post("/webhooks/n8n/cleanup", json=body, headers=key), 500
        )
        assert first["type"] == "urn:switchboard:problem:cleanup-failed"
        assert first["failed"] == ["housekeeping"]
        assert "housekeeping" in first["detail"]
        assert "read-only for this test" in first["jobs"]["housekeeping"]["error"]
        assert first["jobs"]["expiry_cleanup"]["status"] == "succeeded"  # the others ran
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM idempotency_keys WHERE key = $1", key["Idempotency-Key"]
            )
            == 0
        )  # nothing stored: a retry runs the jobs again

        again = await client.post("/webhooks/n8n/cleanup", json=body, headers=key)
        assert "idempotent-replayed" not in again.headers
        assert (
            assert_problem(again, 500)["jobs"]["housekeeping"]["run_id"]
            != (first["jobs"]["housekeeping"]["run_id"])
        )

        await conn.execute("DROP TRIGGER refuse_purge ON outbox_events")
        fixed = await client.post("/webhooks/n8n/cleanup", json=body, headers=key)
        assert fixed.status_code == 200, fixed.text
        assert fixed.json()["failed"] == []
        runs = await conn.fetch(
            "SELECT status FROM job_runs WHERE job_name = 'housekeeping' AND trigger = 'manual'"
            " ORDER BY started_at"
        )
        assert [r["status"] for r in runs] == ["failed", "failed", "succeeded"]
        replay = await client.post("/webhooks/n8n/cleanup", json=body, headers=key)
        assert replay.headers["idempotent-replayed"] == "true"  # a success is stored
        assert replay.json() == fixed.json()
    finally:
        await conn.close()


def signed(body: bytes, secret: str = SECRET, at: int | None = None) -> dict[str, str]:
    timestamp = int(time.time()) if at is None else at
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return {
        "content-type": "application/json",
        "X-Switchboard-Timestamp": str(timestamp),
        "X-Switchboard-Signature": "v1=" + digest.hexdigest(),
    }


async def test_signed_requests(client: httpx.AsyncClient) -> None:
    body = b'{"job": "expiry_cleanup", "dry_run": true}'
    ok = await client.post("/webhooks/n8n/cleanup", content=body, headers=signed(body))
    assert ok.status_code == 200, ok.text
    assert_problem(
        await client.post("/webhooks/n8n/cleanup", content=body, headers=signed(body, "w" * 30)),
        401,
    )
    stale = signed(body, at=int(time.time()) - 301)
    assert_problem(await client.post("/webhooks/n8n/cleanup", content=body, headers=stale), 401)
    tampered = b'{"job": "all", "dry_run": true}'
    assert_problem(
        await client.post("/webhooks/n8n/cleanup", content=tampered, headers=signed(body)), 401
    )
    half = {"content-type": "application/json", "X-Switchboard-Signature": "v1=00"}
    assert_problem(await client.post("/webhooks/n8n/cleanup", content=body, headers=half), 401)


async def test_a_signature_is_checked_before_the_body_is_parsed(
    settings: Settings, database_url: str
) -> None:
    """With signatures required, an unsigned or forged call is a 401 whatever its body
    holds: never the 400 or 422 that would tell it how to shape a request."""
    strict = settings.model_copy(
        update={"webhooks": WebhookSettings(secret=SECRET, require_signature=True)}
    )
    app = create_app(strict, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False)
    async with lifespan_of(app), app_client(app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        for path in ("/webhooks/n8n/cleanup", "/webhooks/n8n/memory", "/webhooks/n8n/coordination"):
            for body in (b'{"job":', b'{"bogus": 1}', b"[]"):
                unsigned = await c.post(
                    path, content=body, headers={"content-type": "application/json"}
                )
                assert_problem(unsigned, 401)
                forged = signed(b"{}")
                assert_problem(await c.post(path, content=body, headers=forged), 401)
        # Signed, the same malformed body is the client's to fix: 400.
        broken = b'{"job":'
        assert_problem(
            await c.post("/webhooks/n8n/cleanup", content=broken, headers=signed(broken)), 400
        )


@pytest.mark.parametrize(
    "timestamp",
    [
        b"9" * 400,  # past what a float holds
        b"1" * 5000,  # past Python's int-from-text digit limit
        b"0" * 13 + b"1",  # a real instant behind leading zeros: still too long
        "\u00b2".encode("latin-1"),  # a superscript two: str.isdigit() says yes
        b"",
    ],
    ids=["400-digits", "5000-digits", "zero-padded", "superscript", "empty"],
)
async def test_malformed_signature_timestamps_are_401_not_500(
    client: httpx.AsyncClient, timestamp: bytes
) -> None:
    body = b'{"job": "expiry_cleanup", "dry_run": true}'
    headers = {**signed(body), "X-Switchboard-Timestamp": timestamp}
    response = await client.post("/webhooks/n8n/cleanup", content=body, headers=headers)
    problem = assert_problem(response, 401)
    assert "Timestamp" in problem["detail"]


async def test_a_replayed_memory_write_is_the_first_answer_to_the_byte(
    client: httpx.AsyncClient,
) -> None:
    """The stored answer is replayed as the first one was written: the same times
    (``Z``, not ``+00:00``), so a client comparing strings sees no difference."""
    user = await create_user(client)
    write = {
        "user_id": user,
        "agent_name": "Collect_Create_Data_Agent",
        "memory_type": "data_collection",
        "memory_content": {"monthly_income": 3200},
    }
    headers = {"Idempotency-Key": "replay-bytes-1"}
    first = await client.post("/webhooks/n8n/memory", json=write, headers=headers)
    second = await client.post("/webhooks/n8n/memory", json=write, headers=headers)
    assert first.status_code == second.status_code == 200, first.text
    assert second.headers["idempotent-replayed"] == "true"
    assert first.json()["memory"]["created_at"].endswith("Z")
    assert second.json() == first.json()


async def test_a_memory_write_answers_with_the_memory_as_the_api_shows_it(
    settings: Settings, database_url: str
) -> None:
    """A new memory's answer is built by the statement that writes it (with the claim of
    its Idempotency-Key): it must be the memory as the API writes it everywhere else, field
    for field, the times in the API's form with or without microseconds."""
    clock = FrozenClock(datetime(2026, 11, 1, 12, 0, tzinfo=UTC))
    app = create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        clock=clock,
        run_scheduler=False,
        run_worker=False,
    )
    async with lifespan_of(app), app_client(app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        user = await create_user(c)
        for n, at in enumerate(
            (
                datetime(2026, 11, 1, 12, 0, tzinfo=UTC),  # whole seconds: no fraction
                datetime(2026, 11, 1, 12, 0, 1, 120000, tzinfo=UTC),
            )
        ):
            clock.set(at)
            for category in (None, "user_profile"):  # a retention, and none (permanent)
                write = {
                    "user_id": user,
                    "agent_name": "Collect_Create_Data_Agent",
                    "memory_type": "data_collection",
                    "memory_content": {"n": n, "nested": [1.5, {"b": None, "a": "x"}]},
                    **({"category": category} if category else {}),
                }
                keyed = await c.post(
                    "/webhooks/n8n/memory",
                    json=write,
                    headers={"Idempotency-Key": f"{n}{category}"},
                )
                unkeyed = await c.post("/webhooks/n8n/memory", json=write)
                assert keyed.status_code == unkeyed.status_code == 200, keyed.text
                memory = keyed.json()["memory"]
                shown = await c.get(f"/v1/memories/{memory['memory_id']}")
                assert shown.status_code == 200, shown.text
                assert memory == shown.json()
                assert {k: v for k, v in keyed.json().items() if k != "memory"} == {
                    "action": "write",
                    "created": True,
                }
                # The answer built in Python (no key) has the same fields and form.
                other = unkeyed.json()["memory"]
                assert other.keys() == memory.keys()
                assert other["created_at"] == memory["created_at"]
                assert other["expires_at"] == memory["expires_at"]
