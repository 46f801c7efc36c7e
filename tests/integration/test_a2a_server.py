"""Switchboard as an A2A 1.0 server, spoken to by the a2a-sdk's own client over a real
uvicorn server on 127.0.0.1, with real agents (tests/agent_server.py) downstream: the card,
SendMessage (explicit and implicit continuation), SendStreamingMessage, GetTask, ListTasks,
CancelTask, SubscribeToTask after a dropped stream, push configs and their delivery, the
JSON-RPC errors and the 401 of a call without a key."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import orjson
import pytest
from a2a.client import ClientConfig, create_client
from a2a.client.client import Client
from a2a.helpers import get_artifact_text, get_message_text, new_text_message
from a2a.types import (
    AuthenticationInfo,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
    TaskState,
)
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from litestar import Litestar

from app.asgi import create_app
from app.auth.ratelimit import RateLimiter
from app.clock import SystemClock
from app.db.pool import Database
from app.events.service import EventService
from app.events.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from app.outbound.policy import OutboundPolicy
from app.outbound.transport import outbound_client
from app.settings import (
    CoordinationSettings,
    DatabaseSettings,
    SchedulerSettings,
    Settings,
    TaskSettings,
)
from tests.a2a_agent import A2AAgent
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED
from tests.integration.helpers import (
    drop_the_connection_at_the_seal,
    end_the_task_read_after_the_turn,
    eventually,
    seal_drops,
    served,
    store_content_a_rule_now_refuses,
)

PLAN = "Please make a plan for my savings"
PLAN_AGENT = "Make_Plan_Agent"
ANSWER = "Here is your plan"


@pytest.fixture
def settings() -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=8),
        coordination=CoordinationSettings(rules_cache_seconds=0, wait_default_seconds=5),
        # One attempt of the planning agent at a time: a second message's task queues.
        tasks=TaskSettings(
            poll_interval=0.1,
            retry_base_seconds=0.05,
            retry_cap_seconds=0.1,
            agent_concurrency={PLAN_AGENT: 1},
        ),
        outbound=LOOPBACK_ALLOWED,
    )


@pytest.fixture
def app(settings: Settings, database_url: str) -> Litestar:
    return create_app(
        settings,
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
        run_worker=True,
    )


@pytest.fixture
async def base_url(app: Litestar) -> AsyncIterator[str]:
    """Switchboard served by uvicorn on 127.0.0.1."""
    async with served(app) as url:
        yield url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    """Plain HTTP with the admin key, for setting agents up and raw JSON-RPC."""
    async with httpx.AsyncClient(
        base_url=base_url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    ) as client:
        yield client


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    server.reply = {"success": True, "output_data": {"response": ANSWER, "plan": ["save"]}}
    yield server
    await server.stop()


@pytest.fixture
async def a2a(base_url: str, http: httpx.AsyncClient) -> AsyncIterator[Client]:
    """The a2a-sdk's client, made from Switchboard's card, streaming."""
    async with httpx.AsyncClient(
        headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30
    ) as transport:
        client = await create_client(base_url, ClientConfig(httpx_client=transport))
        yield client
        await client.close()


@pytest.fixture
async def a2a_blocking(base_url: str) -> AsyncIterator[Client]:
    """The same client, non-streaming (SendMessage)."""
    async with httpx.AsyncClient(headers={"X-API-Key": ADMIN_KEY}, timeout=30) as transport:
        client = await create_client(
            base_url, ClientConfig(httpx_client=transport, streaming=False)
        )
        yield client
        await client.close()


async def route_to(http: httpx.AsyncClient, agent: AgentServer) -> None:
    response = await http.patch(f"/v1/agents/{PLAN_AGENT}", json={"url": agent.url})
    assert response.status_code == 200, response.text


async def new_session(http: httpx.AsyncClient) -> str:
    user = await http.post("/v1/users", json={"external_ref": f"u-{uuid.uuid4()}"})
    assert user.status_code == 201, user.text
    session = await http.post("/v1/sessions", json={"user_id": user.json()["id"]})
    assert session.status_code == 201, session.text
    return str(session.json()["session_id"])


def message(text: str, context_id: str | None = None, **metadata: Any) -> SendMessageRequest:
    msg = new_text_message(text, context_id=context_id, role=Role.ROLE_USER)
    if metadata:
        msg.metadata.update(metadata)
    return SendMessageRequest(message=msg)


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    return [event async for event in stream]


class Gate:
    """Holds the agent's answer until opened."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.entered = asyncio.Event()

    async def __call__(self) -> None:
        self.entered.set()
        await self.opened.wait()


