"""The a2a-sdk's ``TaskStore`` over Switchboard's durable tasks (``agent_tasks``): there is
no second task table. Reads map rows to A2A Tasks (app/a2a/convert.py) with the REST API's
visibility rules; tasks are written only by Switchboard's task service (a coordinator
message submits them, their attempts move them), so ``save`` and ``delete`` refuse."""

from __future__ import annotations

from datetime import UTC
from uuid import UUID

from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import ListTasksRequest, ListTasksResponse, Task, TaskState
from a2a.utils.constants import DEFAULT_LIST_TASKS_PAGE_SIZE
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from a2a.utils.task import validate_page_size

from app.a2a.convert import STATUS_OF_STATE, a2a_task
from app.a2a.errors import as_a2a_errors
from app.auth.principal import Principal
from app.errors import NotFound
from app.tasks.repository import TaskFilter
from app.tasks.service import TaskService

# Where the route's context builder puts the authenticated caller.
PRINCIPAL_KEY = "switchboard_principal"


def principal_of(context: ServerCallContext) -> Principal:
    """The caller the auth middleware authenticated (the route runs behind it)."""
    principal = context.state.get(PRINCIPAL_KEY)
    if not isinstance(principal, Principal):
        raise RuntimeError("An A2A call reached the handler without its principal.")
    return principal


class AgentTaskStore(TaskStore):
    """A2A Tasks read from ``agent_tasks`` as the calling key may see them."""

    def __init__(self, tasks: TaskService) -> None:
        self._tasks = tasks

    async def get(self, task_id: str, context: ServerCallContext) -> Task | None:
        """The task, if it exists and the caller may see it."""
        try:
            ident = UUID(task_id)
        except ValueError:
            return None
        try:
            detail = await self._tasks.detail(ident, principal_of(context))
        except NotFound:
            return None
        return a2a_task(detail.task)

    async def list(self, params: ListTasksRequest, context: ServerCallContext) -> ListTasksResponse:
        """A page of the caller's tasks (or of a context's), newest first, with the total."""
        size = params.page_size if params.HasField("page_size") else DEFAULT_LIST_TASKS_PAGE_SIZE
        validate_page_size(size)
        session_id = None
        if params.context_id:
            try:
                session_id = UUID(params.context_id)
            except ValueError:
                raise InvalidParamsError(
                    message=f"contextId {params.context_id!r} is not a Switchboard id."
                ) from None
        changed_since = None
        if params.HasField("status_timestamp_after"):
            changed_since = params.status_timestamp_after.ToDatetime(tzinfo=UTC)
        where = TaskFilter(
            session_id=session_id,
            status=STATUS_OF_STATE.get(params.status)
            if params.status != TaskState.TASK_STATE_UNSPECIFIED
            else None,
            changed_since=changed_since,
        )
        with as_a2a_errors():
            page, total = await self._tasks.list_visible(
                principal_of(context), where, size, params.page_token or None
            )
        return ListTasksResponse(
            tasks=[a2a_task(task) for task in page.items],
            next_page_token=page.next_cursor or "",
            page_size=size,
            total_size=total,
        )

    async def save(self, task: Task, context: ServerCallContext) -> None:
        """Refused: Switchboard's task service writes tasks (send a message instead)."""
        raise UnsupportedOperationError(
            message="Tasks are created by SendMessage and moved by Switchboard's task service."
        )

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        """Refused: tasks are kept for their history (cancel one with CancelTask)."""
        raise UnsupportedOperationError(
            message="Tasks are not deleted over A2A; cancel one with CancelTask."
        )
