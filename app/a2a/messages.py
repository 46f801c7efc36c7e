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

The client's messageId is kept in the task's input, in the same transaction that stores
the answer, so the task's history shows the client's message under the client's id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from a2a.types import Message, Task
from google.protobuf.json_format import MessageToDict, ParseDict

from app.a2a.convert import a2a_task
from app.a2a.errors import a2a_error_of_problem
from app.auth.principal import Principal
from app.db.pool import Database
from app.db.queries import QUERIES
from app.errors import RequestInProgress, ValidationFailed
from app.tasks.service import TaskService
from app.webhooks.idempotency import IdempotencyService, Seal

Q = QUERIES.a2a
# What idempotency keys record as the request's endpoint.
ENDPOINT = "a2a:SendMessage"

Send = Callable[[], Awaitable[Task | Message]]


def resend_key(session_id: UUID, message_id: str) -> str:
    """The idempotency key of a message: its context and its messageId (hashed: a
    messageId may be longer than a key may be)."""
    return f"a2a:{session_id}:{hashlib.sha256(message_id.encode()).hexdigest()}"


class A2AMessages:
    """Sends an A2A message once per (caller, context, messageId)."""

    def __init__(
        self, database: Database, tasks: TaskService, idempotency: IdempotencyService
    ) -> None:
        self._db = database
        self._tasks = tasks
        self._idempotency = idempotency

    async def once(
        self,
        principal: Principal,
        session_id: UUID,
        message: Message,
        content: dict[str, Any],
        send: Send,
    ) -> Task | Message:
        """``send()``'s answer, or, for a resend of ``message`` (same messageId, same
        context, same ``content``), the answer of the first."""
        if not message.message_id:
            return await send()
        sent: list[Task | Message] = []

        async def first(seal: Seal | None) -> tuple[int, dict[str, Any]]:
            answer = await send()
            sent.append(answer)
            if isinstance(answer, Message):
                return 200, {"message": MessageToDict(answer)}
            body = {"task_id": answer.id}
            assert seal is not None  # a keyed run hands one
            async with self._db.transaction() as conn:
                await conn.execute(Q.keep_client_message_id, UUID(answer.id), message.message_id)
                await seal(conn, body)
            answer.history[0].message_id = message.message_id
            return 200, body

        try:
            stored = await self._idempotency.run(
                principal.name,
                resend_key(session_id, message.message_id),
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
        if sent:
            return sent[0]
        if "message" in stored.body:
            replayed = Message()
            ParseDict(stored.body["message"], replayed)
            return replayed
        return a2a_task(await self._tasks.get(UUID(stored.body["task_id"])))


def _key_reused(error: ValidationFailed) -> bool:
    """True if ``error`` is the idempotency key's "reused with another body" (not a
    validation error of the message's own coordination)."""
    errors = error.extensions.get("errors") or []
    return any(e.get("field") == "idempotency_key" for e in errors)