async def test_the_card_says_what_works_and_the_sdk_client_is_built_from_it(
    base_url: str, http: httpx.AsyncClient, agent: AgentServer
) -> None:
    card = {
        "name": PLAN_AGENT,
        "url": agent.url,
        "version": "1",
        "skills": [{"id": "retirement", "name": "Retirement", "tags": ["pension"]}],
    }
    published = await http.post(f"/v1/agents/{PLAN_AGENT}/card", json=card)
    assert published.status_code in (200, 201), published.text
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        for path in ("/.well-known/agent-card.json", "/.well-known/agent.json"):
            response = await anonymous.get(path)
            assert response.status_code == 200
            document = response.json()
            assert document["supportedInterfaces"] == [
                {"url": f"{base_url}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": v}
                for v in ("1.0", "0.3")
            ]
            assert document["capabilities"]["streaming"] is True
            assert document["capabilities"]["pushNotifications"] is True
            assert set(document["securitySchemes"]) == {"bearer", "apiKey"}
            assert document["securitySchemes"]["apiKey"]["apiKeySecurityScheme"]["name"] == (
                "X-API-Key"
            )
            skills = {s["id"] for s in document["skills"]}
            assert {"coordinate_message", "retirement"} <= skills
            # What A2A 0.3 clients read, added by the SDK's serializer.
            assert document["url"] == f"{base_url}/a2a"
            assert (document["preferredTransport"], document["protocolVersion"]) == (
                "JSONRPC",
                "0.3",
            )


