"""Durable agent tasks against real local agents (tests/agent_server.py): retries with
backoff, the dead-letter queue and requeue, idempotent creation, the transition rule in
the database, cancel, and the endpoints' refusals."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest
from litestar import Litestar

from app.settings import DatabaseSettings, Settings, TaskSettings
from app.tasks.schemas import NewTask, Task, TaskDelayed
from app.tasks.service import TaskService
from tests.agent_server import AgentServer
from tests.conftest import LOOPBACK_ALLOWED
from tests.integration import agent_tasks
from tests.integration.helpers import assert_problem, create_session

BASE = 0.2  # seconds: the retry base of these tests (1 s in production)
TASKS = TaskSettings(
    retry_base_seconds=BASE,
    retry_cap_seconds=5,
    poll_interval=0.05,
    lease_seconds=3,
    worker_concurrency=8,
)
TERMINAL = {"completed", "failed", "canceled", "rejected"}


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=8),
        outbound=LOOPBACK_ALLOWED,
        tasks=TASKS,
    )


# The app with its task worker running (on this module's settings).
app = agent_tasks.app


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


async def register(client: httpx.AsyncClient, name: str, server: AgentServer) -> None:
    """Register ``name`` at the server's URL with a breaker that never opens."""
    response = await client.post(
        "/v1/agents",
        json={"name": name, "url": server.url, "timeout_ms": 2000, "fail_max": 1000},
    )
    assert response.status_code == 201, response.text


async def submit(client: httpx.AsyncClient, agent: str, **extra: Any) -> dict[str, Any]:
    headers = extra.pop("headers", {})
    body = {"agent_name": agent, "input": {"message": "hello"}, **extra}
    response = await client.post("/v1/tasks", json=body, headers=headers)
    assert response.status_code in (200, 201), response.text
    task: dict[str, Any] = response.json()
    return task


def service_of(client: httpx.AsyncClient) -> TaskService:
    """The TaskService of the app ``client`` calls."""
    app: Litestar = client._transport.app  # type: ignore[attr-defined]
    service: TaskService = app.dependencies["tasks"].dependency()
    return service


async def finished(client: httpx.AsyncClient, task_id: str, seconds: float = 20) -> dict[str, Any]:
    """The task once terminal (read through the service's wait)."""
    task = await service_of(client).wait(UUID(task_id), seconds)
    assert task.status in TERMINAL, task
    response = await client.get(f"/v1/tasks/{task_id}")
    assert response.status_code == 200, response.text
    detail: dict[str, Any] = response.json()
    return detail


async def test_a_flaky_agent_succeeds_on_the_third_attempt_after_backoff(
    client: httpx.AsyncClient,
) -> None:
    flaky = await AgentServer(behaviour="fail", heal_after=2).start()
    try:
        await register(client, "Flaky_Agent", flaky)
        task = await submit(client, "Flaky_Agent")
        assert task["status"] == "submitted"
        detail = await finished(client, task["task_id"])
    finally:
        await flaky.stop()

    assert detail["task"]["status"] == "completed"
    assert detail["task"]["attempt"] == 3
    assert detail["task"]["result"]["output_data"] == {"response": "Hello from the agent"}
    assert len(flaky.requests) == 3
    steps = detail["transitions"]
    assert [(s["from_status"], s["to_status"], s["attempt"]) for s in steps] == [
        (None, "submitted", 0),
        ("submitted", "working", 1),
        ("working", "working", 1),  # retry scheduled
        ("working", "working", 2),  # claimed again
        ("working", "working", 2),
        ("working", "working", 3),
        ("working", "completed", 3),
    ]

    def at(step: dict[str, Any], key: str) -> datetime:
        return datetime.fromisoformat(step[key])

    for retry, claim, failed_attempt in ((steps[2], steps[3], 1), (steps[4], steps[5], 2)):
        assert retry["reason"].startswith("retry after: agent answered HTTP 500")
        wait = (at(retry, "due_at") - at(retry, "at")).total_seconds()
        # Full jitter: anywhere in [0, base * 2**(n-1)] (50 ms for the two clocks).
        assert -0.05 <= wait <= BASE * 2 ** (failed_attempt - 1) + 0.05, wait
        assert at(claim, "at") >= at(retry, "due_at") - timedelta(milliseconds=50)


