"""An A2A message sent again is answered, not coordinated again.

A2A clients resend a message whose answer they did not get (a timeout, a dropped
connection) with the same ``messageId`` (the sender's unique id for the message). A resend
to the same context (session) by the same caller is the same request: it is run at most
once through the REST API's idempotency keys (app/webhooks/idempotency.py: the claim, its
lease, the replica presence that frees it after a crash; the key is
``a2a:<session>:<sha256 of the messageId>``, scoped per caller), so a resend while the
first still runs is refused as in progress (``-32600``, ``data.status`` 409: retry
shortly), and one after it is answered from what the first stored: the task, read again as
it is now, or the Message the coordinator answered with. The same messageId with other
content is refused (``-32602``). Answers are kept for ``SWITCHBOARD_WEBHOOK_IDEMPOTENCY_TTL``.

The answer is stored with the coordinator's turn, in the transaction that writes it
(``CoordinationService.handle_message``'s ``before_commit``), with the client's messageId
kept in the task's input, so the task's history shows the client's message under the
client's id: a turn is never written without its stored answer, so a resend after any
failure of the first (a lost connection, a crash) is answered by the turn that was
written, or coordinated once if none was.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from a2a.types import Message, Task
from google.protobuf.json_format import MessageToDict, ParseDict

from app.a2a.convert import TERMINAL_STATES, a2a_task, answer_message
from app.a2a.errors import a2a_error_of_problem
from app.auth.principal import Principal
from app.coordination.schemas import MessageAccepted, MessageResult
from app.db.pool import BeforeCommit, Connection
from app.db.queries import QUERIES
from app.errors import RequestInProgress, ValidationFailed
from app.tasks.service import TaskService
from app.webhooks.idempotency import IdempotencyService, Seal

Q = QUERIES.a2a
# What idempotency keys record as the request's endpoint.
ENDPOINT = "a2a:SendMessage"

Coordinated = MessageResult | MessageAccepted
# Runs the coordinator on the message, with work for the transaction that writes its turn.
Coordinate = Callable[[BeforeCommit[Coordinated] | None], Awaitable[Coordinated]]


def resend_key(session_id: UUID, message_id: str) -> str:
    """The idempotency key of a message: its context and its messageId (hashed: a
    messageId may be longer than a key may be)."""
    return f"a2a:{session_id}:{hashlib.sha256(message_id.encode()).hexdigest()}"


def stored_answer(result: Coordinated, answer_id: str) -> dict[str, Any]:
    """What a resend is answered from: the task (read again as it is then), or the Message
    the coordinator answered with (``answer_id`` its id)."""
    if result.task_id is not None:
        return {"task_id": str(result.task_id)}
    if not isinstance(result, MessageResult):  # an accepted turn has its task
        raise RuntimeError("The coordinator accepted a turn without a task to answer with.")
    return {"message": MessageToDict(answer_message(result, answer_id))}


class A2AMessages:
    """Sends an A2A message once per (caller, context, messageId)."""

    def __init__(self, tasks: TaskService, idempotency: IdempotencyService) -> None:
        self._tasks = tasks
        self._idempotency = idempotency

    async def once(
        self,
        principal: Principal,
        session_id: UUID,
        message: Message,
        content: dict[str, Any],
        coordinate: Coordinate,
    ) -> Task | Message:
        """The coordinator's answer to ``message`` as A2A, or, for a resend of it (same
        messageId, same context, same ``content``), the answer of the first."""
        answer_id = str(uuid.uuid4())  # a Message answer's id, stored and sent alike
        if not message.message_id:
            return await self._answer(await coordinate(None), answer_id)
        client_id = message.message_id
        coordinated: list[Coordinated] = []

        async def first(seal: Seal | None) -> tuple[int, dict[str, Any]]:
            assert seal is not None  # a keyed run hands one
            sealed: list[dict[str, Any]] = []

            async def store(conn: Connection, result: Coordinated) -> None:
                body = stored_answer(result, answer_id)
                if result.task_id is not None:
                    await conn.execute(Q.keep_client_message_id, result.task_id, client_id)
                await seal(conn, body)
                sealed.append(body)

            coordinated.append(await coordinate(store))
            if not sealed:  # the coordinator writes every turn it answers
                raise RuntimeError("The coordinator answered without writing its turn.")
            return 200, sealed[0]

        try:
            stored = await self._idempotency.run(
                principal.name,
                resend_key(session_id, client_id),
                ENDPOINT,
                {"context": str(session_id), **content},
                first,
            )
        except RequestInProgress as exc:
            # Raised by the key's claim only: said in the A2A client's words, not the
            # REST API's (an A2A client sent no Idempotency-Key).
            raise RequestInProgress(
                "A message with this messageId is still being answered in this context; "
                "send it again shortly.",
                retry_after=exc.retry_after,
            ) from None
        except ValidationFailed as exc:
            if not _key_reused(exc):
                raise
            raise ValidationFailed(
                "This messageId was already sent to this context with other content; give "
                "a new message a new messageId.",
                errors=[{"field": "message.messageId", "message": "reused with other content"}],
            ) from None
        if stored.problem:
            raise a2a_error_of_problem(stored.status, stored.body)
        if coordinated:
            return await self._answer(coordinated[0], answer_id)
        if "message" in stored.body:
            replayed = Message()
            ParseDict(stored.body["message"], replayed)
            return replayed
        return a2a_task(await self._tasks.get(UUID(stored.body["task_id"])))

    async def _answer(self, result: Coordinated, answer_id: str) -> Task | Message:
        """The coordinator's answer as A2A: the agent's task as it is now, or a Message
        (``answer_id``) when no agent task answers."""
        if isinstance(result, MessageAccepted):
            return a2a_task(await self._tasks.get(result.task_id))
        if result.task_id is None:
            return answer_message(result, answer_id)
        return _with_fallback(a2a_task(await self._tasks.get(result.task_id)), result)


def _with_fallback(task: Task, result: MessageResult) -> Task:
    """A task whose agent the coordinator stopped waiting for: what the user was told
    meanwhile (the fallback's answer) is its status message, marked degraded."""
    if result.degraded and task.status.state not in TERMINAL_STATES:
        task.status.message.CopyFrom(answer_message(result, f"{task.id}-fallback"))
        task.status.message.task_id = task.id
    return task


def _key_reused(error: ValidationFailed) -> bool:
    """True if ``error`` is the idempotency key's "reused with another body" (not a
    validation error of the message's own coordination)."""
    errors = error.extensions.get("errors") or []
    return any(e.get("field") == "idempotency_key" for e in errors)