async def test_send_message_with_a_context_is_a_coordinator_message_answered_by_its_task(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)

    [event] = await collect(a2a_blocking.send_message(message(PLAN, context_id=sid)))

    task = event.task
    assert task.context_id == sid
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [m.role for m in task.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    assert get_message_text(task.history[0]) == PLAN
    assert get_message_text(task.history[1]) == ANSWER
    [artifact] = task.artifacts
    assert get_artifact_text(artifact) == ANSWER
    assert MessageToDict(artifact.parts[1].data)["plan"] == ["save"]
    # The agent got the seed's request, and the task is Switchboard's durable task.
    assert agent.requests[0]["input_data"]["message"] == PLAN
    stored = (await http.get(f"/v1/tasks/{task.id}")).json()
    stored = stored.get("task", stored)
    assert (stored["status"], stored["session_id"], stored["kind"]) == ("completed", sid, "message")
    decisions = (await http.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert decisions[0]["task_id"] == task.id

    # GetTask reads the same task; historyLength keeps the latest messages.
    got = await a2a_blocking.get_task(GetTaskRequest(id=task.id, history_length=1))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED
    assert [get_message_text(m) for m in got.history] == [ANSWER]
    with pytest.raises(TaskNotFoundError):
        await a2a_blocking.get_task(GetTaskRequest(id=str(uuid.uuid4())))
    with pytest.raises(TaskNotFoundError):
        await a2a_blocking.get_task(GetTaskRequest(id="not-a-task"))


async def test_without_a_context_the_users_recent_session_continues(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    ref = f"caller-{uuid.uuid4()}"

    [first] = await collect(a2a_blocking.send_message(message(PLAN, user_ref=ref)))
    [second] = await collect(a2a_blocking.send_message(message(PLAN, user_ref=ref)))

    assert first.task.context_id == second.task.context_id
    assert first.task.id != second.task.id
    session = (await http.get(f"/v1/sessions/{first.task.context_id}")).json()
    user = (await http.get(f"/v1/users/{session['user_id']}")).json()
    assert user["external_ref"] == ref

    # Nobody named: a clear InvalidParams, and nothing is written.
    with pytest.raises(InvalidParamsError, match="user_id"):
        await collect(a2a_blocking.send_message(message(PLAN)))
    with pytest.raises(InvalidParamsError):
        await collect(a2a_blocking.send_message(message(PLAN, context_id="nope")))
    with pytest.raises(InvalidParamsError):
        await collect(a2a_blocking.send_message(message(PLAN, context_id=str(uuid.uuid4()))))


async def test_parts_other_than_plain_text_are_refused_before_anything_is_written(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    refused = {
        "data": Part(data=ParseDict({"plan": ["save"]}, Value())),
        "file": Part(url="https://example.com/plan.pdf", media_type="application/pdf"),
        "markdown": Part(text="# plan", media_type="text/markdown"),
    }
    for name, part in refused.items():
        request = message(PLAN, context_id=sid)
        request.message.parts.append(part)
        with pytest.raises(ContentTypeNotSupportedError, match="Part 1 is a"):
            await collect(a2a_blocking.send_message(request))
        assert agent.requests == [], name
    session = (await http.get(f"/v1/sessions/{sid}")).json()
    assert session["version"] == 1
    assert (await http.get(f"/v1/sessions/{sid}/tasks")).json()["items"] == []

    # Plain text with a charset parameter is plain text.
    request = message(PLAN, context_id=sid)
    request.message.parts[0].media_type = "text/plain; charset=utf-8"
    [event] = await collect(a2a_blocking.send_message(request))
    assert event.task.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_message_no_agent_task_answers_is_an_a2a_message(
    http: httpx.AsyncClient, a2a_blocking: Client
) -> None:
    sid = await new_session(http)
    # The planning agent has no URL in the seed data: its fallback answers at once.
    await http.patch(f"/v1/agents/{PLAN_AGENT}", json={"url": None})

    [event] = await collect(a2a_blocking.send_message(message(PLAN, context_id=sid)))

    assert event.HasField("message")
    assert event.message.context_id == sid
    assert event.message.role == Role.ROLE_AGENT
    assert get_message_text(event.message)
    assert MessageToDict(event.message.metadata)["degraded"] is True


async def test_a_resent_message_is_answered_once_under_the_clients_message_id(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    """A client that lost the answer resends the message (same messageId, same context):
    it gets the first message's task, the agent is called once, and the task's history
    carries the client's messageId. The same messageId with other content is refused; a
    Message answer (no agent task) is answered again as it was."""
    await route_to(http, agent)
    sid = await new_session(http)
    request = message(PLAN, context_id=sid)
    sent_id = request.message.message_id
    assert sent_id

    [first] = await collect(a2a_blocking.send_message(request))
    [again] = await collect(a2a_blocking.send_message(request))

    assert again.task.id == first.task.id
    assert again.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(agent.requests) == 1
    assert (await http.get(f"/v1/sessions/{sid}/tasks")).json()["items"][0]["task_id"] == (
        first.task.id
    )
    assert len((await http.get(f"/v1/sessions/{sid}/tasks")).json()["items"]) == 1
    assert first.task.history[0].message_id == sent_id
    assert again.task.history[0].message_id == sent_id
    got = await a2a_blocking.get_task(GetTaskRequest(id=first.task.id))
    assert got.history[0].message_id == sent_id
    assert get_message_text(got.history[0]) == PLAN

    other = message("Something else entirely", context_id=sid)
    other.message.message_id = sent_id
    with pytest.raises(InvalidParamsError, match="messageId was already sent"):
        await collect(a2a_blocking.send_message(other))
    assert len(agent.requests) == 1

    await http.patch(f"/v1/agents/{PLAN_AGENT}", json={"url": None})
    plain = message(PLAN, context_id=sid)
    [answered] = await collect(a2a_blocking.send_message(plain))
    decided = (await http.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    [replayed] = await collect(a2a_blocking.send_message(plain))
    assert answered.HasField("message")
    assert MessageToDict(replayed.message) == MessageToDict(answered.message)
    assert (await http.get(f"/v1/sessions/{sid}/decisions")).json()["items"] == decided


async def test_streaming_shows_the_task_working_then_its_answer(
    http: httpx.AsyncClient, a2a: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    gate = Gate()
    agent.before_reply = gate

    events: list[StreamResponse] = []

    async def read() -> None:
        async for event in a2a.send_message(message(PLAN, context_id=sid)):
            events.append(event)
            if event.HasField("task"):
                await gate.entered.wait()
                await asyncio.sleep(0.3)  # a poll or two while the agent works
                gate.opened.set()

    await asyncio.wait_for(read(), 15)

    assert events[0].HasField("task")
    assert events[0].task.context_id == sid
    # Submitted to run here, its attempt started at once.
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states == [TaskState.TASK_STATE_COMPLETED]
    [artifact] = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert artifact.task_id == events[0].task.id
    assert get_artifact_text(artifact.artifact) == ANSWER
    assert get_message_text(events[-1].status_update.status.message) == ANSWER

    # The answer reached the session the way a 202's does (the completion hook).
    async def applied() -> bool:
        session = (await http.get(f"/v1/sessions/{sid}")).json()
        return bool(session["agent_sequence"]) and (
            session["agent_sequence"][-1]["status"] == "completed"
        )

    await eventually(applied)


async def test_a_dropped_stream_is_resumed_with_subscribe(
    http: httpx.AsyncClient, a2a: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    gate = Gate()
    agent.before_reply = gate

    stream = a2a.send_message(message(PLAN, context_id=sid))
    first = await anext(stream)
    await stream.aclose()  # the connection drops while the agent works
    task_id = first.task.id
    await gate.entered.wait()

    resumed: list[StreamResponse] = []

    async def read() -> None:
        async for event in a2a.subscribe(SubscribeToTaskRequest(id=task_id)):
            resumed.append(event)
            if event.HasField("task"):
                gate.opened.set()

    await asyncio.wait_for(read(), 15)

    assert resumed[0].task.id == task_id
    assert resumed[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert resumed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert any(e.HasField("artifact_update") for e in resumed)
    assert len(agent.requests) == 1  # the drop did not resend the message

    # Over: nothing to subscribe to, GetTask reads it.
    with pytest.raises(UnsupportedOperationError):
        await collect(a2a.subscribe(SubscribeToTaskRequest(id=task_id)))
    with pytest.raises(TaskNotFoundError):
        await collect(a2a.subscribe(SubscribeToTaskRequest(id=str(uuid.uuid4()))))


async def test_cancel_stops_a_working_task_once(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    gate = Gate()
    agent.before_reply = gate
    request = message(PLAN, context_id=sid)
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))

    [event] = await collect(a2a_blocking.send_message(request))
    assert event.task.status.state in (
        TaskState.TASK_STATE_SUBMITTED,
        TaskState.TASK_STATE_WORKING,
    )
    await gate.entered.wait()

    canceled = await a2a_blocking.cancel_task(CancelTaskRequest(id=event.task.id))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    stored = (await http.get(f"/v1/tasks/{event.task.id}")).json()
    assert stored.get("task", stored)["status"] == "canceled"
    with pytest.raises(TaskNotCancelableError):
        await a2a_blocking.cancel_task(CancelTaskRequest(id=event.task.id))
    with pytest.raises(TaskNotFoundError):
        await a2a_blocking.cancel_task(CancelTaskRequest(id=str(uuid.uuid4())))
    gate.opened.set()


async def test_list_tasks_pages_by_context_and_state(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    other = await new_session(http)
    ids = []
    for _ in range(3):
        [event] = await collect(a2a_blocking.send_message(message(PLAN, context_id=sid)))
        ids.append(event.task.id)
    await collect(a2a_blocking.send_message(message(PLAN, context_id=other)))

    first = await a2a_blocking.list_tasks(ListTasksRequest(context_id=sid, page_size=2))
    assert [t.id for t in first.tasks] == ids[::-1][:2]
    assert first.total_size == 3
    assert first.next_page_token
    assert not first.tasks[0].artifacts  # only with includeArtifacts
    rest = await a2a_blocking.list_tasks(
        ListTasksRequest(
            context_id=sid, page_size=2, page_token=first.next_page_token, include_artifacts=True
        )
    )
    assert [t.id for t in rest.tasks] == ids[:1]
    assert not rest.next_page_token
    assert get_artifact_text(rest.tasks[0].artifacts[0]) == ANSWER

    everything = await a2a_blocking.list_tasks(
        ListTasksRequest(status=TaskState.TASK_STATE_COMPLETED, history_length=0)
    )
    assert everything.total_size == 4
    assert all(not t.history for t in everything.tasks)
    none = await a2a_blocking.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_CANCELED))
    assert (list(none.tasks), none.total_size) == ([], 0)
    with pytest.raises(InvalidParamsError):
        await a2a_blocking.list_tasks(ListTasksRequest(page_token="garbage"))


async def test_an_agent_key_lists_only_its_own_tasks(
    base_url: str, http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    await collect(a2a_blocking.send_message(message(PLAN, context_id=sid)))
    created = await http.post("/v1/agents", json={"name": "a2a_caller"})
    assert created.status_code == 201, created.text
    async with httpx.AsyncClient(
        headers={"X-API-Key": created.json()["api_key"]}, timeout=30
    ) as transport:
        caller = await create_client(
            base_url, ClientConfig(httpx_client=transport, streaming=False)
        )
        mine = await caller.list_tasks(ListTasksRequest())
        assert (list(mine.tasks), mine.total_size) == ([], 0)
        # A session's tasks are readable by every key (as GET /v1/sessions/{id}/tasks).
        theirs = await caller.list_tasks(ListTasksRequest(context_id=sid))
        assert theirs.total_size == 1
        [event] = await collect(caller.send_message(message(PLAN, context_id=sid)))
        mine = await caller.list_tasks(ListTasksRequest())
        assert [t.id for t in mine.tasks] == [event.task.id]
        await caller.close()


async def test_the_extended_card_is_not_offered(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    # The card says there is no extended card: the client keeps the public one, and a
    # caller asking anyway gets the protocol's error.
    card = await a2a_blocking.get_extended_agent_card(GetExtendedAgentCardRequest())
    assert (card.name, card.capabilities.extended_agent_card) == ("Switchboard", False)
    asked = await http.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetExtendedAgentCard", "params": {}},
        headers={"A2A-Version": "1.0"},
    )
    assert (
        asked.json()["error"]["code"]
        == JSON_RPC_ERROR_CODE_MAP[ExtendedAgentCardNotConfiguredError]
    )


# -- push notifications ---------------------------------------------------------------

PUSH_TOKEN = "push-token-0123456789abcdef"


@pytest.fixture
async def events(database_url: str) -> AsyncIterator[EventService]:
    """The outbox's delivery, run by the test (the app's scheduler is off in tests)."""
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    outbound = OutboundPolicy(LOOPBACK_ALLOWED)
    async with outbound_client(outbound) as client:
        yield EventService(database, SystemClock(), SchedulerSettings(), client, outbound)
    await database.close()


@pytest.fixture
async def receiver() -> AsyncIterator[AgentServer]:
    """A real HTTP endpoint on 127.0.0.1 the push notifications go to."""
    server = await AgentServer().start()
    yield server
    await server.stop()


async def working_task(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer, gate: Gate
) -> str:
    """A task whose agent holds its answer until ``gate`` opens; its id."""
    agent.before_reply = gate
    await route_to(http, agent)
    sid = await new_session(http)
    request = message(PLAN, context_id=sid)
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    [event] = await collect(a2a_blocking.send_message(request))
    await asyncio.wait_for(gate.entered.wait(), 10)
    return str(event.task.id)


def pushed(receiver: AgentServer) -> list[StreamResponse]:
    """What the receiver got, each checked: the token, the authentication and the
    signature (keyed with the token)."""
    updates = []
    for body, headers in zip(receiver.bodies, receiver.headers, strict=True):
        assert headers["x-a2a-notification-token"] == PUSH_TOKEN
        assert headers["authorization"] == "Bearer receiver-credential"
        stamp = int(headers[TIMESTAMP_HEADER.lower()])
        assert headers[SIGNATURE_HEADER.lower()] == sign(PUSH_TOKEN, stamp, body)
        updates.append(ParseDict(orjson.loads(body), StreamResponse()))
    return updates


async def test_push_configs_get_the_tasks_signed_updates_until_deleted(
    http: httpx.AsyncClient,
    a2a_blocking: Client,
    agent: AgentServer,
    receiver: AgentServer,
    events: EventService,
) -> None:
    gate = Gate()
    task_id = await working_task(http, a2a_blocking, agent, gate)
    config = TaskPushNotificationConfig(
        task_id=task_id,
        id="hook",
        url=f"{receiver.url}/push",
        token=PUSH_TOKEN,
        authentication=AuthenticationInfo(scheme="Bearer", credentials="receiver-credential"),
    )
    created = await a2a_blocking.create_task_push_notification_config(config)
    assert created == config
    got = await a2a_blocking.get_task_push_notification_config(
        GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
    )
    assert got == config
    listed = await a2a_blocking.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    assert list(listed.configs) == [config]
    # A second config under the same id is refused.
    with pytest.raises(InvalidParamsError, match="already has"):
        await a2a_blocking.create_task_push_notification_config(config)

    gate.opened.set()

    async def completed() -> bool:
        await events.deliver_due()
        states = [u.status_update.status.state for u in pushed(receiver)]
        return TaskState.TASK_STATE_COMPLETED in states

    await eventually(completed)
    updates = pushed(receiver)
    assert {(u.status_update.task_id, u.status_update.context_id) for u in updates} == {
        (task_id, (await a2a_blocking.get_task(GetTaskRequest(id=task_id))).context_id)
    }
    assert updates[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED

    # A second task with a config of its own, deleted once the task has completed but
    # before the outbox ran: its pending deliveries go with it, and the first task's
    # config hears nothing of the second task.
    second = Gate()
    other = await working_task(http, a2a_blocking, agent, second)
    await a2a_blocking.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=other, id="hook", url=config.url, token=PUSH_TOKEN)
    )
    before = len(receiver.bodies)
    second.opened.set()

    async def other_completed() -> bool:
        task = await a2a_blocking.get_task(GetTaskRequest(id=other))
        return task.status.state == TaskState.TASK_STATE_COMPLETED

    await eventually(other_completed)
    await a2a_blocking.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=other, id="hook")
    )
    assert await events.deliver_due() == 0
    assert len(receiver.bodies) == before

    # Deleted: gone from the list, from get and from delete.
    await a2a_blocking.delete_task_push_notification_config(
        DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
    )
    listed = await a2a_blocking.list_task_push_notification_configs(
        ListTaskPushNotificationConfigsRequest(task_id=task_id)
    )
    assert list(listed.configs) == []
    with pytest.raises(InvalidParamsError, match="no push config"):
        await a2a_blocking.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )
    with pytest.raises(InvalidParamsError, match="no push config"):
        await a2a_blocking.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task_id, id="hook")
        )


async def test_push_configs_are_refused_for_unseen_tasks_and_refused_urls(
    base_url: str, http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    [event] = await collect(a2a_blocking.send_message(message(PLAN, context_id=sid)))
    task_id = event.task.id
    # The outbound policy's refusals (here the link-local metadata address) are
    # InvalidParams, as is a URL that is not http(s).
    for url in ("http://169.254.169.254/latest", "ftp://127.0.0.1/x"):
        with pytest.raises(InvalidParamsError, match="may not send push"):
            await a2a_blocking.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=task_id, url=url)
            )
    with pytest.raises(TaskNotFoundError):
        await a2a_blocking.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=str(uuid.uuid4()), url="http://127.0.0.1:9/x")
        )
    mine = await a2a_blocking.create_task_push_notification_config(
        TaskPushNotificationConfig(task_id=task_id, url="http://127.0.0.1:9/x")
    )
    assert mine.id  # given one
    # Its delivery target is not a subscriber: /v1/subscriptions neither lists nor deletes it.
    subscribers = await http.get("/v1/subscriptions")
    assert (subscribers.status_code, subscribers.json()) == (200, [])

    # An admin's task of no session is not the agent key's to see: nor are its configs.
    queued = await http.post(
        "/v1/tasks",
        json={
            "agent_name": PLAN_AGENT,
            "input": {"message": "later"},
            "scheduled_at": "2099-01-01T00:00:00Z",
        },
    )
    assert queued.status_code in (201, 202), queued.text
    body = queued.json()
    hidden = body.get("task", body)["task_id"]
    created = await http.post("/v1/agents", json={"name": "a2a_pusher"})
    assert created.status_code == 201, created.text
    async with httpx.AsyncClient(
        headers={"X-API-Key": created.json()["api_key"]}, timeout=30
    ) as transport:
        caller = await create_client(
            base_url, ClientConfig(httpx_client=transport, streaming=False)
        )
        with pytest.raises(TaskNotFoundError):
            await caller.create_task_push_notification_config(
                TaskPushNotificationConfig(task_id=hidden, url="http://127.0.0.1:9/x")
            )
        # The session's task it may see, but not the admin's config on it.
        listed = await caller.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task_id)
        )
        assert list(listed.configs) == []
        with pytest.raises(InvalidParamsError):
            await caller.delete_task_push_notification_config(
                DeleteTaskPushNotificationConfigRequest(task_id=task_id, id=mine.id)
            )
        await caller.close()

    # A message asking for pushes is refused before anything is written.
    request = message(PLAN, context_id=sid)
    request.configuration.task_push_notification_config.CopyFrom(mine)
    with pytest.raises(InvalidParamsError, match="CreateTaskPushNotificationConfig"):
        await collect(a2a_blocking.send_message(request))
    assert len(agent.requests) == 1


