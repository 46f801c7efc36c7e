"""HTTP routes for durable tasks and the dead-letter queue. Parses, calls one service
method, shapes the answer."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from app.auth.guards import integration_key
from app.auth.principal import Principal
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.tasks.schemas import (
    DeadLetter,
    DeadLetterPage,
    DeadLetterState,
    Task,
    TaskCreate,
    TaskDetail,
    TaskPage,
)
from app.tasks.service import TaskService

AnyRequest = Request[Principal, Any, Any]
Tasks = NamedDependency[TaskService]
IdempotencyKey = Annotated[
    str | None,
    HeaderParameter(
        name="Idempotency-Key",
        required=False,
        min_length=1,
        max_length=255,
        description="Submitting again with a key already used returns the same task.",
    ),
]
Reason = Annotated[str | None, QueryParameter(max_length=1000, description="Why (recorded).")]


class TaskController(Controller):
    """Submit, read and cancel tasks."""

    path = "/v1/tasks"
    tags = ["tasks"]

    @post("/", status_code=HTTP_201_CREATED, summary="Submit an agent call as a durable task")
    async def submit(
        self,
        request: AnyRequest,
        data: JSONBody[TaskCreate],
        tasks: Tasks,
        idempotency_key: IdempotencyKey = None,
    ) -> Response[Task]:
        """Queue a call of a registered agent (kind agent_call) with the body's input; it is
        retried with backoff and ends in the dead-letter queue if every attempt fails. A
        repeat with the same Idempotency-Key answers 200 with the task it created."""
        task, created = await tasks.submit_agent_call(data, request.user, idempotency_key)
        status = HTTP_201_CREATED if created else HTTP_200_OK
        return Response(task, status_code=status, headers={"Location": f"/v1/tasks/{task.task_id}"})

    @get("/{task_id:uuid}", summary="Read a task and its transitions")
    async def get_task(
        self, request: AnyRequest, task_id: FromPath[UUID], tasks: Tasks
    ) -> TaskDetail:
        """The task (status, attempt, lease, result or last error) and every transition."""
        return await tasks.detail(task_id, request.user)

    @post("/{task_id:uuid}/cancel", status_code=HTTP_200_OK, summary="Cancel a task")
    async def cancel(
        self, request: AnyRequest, task_id: FromPath[UUID], tasks: Tasks, reason: Reason = None
    ) -> Task:
        """Cancel a task that is not over (a running attempt is stopped); 409 if it is."""
        return await tasks.cancel(task_id, request.user, reason)


class SessionTasksController(Controller):
    """The tasks of a session."""

    path = "/v1/sessions/{session_id:uuid}/tasks"
    tags = ["tasks"]

    @get("/", summary="A session's tasks")
    async def list_tasks(
        self,
        session_id: FromPath[UUID],
        tasks: Tasks,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> TaskPage:
        """The session's tasks, newest first."""
        return await tasks.list_for_session(session_id, limit, cursor)


class DeadLetterController(Controller):
    """Tasks that failed for good: list, requeue, discard (admin or integration key)."""

    path = "/v1/dead-letters"
    tags = ["tasks"]
    guards = [integration_key]

    @get("/", summary="Dead letters")
    async def list_dead_letters(
        self,
        tasks: Tasks,
        letter_state: Annotated[
            DeadLetterState,
            QueryParameter(name="state", description="open (default), requeued, discarded, all"),
        ] = "open",
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> DeadLetterPage:
        """Dead letters, newest first."""
        return await tasks.dead_letters(letter_state, limit, cursor)

    @post("/{dead_letter_id:uuid}/requeue", status_code=HTTP_201_CREATED, summary="Requeue")
    async def requeue(
        self, request: AnyRequest, dead_letter_id: FromPath[UUID], tasks: Tasks
    ) -> Response[Task]:
        """Run the failed task again as a NEW task with a fresh budget of attempts, linked
        by requeue_of (the failed task stays failed); 409 once requeued or discarded."""
        task = await tasks.requeue(dead_letter_id, request.user)
        return Response(
            task, status_code=HTTP_201_CREATED, headers={"Location": f"/v1/tasks/{task.task_id}"}
        )

    @delete("/{dead_letter_id:uuid}", status_code=HTTP_200_OK, summary="Discard a dead letter")
    async def discard(
        self,
        request: AnyRequest,
        dead_letter_id: FromPath[UUID],
        tasks: Tasks,
        reason: Reason = None,
    ) -> DeadLetter:
        """Give it up. The record stays, marked with who discarded it, when and why (the
        audit trail); 409 once requeued or discarded."""
        return await tasks.discard(dead_letter_id, request.user, reason)
