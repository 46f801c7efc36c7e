"""A real A2A 1.0 agent on 127.0.0.1 for tests, built with the a2a-sdk's server pieces
(its request handler, JSON-RPC and agent-card routes) and served by uvicorn on the test's
event loop. It completes tasks, asks for input first, fails, hangs or answers HTTP 500 as
the test tells it, and records what it was sent."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Literal

import uvicorn
from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Part,
)
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

Behaviour = Literal["complete", "ask", "message", "fail_task", "http500", "hang"]
CardMode = Literal["ok", "missing", "garbage", "no_interface", "bad_skill"]

RPC_PATH = "/a2a"


@dataclass
class Received:
    """One message the agent was sent: its text, remote task and context, metadata."""

    text: str
    task_id: str
    context_id: str
    metadata: dict[str, Any]


@dataclass
class A2AAgent:
    """One A2A agent. Change ``behaviour`` and ``card_mode`` at any time."""

    name: str = "planner"
    behaviour: Behaviour = "complete"
    card_mode: CardMode = "ok"
    answer: str = "Here is your plan"
    question: str = "Which month should the plan start?"
    received: list[Received] = field(default_factory=list)
    # Lower-cased headers of every JSON-RPC request.
    headers: list[dict[str, str]] = field(default_factory=list)
    card_fetches: int = 0
    # Remote tasks it asked a question in (behaviour "ask": asked once, then it completes).
    asked: set[str] = field(default_factory=set)
    _server: uvicorn.Server | None = None
    _serving: asyncio.Task[None] | None = None
    _release: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        """The agent's base URL (its card is at /.well-known/agent-card.json below it)."""
        assert self._server is not None
        port = self._server.servers[0].sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    def card(self) -> AgentCard:
        """The card the agent serves (its JSON-RPC interface at ``<url>/a2a``)."""
        return AgentCard(
            name=self.name,
            description="Builds budgets and savings plans over A2A",
            version="1.0.0",
            supported_interfaces=[
                AgentInterface(
                    url=self.url + RPC_PATH, protocol_binding="JSONRPC", protocol_version="1.0"
                )
            ],
            capabilities=AgentCapabilities(streaming=False),
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            skills=[
                AgentSkill(
                    id="a2a_budgeting",
                    name="Budgeting over A2A",
                    description="Monthly budgets",
                    tags=["budget", "plan"],
                    examples=["Make me a budget"],
                )
            ],
        )

    async def start(self) -> A2AAgent:
        """Listen on an ephemeral port of 127.0.0.1."""
        placeholder = AgentCard(name=self.name)
        handler = DefaultRequestHandler(
            agent_executor=_Executor(self),
            task_store=InMemoryTaskStore(),
            agent_card=placeholder,
        )
        app = Starlette(
            routes=[
                Route("/.well-known/agent-card.json", self._serve_card, methods=["GET"]),
                *create_jsonrpc_routes(handler, RPC_PATH),
            ]
        )
        config = uvicorn.Config(
            _Recorder(app, self), host="127.0.0.1", port=0, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._serving = asyncio.create_task(self._server.serve())
        # uvicorn's Server says it started with a flag only.
        while not self._server.started:
            if self._serving.done():
                self._serving.result()  # it could not start: say why
            await asyncio.sleep(0.01)
        return self

    async def stop(self) -> None:
        """Stop serving (a hanging task is let go first)."""
        self._release.set()
        if self._server is not None and self._serving is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(self._serving, timeout=10)

    async def _serve_card(self, request: Request) -> Response:
        self.card_fetches += 1
        if self.card_mode == "missing":
            return JSONResponse({"error": "no card here"}, status_code=404)
        if self.card_mode == "garbage":
            return Response(b"<html>not a card</html>", media_type="application/json")
        document = MessageToDict(self.card())
        if self.card_mode == "no_interface":
            document.pop("supportedInterfaces")
        if self.card_mode == "bad_skill":
            document["skills"][0]["id"] = "x" * 500
        return JSONResponse(document)


class _Recorder:
    """Records the headers of JSON-RPC requests; answers 500 when told to fail."""

    def __init__(self, app: ASGIApp, agent: A2AAgent) -> None:
        self._app = app
        self._agent = agent

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] == RPC_PATH:
            self._agent.headers.append(
                {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            )
            if self._agent.behaviour == "http500":
                await JSONResponse({"error": "boom"}, status_code=500)(scope, receive, send)
                return
        await self._app(scope, receive, send)


class _Executor(AgentExecutor):
    def __init__(self, agent: A2AAgent) -> None:
        self._agent = agent

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        agent = self._agent
        message = context.message
        assert message is not None
        agent.received.append(
            Received(
                text=context.get_user_input(),
                task_id=message.task_id,
                context_id=message.context_id,
                metadata=MessageToDict(message.metadata),
            )
        )
        if agent.behaviour == "message":
            await event_queue.enqueue_event(
                new_text_message(agent.answer, context_id=message.context_id)
            )
            return
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(message)
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        if agent.behaviour == "hang":
            await agent._release.wait()
        if agent.behaviour == "fail_task":
            await updater.failed(
                new_text_message("the planner broke", task_id=task.id, context_id=task.context_id)
            )
            return
        if agent.behaviour == "ask" and task.id not in agent.asked:
            agent.asked.add(task.id)
            await updater.requires_input(
                new_text_message(agent.question, task_id=task.id, context_id=task.context_id)
            )
            return
        await updater.add_artifact(
            [Part(text=f"plan for: {context.get_user_input()}")], name="plan"
        )
        await updater.complete(
            new_text_message(agent.answer, task_id=task.id, context_id=task.context_id)
        )

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Nothing to stop."""