async def test_json_rpc_errors_and_auth_over_the_wire(
    base_url: str, http: httpx.AsyncClient
) -> None:
    v1 = {"A2A-Version": "1.0"}
    async with httpx.AsyncClient(base_url=base_url) as anonymous:
        refused = await anonymous.post(
            "/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
        )
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("application/problem+json")

    parse = await http.post("/a2a", content=b"{not json", headers=v1)
    assert parse.status_code == 200
    assert parse.json()["error"]["code"] == -32700
    invalid = await http.post("/a2a", json={"id": 2, "method": "GetTask"}, headers=v1)
    assert invalid.json()["error"]["code"] == -32600
    unknown = await http.post(
        "/a2a", json={"jsonrpc": "2.0", "id": 3, "method": "Nope", "params": {}}, headers=v1
    )
    assert (unknown.json()["id"], unknown.json()["error"]["code"]) == (3, -32601)
    params = await http.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": 5, "x": []}},
        headers=v1,
    )
    assert params.json()["error"]["code"] in (-32602, -32001)
    missing = await http.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 5, "method": "GetTask", "params": {"id": str(uuid.uuid4())}},
        headers=v1,
    )
    assert missing.json()["error"]["code"] == -32001
    # A 1.0 method without the A2A-Version header is a 0.3 call: the SDK refuses it.
    unversioned = await http.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": 6, "method": "GetTask", "params": {"id": "x"}},
    )
    assert unversioned.json()["error"]["code"] == -32009
    assert (await http.get("/a2a")).status_code == 405
    too_big = await http.post(
        "/a2a",
        content=b'{"jsonrpc": "2.0", "id": 7, "method": "GetTask", "params": {"id": "'
        + b"x" * 2_000_000
        + b'"}}',
        headers={**v1, "content-type": "application/json"},
    )
    assert too_big.json()["error"]["code"] == -32600