async def test_a_dead_agent_ends_in_the_dead_letter_queue_after_six_attempts_and_requeue_works(
    client: httpx.AsyncClient,
) -> None:
    dead = await AgentServer(behaviour="fail").start()
    try:
        await register(client, "Dead_Agent", dead)
        session = await create_session(client)
        subscription = await client.post(
            "/v1/subscriptions",
            json={"url": dead.url, "event_types": ["task.dead_lettered"]},
        )
        assert subscription.status_code == 201, subscription.text
        task = await submit(
            client,
            "Dead_Agent",
            session_id=session["session_id"],
            user_id=session["user_id"],
        )
        detail = await finished(client, task["task_id"], seconds=30)
        assert detail["task"]["status"] == "failed"
        assert detail["task"]["attempt"] == 6
        assert len(dead.requests) == 6

        letters = (await client.get("/v1/dead-letters")).json()["items"]
        assert [letter["task_id"] for letter in letters] == [task["task_id"]]
        letter = letters[0]
        assert letter["failure_reason"] == "attempts_exhausted"
        assert letter["attempts"] == 6
        assert letter["manual_intervention_required"] is True
        assert letter["escalation_level"] == 1
        assert "HTTP 500" in letter["last_error"]

        escalated = (await client.get(f"/v1/sessions/{session['session_id']}")).json()
        assert escalated["status"] == "escalated"
        assert escalated["version"] == session["version"] + 1
        events = (await client.get("/v1/events")).json()["items"]
        assert [e["event_type"] for e in events] == ["task.dead_lettered"]
        assert events[0]["payload"]["task_id"] == task["task_id"]

        # Requeue: a NEW task with a fresh budget; the failed one stays failed.
        dead.behaviour = "ok"
        requeued = await client.post(f"/v1/dead-letters/{letter['dead_letter_id']}/requeue")
        assert requeued.status_code == 201, requeued.text
        again = requeued.json()
        assert again["task_id"] != task["task_id"]
        assert again["requeue_of"] == task["task_id"]
        assert again["max_attempts"] == 6
        done = await finished(client, again["task_id"])
        assert done["task"]["status"] == "completed"
        assert done["task"]["attempt"] == 1
        old = (await client.get(f"/v1/tasks/{task['task_id']}")).json()
        assert old["task"]["status"] == "failed"
        assert_problem(
            await client.post(f"/v1/dead-letters/{letter['dead_letter_id']}/requeue"), 409
        )
        assert_problem(await client.delete(f"/v1/dead-letters/{letter['dead_letter_id']}"), 409)
        shown = (await client.get("/v1/dead-letters", params={"state": "requeued"})).json()
        assert shown["items"][0]["requeued_task_id"] == again["task_id"]
        assert (await client.get("/v1/dead-letters")).json()["items"] == []
    finally:
        await dead.stop()


async def test_a_4xx_is_not_retried_and_a_discard_is_audited(client: httpx.AsyncClient) -> None:
    refusing = await AgentServer(status=400, reply={"error": "bad request"}).start()
    try:
        await register(client, "Picky_Agent", refusing)
        task = await submit(client, "Picky_Agent")
        detail = await finished(client, task["task_id"])
    finally:
        await refusing.stop()
    assert detail["task"]["status"] == "failed"
    assert detail["task"]["attempt"] == 1
    assert len(refusing.requests) == 1
    (letter,) = (await client.get("/v1/dead-letters")).json()["items"]
    assert letter["failure_reason"] == "not_retryable"

    gone = await client.delete(
        f"/v1/dead-letters/{letter['dead_letter_id']}", params={"reason": "bad input"}
    )
    assert gone.status_code == 200, gone.text
    assert gone.json()["discarded_by"] == "admin"
    assert gone.json()["discard_reason"] == "bad input"
    assert (await client.get("/v1/dead-letters")).json()["items"] == []
    kept = (await client.get("/v1/dead-letters", params={"state": "discarded"})).json()["items"]
    assert [k["dead_letter_id"] for k in kept] == [letter["dead_letter_id"]]
    assert_problem(await client.post(f"/v1/dead-letters/{letter['dead_letter_id']}/requeue"), 409)


