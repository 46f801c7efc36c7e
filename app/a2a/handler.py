"""Switchboard's A2A request handler: the SDK's ``RequestHandler`` interface, answered by
the coordinator and the durable task service.

- ``SendMessage`` is a coordinator message (the path of POST /v1/sessions/{id}/messages
  and the n8n webhook): the ``contextId`` is the session (explicit continuation); without
  one, the user named in the message's metadata (``user_id`` or ``user_ref``) continues
  their latest open session, or starts one, as the n8n webhook does. The answer is the
  agent's durable task as an A2A Task, or a Message when no agent task answers (a
  clarifying question, the fallback of an agent whose circuit is open). A resend (same
  ``messageId``, same context) gets the first one's answer (app/a2a/messages.py).
- ``SendStreamingMessage`` submits the same way without waiting, then streams the task's
  status and its answer artifact as the durable task moves (the task service's wait:
  LISTEN/NOTIFY for the end, a poll of ``SWITCHBOARD_TASKS_POLL_INTERVAL`` between).
  ``SubscribeToTask`` streams a task that is not over from its current state, so a client
  whose stream dropped resumes with it.
- ``GetTask``, ``ListTasks`` and ``CancelTask`` read and cancel the same rows through
  ``AgentTaskStore`` and the task service, with the REST API's visibility rules.

- The push notification config methods store configs per task (app/a2a/push.py); the
  event outbox delivers the task's status updates to them.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from uuid import UUID

from a2a.helpers import get_message_text
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    ExtendedAgentCardNotConfiguredError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import apply_history_length, validate_history_length
from google.protobuf.json_format import MessageToDict

from app.a2a.convert import (
    INTERRUPTED_STATES,
    STATES,
    STATUS_OF_STATE,
    TERMINAL_STATES,
    a2a_task,
    answer_artifact,
    task_status,
)
from app.a2a.errors import as_a2a_errors
from app.a2a.messages import A2AMessages, Coordinated
from app.a2a.push import PushConfigs
from app.a2a.schemas import MessageMetadata
from app.a2a.store import AgentTaskStore, principal_of
from app.auth.principal import Principal
from app.coordination.prefer import WaitPreference
from app.coordination.schemas import MessageRequest
from app.coordination.service import CoordinationService
from app.db.pool import BeforeCommit
from app.errors import Conflict, Forbidden, NotFound
from app.tasks.schemas import Task as StoredTask
from app.tasks.service import TaskService
from app.webhooks.service import WebhookService

PUSH_IN_SEND = (
    "Set a push config with CreateTaskPushNotificationConfig once the task exists "
    "(send with returnImmediately to have it at once): SendMessage takes none."
)


class SwitchboardRequestHandler(RequestHandler):
    """A2A methods on Switchboard's coordinator and durable tasks."""

    def __init__(
        self,
        coordinator: CoordinationService,
        tasks: TaskService,
        webhooks: WebhookService,
        store: AgentTaskStore,
        push: PushConfigs,
        messages: A2AMessages,
    ) -> None:
        self._coordinator = coordinator
        self._tasks = tasks
        self._webhooks = webhooks
        self._store = store
        self._push = push
        self._messages = messages

    # -- messages ----------------------------------------------------------------------

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Coordinate the message, waiting for its agent within the coordinator's budget
        (none when ``returnImmediately``)."""
        validate_history_length(params.configuration)
        answer = await self._send(
            params, principal_of(context), params.configuration.return_immediately
        )
        if isinstance(answer, Task):
            return apply_history_length(answer, params.configuration)
        return answer

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task at once, then its updates until it is over or needs the client."""
        validate_history_length(params.configuration)
        answer = await self._send(params, principal_of(context), respond_async=True)
        yield answer
        if isinstance(answer, Task):
            async for event in self._follow(answer):
                yield event

    async def _send(
        self, params: SendMessageRequest, principal: Principal, respond_async: bool
    ) -> Task | Message:
        if params.configuration.HasField("task_push_notification_config"):
            raise InvalidParamsError(message=PUSH_IN_SEND)
        message = params.message
        text = plain_text(message)
        with as_a2a_errors():
            meta = MessageMetadata.from_struct(message.metadata)
            request = MessageRequest.model_validate(
                {"text": text, "context_flags": meta.context_flags}
            )
            session_id = await self._session_for(message, meta, principal)

            async def coordinate(before_commit: BeforeCommit[Coordinated] | None) -> Coordinated:
                budget = self._coordinator.budget(WaitPreference(respond_async=respond_async))
                return await self._coordinator.handle_message(
                    session_id, request, principal, budget, before_commit=before_commit
                )

            # A resend (same messageId, same context) is answered, not coordinated again.
            content = {
                "text": text,
                "metadata": MessageToDict(message.metadata),
                "task_id": message.task_id,
            }
            return await self._messages.once(principal, session_id, message, content, coordinate)

    async def _session_for(
        self, message: Message, meta: MessageMetadata, principal: Principal
    ) -> UUID:
        """The session the message goes to: its contextId, the session of the task it
        continues, or the user's latest open session (or a new one)."""
        session_id = _uuid(message.context_id, "contextId") if message.context_id else None
        if message.task_id:
            task = await self._visible_task(message.task_id, principal)
            if task.terminal:
                raise UnsupportedOperationError(
                    message=f"Task {task.task_id} is {task.status}; a terminal task takes no "
                    "more messages (send one without taskId to continue the context)."
                )
            if task.session_id is None:
                raise InvalidParamsError(
                    message=f"Task {task.task_id} belongs to no session: it takes no messages."
                )
            if session_id is not None and task.session_id != session_id:
                raise InvalidParamsError(
                    message=f"Task {task.task_id} is not of context {session_id}."
                )
            session_id = task.session_id
        if session_id is not None:
            return session_id
        if meta.user_id is None and meta.user_ref is None:
            raise InvalidParamsError(
                message="A message without contextId names its user: metadata.user_id "
                "(Switchboard's user id) or metadata.user_ref (your id for them)."
            )
        session, _ = await self._webhooks.continue_session(
            principal,
            user_id=meta.user_id,
            user_ref=meta.user_ref,
            session_id=None,
            session_type=meta.session_type,
            channel=meta.channel,
        )
        return session.session_id

    # -- tasks -------------------------------------------------------------------------

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task:
        """The task with its history (``historyLength``: the latest that many messages)."""
        validate_history_length(params)
        task = await self._store.get(params.id, context)
        if task is None:
            raise TaskNotFoundError
        return apply_history_length(task, params)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The caller's tasks (or a context's), newest first, a page at a time."""
        validate_history_length(params)
        page = await self._store.list(params, context)
        for task in page.tasks:
            if not params.include_artifacts:
                task.ClearField("artifacts")
            task.CopyFrom(apply_history_length(task, params))
        return page

    async def on_cancel_task(self, params: CancelTaskRequest, context: ServerCallContext) -> Task:
        """Cancel the task (its running attempt stops); TaskNotCancelable once it is over."""
        task_id = _task_id(params.id)
        reason = None
        if params.HasField("metadata"):
            found = MessageToDict(params.metadata).get("reason")
            reason = str(found)[:500] if found else None
        try:
            canceled = await self._tasks.cancel(task_id, principal_of(context), reason)
        except NotFound:
            raise TaskNotFoundError from None
        except (Conflict, Forbidden) as refused:
            raise TaskNotCancelableError(message=refused.detail) from None
        return a2a_task(canceled)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it is now, then its updates: how a dropped stream resumes."""
        task = await self._store.get(params.id, context)
        if task is None:
            raise TaskNotFoundError
        if task.status.state in TERMINAL_STATES:
            raise UnsupportedOperationError(
                message=f"Task {params.id} is over "
                f"({STATUS_OF_STATE[task.status.state]}); read it with GetTask."
            )
        yield task
        async for event in self._follow(task):
            yield event

    async def _follow(self, task: Task) -> AsyncGenerator[Event]:
        """Status updates (and the answer artifact) until the task is over or waits for
        the client. ``TaskService.wait`` wakes at once when the task ends (NOTIFY) and
        otherwise returns the row every poll interval, which shows it starting to work."""
        task_id = UUID(task.id)
        state = task.status.state
        interval = self._tasks.settings.poll_interval
        while state not in TERMINAL_STATES and state not in INTERRUPTED_STATES:
            try:
                stored = await self._tasks.wait(task_id, interval)
            except NotFound:  # deleted meanwhile (its session was): the stream ends so
                raise TaskNotFoundError from None
            if STATES[stored.status] == state:
                continue
            state = STATES[stored.status]
            artifact = answer_artifact(stored)
            if artifact is not None:
                yield TaskArtifactUpdateEvent(
                    task_id=task.id, context_id=task.context_id, artifact=artifact, last_chunk=True
                )
            yield TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task_status(stored)
            )

    async def _visible_task(self, task_id: str, principal: Principal) -> StoredTask:
        try:
            return (await self._tasks.detail(_task_id(task_id), principal)).task
        except NotFound:
            raise TaskNotFoundError from None

    # -- push notifications (app/a2a/push.py) -----------------------------------------

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Set a push config on a task the caller may see."""
        return await self._push.create(params, principal_of(context))

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """One of the caller's push configs of the task."""
        return await self._push.get(params.task_id, params.id, principal_of(context))

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """The caller's push configs of the task."""
        return await self._push.list_configs(params.task_id, principal_of(context))

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """Delete one of the caller's push configs: no more deliveries to it."""
        await self._push.delete(params.task_id, params.id, principal_of(context))

    # -- the extended card: not offered ------------------------------------------------

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """The public card is the whole card (capabilities.extendedAgentCard is false)."""
        raise ExtendedAgentCardNotConfiguredError(
            message="Switchboard has no extended card: /.well-known/agent-card.json is all."
        )


def _uuid(value: str, field: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise InvalidParamsError(message=f"{field} {value!r} is not a Switchboard id.") from None


def _task_id(value: str) -> UUID:
    """A task id; one that is not a UUID names no task."""
    try:
        return UUID(value)
    except ValueError:
        raise TaskNotFoundError from None


def plain_text(message: Message) -> str:
    """The message's text. The card declares ``text/plain`` as the only input mode, so a
    file or data part (or text of another media type) is refused with
    ContentTypeNotSupported before anything is written, rather than dropped unread."""
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        media_type = part.media_type.split(";", 1)[0].strip().lower()
        if kind != "text" or media_type not in ("", "text/plain"):
            what = f"a {kind or 'empty'} part" + (f" of {part.media_type}" if media_type else "")
            raise ContentTypeNotSupportedError(
                message=f"Part {index} is {what}: Switchboard takes text/plain parts only "
                "(the card's defaultInputModes)."
            )
    return get_message_text(message)