async def test_an_a2a_0_3_client_is_served_on_the_same_endpoint(
    http: httpx.AsyncClient, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    sent = await http.post(
        "/a2a",
        json={
            "jsonrpc": "2.0",
            "id": "m1",
            "method": "message/send",
            "params": {
                "message": {
                    "kind": "message",
                    "messageId": "m1",
                    "role": "user",
                    "contextId": sid,
                    "parts": [{"kind": "text", "text": PLAN}],
                }
            },
        },
    )
    assert sent.status_code == 200, sent.text
    result = sent.json()["result"]
    assert (result["kind"], result["contextId"]) == ("task", sid)
    assert result["status"]["state"] == "completed"
    got = await http.post(
        "/a2a",
        json={"jsonrpc": "2.0", "id": "g1", "method": "tasks/get", "params": {"id": result["id"]}},
    )
    assert got.json()["result"]["id"] == result["id"]


class Gates:
    """Holds the agent's n-th answer until the n-th gate opens."""

    def __init__(self, count: int) -> None:
        self.gates = [Gate() for _ in range(count)]
        self.calls = 0

    async def __call__(self) -> None:
        gate = self.gates[self.calls]
        self.calls += 1
        await gate()


async def test_a_queued_task_streams_submitted_working_and_completed(
    http: httpx.AsyncClient, a2a: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    gates = Gates(2)
    agent.before_reply = gates
    first_stream = a2a.send_message(message(PLAN, context_id=sid))
    first = await anext(first_stream)
    await gates.gates[0].entered.wait()

    # The agent is at its limit (one attempt): the second message's task waits its turn.
    events: list[StreamResponse] = []
    seen_working = asyncio.Event()

    async def read() -> None:
        async for event in a2a.send_message(message(PLAN, context_id=sid)):
            events.append(event)
            if event.status_update.status.state == TaskState.TASK_STATE_WORKING:
                seen_working.set()

    reading = asyncio.create_task(read())
    await eventually(lambda: asyncio.sleep(0, bool(events)))
    assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    gates.gates[0].opened.set()  # the first answers; the worker claims the second
    await asyncio.wait_for(seen_working.wait(), 10)
    await gates.gates[1].entered.wait()
    gates.gates[1].opened.set()
    await asyncio.wait_for(reading, 10)

    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    assert events[-1].status_update.task_id == events[0].task.id != first.task.id
    remaining = [event async for event in first_stream]
    assert remaining[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a2a_calls_spend_the_keys_rate_limit(
    base_url: str, app: Litestar, http: httpx.AsyncClient
) -> None:
    app.state.rate_limiter = RateLimiter(0.001, 1)
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    headers = {"A2A-Version": "1.0"}
    assert (await http.post("/a2a", json=body, headers=headers)).status_code == 200
    limited = await http.post("/a2a", json=body, headers=headers)
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1


async def test_a_stream_on_another_replica_follows_the_task(
    settings: Settings,
    database_url: str,
    http: httpx.AsyncClient,
    a2a: Client,
    agent: AgentServer,
) -> None:
    """The stream reads the durable task, not the process running it: a task run by one
    replica is followed to its end by a client of another on the same database."""
    await route_to(http, agent)
    sid = await new_session(http)
    gate = Gate()
    agent.before_reply = gate
    stream = a2a.send_message(message(PLAN, context_id=sid))
    first = await anext(stream)
    await stream.aclose()
    await gate.entered.wait()

    other = create_app(
        settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False
    )
    async with (
        served(other) as other_url,
        httpx.AsyncClient(headers={"Authorization": f"Bearer {ADMIN_KEY}"}) as transport,
    ):
        elsewhere = await create_client(other_url, ClientConfig(httpx_client=transport))
        events: list[StreamResponse] = []

        async def read() -> None:
            async for event in elsewhere.subscribe(SubscribeToTaskRequest(id=first.task.id)):
                events.append(event)
                if event.HasField("task"):
                    gate.opened.set()

        await asyncio.wait_for(read(), 15)
        await elsewhere.close()
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert get_message_text(events[-1].status_update.status.message) == ANSWER


async def test_a_message_to_a_task_goes_to_its_session_unless_the_task_is_over(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    await route_to(http, agent)
    sid = await new_session(http)
    gate = Gate()
    agent.before_reply = gate
    request = message(PLAN, context_id=sid)
    request.configuration.return_immediately = True
    [working] = await collect(a2a_blocking.send_message(request))
    await gate.entered.wait()

    # A task of one session named with another's contextId: refused, nothing sent.
    mismatched = message(PLAN, context_id=await new_session(http))
    mismatched.message.task_id = working.task.id
    with pytest.raises(InvalidParamsError, match="not of context"):
        await collect(a2a_blocking.send_message(mismatched))
    assert len(agent.requests) == 1  # the working task's own
    gate.opened.set()

    follow_up = message(PLAN)
    follow_up.message.task_id = working.task.id
    [event] = await collect(a2a_blocking.send_message(follow_up))
    assert event.task.context_id == sid  # no contextId, no user: the task's session

    done = await a2a_blocking.get_task(GetTaskRequest(id=working.task.id))
    assert done.status.state == TaskState.TASK_STATE_COMPLETED
    with pytest.raises(UnsupportedOperationError, match="completed"):
        await collect(a2a_blocking.send_message(follow_up))


async def test_a_task_of_no_session_takes_no_messages(
    http: httpx.AsyncClient, a2a_blocking: Client
) -> None:
    queued = await http.post(
        "/v1/tasks",
        json={
            "agent_name": PLAN_AGENT,
            "input": {"message": "later"},
            "scheduled_at": "2099-01-01T00:00:00Z",
        },
    )
    assert queued.status_code in (201, 202), queued.text
    body = queued.json()
    task_id = body.get("task", body)["task_id"]
    # It is an A2A task too: a context of its own, its input as the request.
    task = await a2a_blocking.get_task(GetTaskRequest(id=task_id))
    assert (task.context_id, task.status.state) == (task_id, TaskState.TASK_STATE_SUBMITTED)
    assert MessageToDict(task.history[0].parts[0].data) == {"message": "later"}

    follow_up = message(PLAN)
    follow_up.message.task_id = task_id
    with pytest.raises(InvalidParamsError, match="no session"):
        await collect(a2a_blocking.send_message(follow_up))


async def test_a2a_in_and_out_a_downstream_question_ends_the_stream_and_the_reply_continues(
    http: httpx.AsyncClient, a2a: Client, a2a_blocking: Client
) -> None:
    """An A2A client talks to Switchboard, which calls a real a2a-sdk agent that asks a
    question first: the client's stream ends in input-required with the question, and its
    reply (naming the task) completes the same task."""
    downstream = await A2AAgent(behaviour="ask").start()
    try:
        patched = await http.patch(f"/v1/agents/{PLAN_AGENT}", json={"url": downstream.url})
        assert patched.status_code == 200, patched.text
        assert (await http.post(f"/v1/agents/{PLAN_AGENT}/discover")).status_code == 200
        sid = await new_session(http)

        events = await asyncio.wait_for(
            collect(a2a.send_message(message(PLAN, context_id=sid))), 15
        )
        task_id = events[0].task.id
        # The agent may have asked before the first event was written: then the task
        # itself is the stream's last word.
        last = (
            events[-1].status_update.status
            if events[-1].HasField("status_update")
            else events[-1].task.status
        )
        assert last.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert get_message_text(last.message) == downstream.question
        assert not any(e.HasField("artifact_update") for e in events)
        waiting = await a2a_blocking.get_task(GetTaskRequest(id=task_id))
        assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
        # A subscription to a task waiting for the user starts and ends where it is.
        resumed = await collect(a2a.subscribe(SubscribeToTaskRequest(id=task_id)))
        assert [e.task.status.state for e in resumed] == [TaskState.TASK_STATE_INPUT_REQUIRED]

        reply = message("January, thanks")
        reply.message.task_id = task_id
        [answered] = await collect(a2a_blocking.send_message(reply))
        assert answered.task.id == task_id
        assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
        assert get_artifact_text(answered.task.artifacts[0]) == downstream.answer
        assert downstream.received[-1].text == "January, thanks"
    finally:
        await downstream.stop()


# -- a resend is answered once ---------------------------------------------------------


async def send_raw(http: httpx.AsyncClient, request: SendMessageRequest) -> dict[str, Any]:
    """``SendMessage`` as raw JSON-RPC: the answer's ``result`` or ``error`` (code, message
    and data, which the SDK's client does not show)."""
    response = await http.post(
        "/a2a",
        json={
            "jsonrpc": "2.0",
            "id": str(uuid.uuid4()),
            "method": "SendMessage",
            "params": MessageToDict(request),
        },
        headers={"A2A-Version": "1.0"},
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def error_data(answer: dict[str, Any]) -> dict[str, Any]:
    """A JSON-RPC error's data as the SDK writes it: Switchboard's status and extensions
    are the metadata of a ``google.rpc.ErrorInfo``."""
    [info] = [d for d in answer["error"]["data"] if d["@type"].endswith("rpc.ErrorInfo")]
    metadata: dict[str, Any] = info["metadata"]
    return metadata


async def decisions(http: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    """The session's coordinator decisions: one per turn written."""
    response = await http.get(f"/v1/sessions/{sid}/decisions")
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


async def test_a_resend_while_the_first_is_still_coordinated_is_refused_as_in_progress(
    http: httpx.AsyncClient, a2a_blocking: Client, agent: AgentServer
) -> None:
    """The first message holds its messageId's key while its agent works: a resend then is
    -32600 with data.status 409 (the REST API's in-progress 409: send it again shortly),
    and nothing is coordinated for it; once the first is answered, a resend gets that
    answer."""
    await route_to(http, agent)
    sid = await new_session(http)
    gate = Gate()
    agent.before_reply = gate
    request = message(PLAN, context_id=sid)
    first = asyncio.create_task(collect(a2a_blocking.send_message(request)))
    await asyncio.wait_for(gate.entered.wait(), 10)

    try:
        resent = await send_raw(http, request)
    finally:
        gate.opened.set()
    [answered] = await asyncio.wait_for(first, 15)

    assert resent["error"]["code"] == -32600
    assert error_data(resent)["status"] == 409
    assert "still being answered in this context" in resent["error"]["message"]
    assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
    again = await send_raw(http, request)
    assert again["result"]["task"]["id"] == answered.task.id
    assert len(agent.requests) == 1
    assert len(await decisions(http, sid)) == 1


async def test_a_refused_message_resent_gets_the_same_refusal(
    http: httpx.AsyncClient, agent: AgentServer, database_url: str
) -> None:
    """A refusal a resend cannot change (422: the session holds content stored before a rule
    tightened) is stored under the messageId like an answer: the resend gets the same
    refusal, even once the client has repaired the session, and no agent is called; a
    message with a new messageId is coordinated."""
    await route_to(http, agent)
    sid = await new_session(http)
    await store_content_a_rule_now_refuses(database_url, sid)
    request = message(PLAN, context_id=sid)

    refused = await send_raw(http, request)

    assert refused["error"]["code"] == -32602
    assert error_data(refused)["status"] == 422
    assert error_data(refused)["errors"][0]["field"] == "pending_actions.0.description"
    repaired = await http.patch(
        f"/v1/sessions/{sid}",
        json={"session_state": {"pending_actions": []}},
        headers={"If-Match": "*", "content-type": "application/merge-patch+json"},
    )
    assert repaired.status_code == 200, repaired.text
    again = await send_raw(http, request)
    assert again["error"] == refused["error"]
    assert agent.requests == []
    assert await decisions(http, sid) == []
    fresh = await send_raw(http, message(PLAN, context_id=sid))
    assert fresh["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(agent.requests) == 1


async def test_a_connection_lost_at_the_seal_takes_the_turn_with_it(
    http: httpx.AsyncClient, agent: AgentServer, database_url: str
) -> None:
    """The answer is stored in the transaction that writes the coordinator's turn: when
    the connection is lost right there (PostgreSQL ends it as the key is sealed), neither
    is written, the key is free, and the resend is coordinated once: one decision. (Sealed
    after the turn's commit, as before, the turn stayed and the resend made a second.) The
    agent is called for both sends: a call to it is at least once."""
    await route_to(http, agent)
    sid = await new_session(http)
    await drop_the_connection_at_the_seal(database_url, "a2a:%")
    request = message(PLAN, context_id=sid)

    failed = await send_raw(http, request)

    assert "error" in failed, failed
    assert await seal_drops(database_url) == 1
    assert await decisions(http, sid) == []  # nothing of the turn was written
    again = await send_raw(http, request)
    task = again["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_COMPLETED"
    assert task["history"][0]["messageId"] == request.message.message_id
    assert len(await decisions(http, sid)) == 1
    replayed = await send_raw(http, request)
    assert replayed["result"]["task"]["id"] == task["id"]
    assert len(await decisions(http, sid)) == 1
    assert len(agent.requests) == 2


async def test_a_failure_after_the_turn_committed_is_answered_by_the_resend(
    http: httpx.AsyncClient, agent: AgentServer, database_url: str
) -> None:
    """Once the turn and its stored answer have committed, a failure before the answer
    leaves (the database lost as the task is read for it: PostgreSQL ends that
    connection) is an error for that request only: the resend is answered from what was
    stored, the agent called once and one decision written. (Sealed after the turn, as
    before, the failure freed the key and the resend was coordinated again.)"""
    await route_to(http, agent)
    sid = await new_session(http)
    request = message(PLAN, context_id=sid)

    failed, reads_ended = await end_the_task_read_after_the_turn(
        database_url, send_raw(http, request)
    )

    assert reads_ended == 1  # after the coordinator's turn: its answer is in hand
    assert error_data(failed)["status"] == 503
    [decided] = await decisions(http, sid)
    again = await send_raw(http, request)
    assert again["result"]["task"]["id"] == decided["task_id"]
    assert again["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(agent.requests) == 1
    assert len(await decisions(http, sid)) == 1