async def test_an_idempotency_key_returns_the_same_task(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await register(client, "Echo_Agent", agent)
    headers = {"Idempotency-Key": "order-42"}
    first = await client.post(
        "/v1/tasks", json={"agent_name": "Echo_Agent", "input": {"n": 1}}, headers=headers
    )
    second = await client.post(
        "/v1/tasks", json={"agent_name": "Echo_Agent", "input": {"n": 2}}, headers=headers
    )
    other = await client.post(
        "/v1/tasks",
        json={"agent_name": "Echo_Agent", "input": {"n": 3}},
        headers={"Idempotency-Key": "order-43"},
    )
    assert first.status_code == 201, first.text
    assert second.status_code == 200, second.text
    assert second.json()["task_id"] == first.json()["task_id"]
    assert second.json()["input"] == {"n": 1}
    assert other.status_code == 201
    assert other.json()["task_id"] != first.json()["task_id"]
    await finished(client, first.json()["task_id"])
    await finished(client, other.json()["task_id"])
    assert sorted(r["n"] for r in agent.requests) == [1, 3]


async def test_the_database_refuses_backward_and_terminal_transitions(
    client: httpx.AsyncClient, agent: AgentServer, database_url: str
) -> None:
    await register(client, "Echo_Agent", agent)
    task = await submit(client, "Echo_Agent")
    await finished(client, task["task_id"])
    conn = await asyncpg.connect(database_url)
    try:
        for status in ("working", "submitted", "failed", "canceled"):
            with pytest.raises(asyncpg.CheckViolationError, match="cannot go from completed"):
                await conn.execute(
                    "UPDATE agent_tasks SET status = $2 WHERE task_id = $1",
                    task["task_id"],
                    status,
                )
        with pytest.raises(asyncpg.CheckViolationError, match="cannot go from nothing"):
            await conn.execute(
                "INSERT INTO agent_tasks (agent_name, kind, input, created_by, status)"
                " VALUES ('Echo_Agent', 'agent_call', '{}', 'psql', 'completed')"
            )
        queued = await conn.fetchval(
            "INSERT INTO agent_tasks (agent_name, kind, input, created_by, scheduled_at)"
            " VALUES ('Echo_Agent', 'agent_call', '{}', 'psql', now() + interval '1 hour')"
            " RETURNING task_id"
        )
        await conn.execute("UPDATE agent_tasks SET status = 'canceled' WHERE task_id = $1", queued)
        with pytest.raises(asyncpg.CheckViolationError, match="cannot go from canceled"):
            await conn.execute(
                "UPDATE agent_tasks SET status = 'working' WHERE task_id = $1", queued
            )
        status = await conn.fetchval(
            "SELECT status FROM agent_tasks WHERE task_id = $1", task["task_id"]
        )
        history = await conn.fetchval(
            "SELECT count(*) FROM agent_task_transitions WHERE task_id = $1", queued
        )
    finally:
        await conn.close()
    assert status == "completed"
    assert history == 2  # created, canceled


async def test_cancel_stops_a_running_attempt_and_is_final(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    agent.behaviour = "hang"
    await register(client, "Slow_Agent", agent)
    task = await submit(client, "Slow_Agent")
    service = service_of(client)
    for _ in range(200):
        if agent.requests:
            break
        await asyncio.sleep(0.02)
    assert service.running_count == 1
    canceled = await client.post(f"/v1/tasks/{task['task_id']}/cancel", params={"reason": "no"})
    assert canceled.status_code == 200, canceled.text
    assert canceled.json()["status"] == "canceled"
    assert service.running_count == 0
    body = assert_problem(await client.post(f"/v1/tasks/{task['task_id']}/cancel"), 409)
    assert body["status"] == 409
    detail = (await client.get(f"/v1/tasks/{task['task_id']}")).json()
    assert detail["transitions"][-1]["to_status"] == "canceled"
    assert detail["transitions"][-1]["reason"] == "no"
    assert detail["transitions"][-1]["actor"] == "admin"


async def test_the_endpoints_refuse_bad_requests_with_problems(
    client: httpx.AsyncClient, make_agent_client: Any, agent: AgentServer
) -> None:
    await register(client, "Echo_Agent", agent)
    missing = "0190d3f1-0000-7000-8000-000000000000"
    assert_problem(await client.get(f"/v1/tasks/{missing}"), 404)
    assert_problem(await client.post(f"/v1/tasks/{missing}/cancel"), 404)
    assert_problem(await client.get(f"/v1/sessions/{missing}/tasks"), 404)
    assert_problem(await client.post(f"/v1/dead-letters/{missing}/requeue"), 404)
    assert_problem(await client.delete(f"/v1/dead-letters/{missing}"), 404)
    assert_problem(await client.get("/v1/tasks/not-a-uuid"), 404)
    assert_problem(await client.post("/v1/tasks", json={"agent_name": "Nobody", "input": {}}), 404)
    bad_priority = await client.post(
        "/v1/tasks", json={"agent_name": "Echo_Agent", "input": {}, "priority": 11}
    )
    assert bad_priority.status_code in (400, 422)
    assert bad_priority.headers["content-type"].startswith("application/problem+json")
    no_input = await client.post("/v1/tasks", json={"agent_name": "Echo_Agent"})
    assert no_input.status_code in (400, 422)
    # Instants outside what Python holds in UTC, and a number of seconds: 422, never a 500.
    for when in ("9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+01:00", 0):
        late = await client.post(
            "/v1/tasks", json={"agent_name": "Echo_Agent", "input": {}, "scheduled_at": when}
        )
        assert_problem(late, 422)
    unknown_session = await client.post(
        "/v1/tasks", json={"agent_name": "Echo_Agent", "input": {}, "session_id": missing}
    )
    assert_problem(unknown_session, 404)
    bad_state = await client.get("/v1/dead-letters", params={"state": "lost"})
    assert bad_state.status_code == 400
    assert_problem(await client.get("/v1/dead-letters", params={"cursor": "garbage"}), 400)

    plain = await make_agent_client("Plain_Agent")
    async with plain:
        assert_problem(await plain.get("/v1/dead-letters"), 403)
        mine = await plain.post("/v1/tasks", json={"agent_name": "Echo_Agent", "input": {}})
        assert mine.status_code == 201, mine.text
        assert (await plain.get(f"/v1/tasks/{mine.json()['task_id']}")).status_code == 200
        admins = await submit(client, "Echo_Agent")
        assert_problem(await plain.get(f"/v1/tasks/{admins['task_id']}"), 404)
        assert_problem(await plain.post(f"/v1/tasks/{admins['task_id']}/cancel"), 404)


async def test_a_session_lists_its_tasks_newest_first_in_pages(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await register(client, "Echo_Agent", agent)
    session = await create_session(client)
    ids = [
        (await submit(client, "Echo_Agent", session_id=session["session_id"]))["task_id"]
        for _ in range(3)
    ]
    first = (
        await client.get(f"/v1/sessions/{session['session_id']}/tasks", params={"limit": 2})
    ).json()
    assert [t["task_id"] for t in first["items"]] == ids[::-1][:2]
    rest = (
        await client.get(
            f"/v1/sessions/{session['session_id']}/tasks",
            params={"limit": 2, "cursor": first["next_cursor"]},
        )
    ).json()
    assert [t["task_id"] for t in rest["items"]] == ids[:1]
    assert rest["next_cursor"] is None
    for task_id in ids:
        await finished(client, task_id)


async def test_erasing_a_user_deletes_their_tasks_and_dead_letters(
    client: httpx.AsyncClient, database_url: str
) -> None:
    dead = await AgentServer(status=404, reply={}).start()
    try:
        await register(client, "Gone_Agent", dead)
        session = await create_session(client)
        in_session = await submit(client, "Gone_Agent", session_id=session["session_id"])
        for_user = await submit(client, "Gone_Agent", user_id=session["user_id"])
        bystander = await submit(client, "Gone_Agent", user_id="someone-else")
        for task in (in_session, for_user, bystander):
            await finished(client, task["task_id"])
    finally:
        await dead.stop()
    erased = await client.delete(f"/v1/users/{session['user_id']}")
    assert erased.status_code == 200, erased.text
    deleted = erased.json()["deleted"]
    assert deleted["agent_tasks"] == 2
    assert deleted["dead_letters"] == 2
    conn = await asyncpg.connect(database_url)
    try:
        left = await conn.fetch("SELECT task_id::text FROM agent_tasks")
        letters = await conn.fetchval("SELECT count(*) FROM dead_letters")
    finally:
        await conn.close()
    assert [row["task_id"] for row in left] == [bystander["task_id"]]
    assert letters == 1


async def test_run_here_starts_at_once_and_wait_and_on_finished_see_the_result(
    client: httpx.AsyncClient,
) -> None:
    service = service_of(client)
    finished_hooks: list[Task] = []
    release = asyncio.Event()

    async def handle(task: Task) -> dict[str, Any]:
        if task.input.get("slow"):
            await release.wait()
        return {"echo": task.input}

    async def on_finished(task: Task) -> None:
        finished_hooks.append(task)

    service.register("classify", handle, on_finished)
    fast = await service.submit(
        NewTask(agent_name="Any_Agent", kind="classify", input={"n": 1}), "test", run_here=True
    )
    assert fast.status == "working"
    assert fast.attempt == 1
    assert fast.lease_owner == service.replica
    done = await service.wait(fast.task_id, 5)
    assert done.status == "completed"
    assert done.result == {"echo": {"n": 1}}

    slow = await service.submit(
        NewTask(agent_name="Any_Agent", kind="classify", input={"slow": True}),
        "test",
        run_here=True,
    )
    waited = await service.wait(slow.task_id, 0.1)
    assert waited.status == "working"
    detached = await service.detach(slow.task_id)
    assert detached.detached is True
    release.set()
    later = await service.wait(slow.task_id, 5)
    assert later.status == "completed"
    assert await service.detach(slow.task_id) == later  # terminal: the row as it is
    await until(lambda: len(finished_hooks) == 2)
    assert [(t.task_id, t.detached) for t in finished_hooks] == [
        (fast.task_id, False),
        (slow.task_id, True),
    ]


async def test_a_delay_gives_the_attempt_back(client: httpx.AsyncClient) -> None:
    service = service_of(client)
    calls: list[int] = []

    async def handle(task: Task) -> dict[str, Any]:
        calls.append(task.attempt)
        if len(calls) < 3:
            raise TaskDelayed(datetime.now(UTC) + timedelta(milliseconds=100), "circuit open")
        return {}

    service.register("classify", handle)
    task = await service.submit(NewTask(agent_name="Any", kind="classify", input={}), "test")
    done = await service.wait(task.task_id, 10)
    assert done.status == "completed"
    assert calls == [1, 1, 1]
    assert done.attempt == 1


async def test_an_open_breaker_delays_the_task_without_burning_an_attempt(
    client: httpx.AsyncClient,
) -> None:
    flaky = await AgentServer(behaviour="fail", heal_after=1).start()
    try:
        response = await client.post(
            "/v1/agents",
            json={
                "name": "Fragile_Agent",
                "url": flaky.url,
                "timeout_ms": 2000,
                "fail_max": 1,
                "reset_timeout_ms": 1500,
            },
        )
        assert response.status_code == 201, response.text
        task = await submit(client, "Fragile_Agent")
        detail = await finished(client, task["task_id"])
    finally:
        await flaky.stop()
    assert detail["task"]["status"] == "completed"
    # One failure opened the circuit; the retry (due within 0.2 s) found it open and was
    # delayed until it could probe, which succeeded: two calls, two attempts.
    assert len(flaky.requests) == 2
    assert detail["task"]["attempt"] == 2
    reasons = [step["reason"] for step in detail["transitions"]]
    assert any(reason.startswith("delayed: circuit of Fragile_Agent is open") for reason in reasons)


async def test_a_task_keeps_the_trace_of_its_request_and_continues_it(
    client: httpx.AsyncClient, agent: AgentServer
) -> None:
    await register(client, "Echo_Agent", agent)
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    response = await client.post(
        "/v1/tasks",
        json={"agent_name": "Echo_Agent", "input": {}},
        headers={"traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"},
    )
    assert response.status_code == 201, response.text
    task = response.json()
    assert task["trace_id"] == trace_id
    assert task["traceparent"].startswith(f"00-{trace_id}-")
    await finished(client, task["task_id"])
    assert agent.headers[0]["traceparent"].startswith(f"00-{trace_id}-")


async def until(predicate: Any, seconds: float = 10) -> None:
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached in time")


async def test_a_malformed_answer_is_retried(client: httpx.AsyncClient) -> None:
    babbling = await AgentServer(behaviour="garbage", heal_after=1).start()
    try:
        await register(client, "Babbling_Agent", babbling)
        task = await submit(client, "Babbling_Agent")
        detail = await finished(client, task["task_id"])
    finally:
        await babbling.stop()
    assert detail["task"]["status"] == "completed"
    assert detail["task"]["attempt"] == 2
    assert "malformed" in detail["transitions"][2]["reason"]
