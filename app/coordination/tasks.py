"""The coordinator's agent calls as durable tasks (app/tasks/): what a task carries, one
attempt of it, and a request waiting for it within its budget.

A message's routed agent (kind ``message``), the agent a failed orchestrator passes the
message to (``handoff``) and a queued action's agent (``pending_action``) are each called
by a task: submitted ``run_here`` (leased to this process and started at once, so a fast
agent costs what the inline call did plus a few statements), then waited for. One attempt
is ONE HTTP call through the agent's breaker and within its timeout_ms; the task's retries
(backoff with jitter, dead letter after the last) replace the call's own.

The request stops waiting, and the rule-based fallback answers, when the budget is spent
or an attempt failed (a retry is seconds of backoff away: the user is not held for it);
the task goes on and its answer is applied later (app/coordination/completion.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import msgspec

from app.agents.schemas import Agent
from app.coordination.a2a_answers import A2AContinuation
from app.coordination.answers import RepairKind
from app.coordination.dispatch import CallResult
from app.coordination.schemas import AgentRequest, AgentResponse, DecidedIntent
from app.tasks.agent_call import AgentCall
from app.tasks.schemas import NewTask, Task, TaskDelayed, TaskFailed, TaskInputRequired
from app.tasks.service import TaskService

# The kinds whose tasks this module runs (app/tasks registers the generic agent_call).
COORDINATOR_KINDS = ("message", "handoff", "pending_action")
# Where a task is read by clients.
TASK_PATH = "/v1/tasks/{task_id}"
# The result document's key for what was wrong with the answer's JSON, when it was repaired;
# the rest of the document is the agent's answer (the seed's response_format). The same
# key as agent_call tasks' (app/tasks/agent_call.py).
REPAIRED_KEY = "repaired"
# The result document's key, while the task waits for the user's input, for the remote A2A
# task and context the user's next message continues.
CONTINUE_KEY = "a2a_continue"


def task_url(task_id: UUID) -> str:
    """Where a client reads a task."""
    return TASK_PATH.format(task_id=task_id)


def task_priority(score: int) -> int:
    """An intent's score (0-100) as a task priority (1-10, 10 claimed first)."""
    return max(1, min(10, (score + 9) // 10))


class TaskTurn(msgspec.Struct, frozen=True, kw_only=True):
    """What the turn that submitted a task knew, for applying its late answer: the message,
    how it was read and routed, the intent the agent was asked to handle, the queued action
    it works on (kind pending_action), the branch it was on."""

    message: str
    context_flags: list[str]
    classifier: str
    intent: DecidedIntent
    routed_by: str | None
    pending_action_id: str | None = None
    # The branch the turn was written to, where the late answer goes; None: the session.
    branch: str | None = None


class TaskInput(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A coordinator task's input: what the agent is sent (the seed's request_format, as
    posted), the turn it belongs to and, for an A2A agent that asked for input, the remote
    task the request continues."""

    request: dict[str, Any]
    turn: TaskTurn
    a2a: A2AContinuation | None = None


def task_input(
    request: AgentRequest, turn: TaskTurn, continuation: A2AContinuation | None = None
) -> dict[str, Any]:
    """The input document of a task that sends ``request`` (continuing ``continuation``)."""
    posted = msgspec.to_builtins(request)
    document: dict[str, Any] = msgspec.to_builtins(
        TaskInput(request=posted, turn=turn, a2a=continuation)
    )
    return document


def continuation_of(task: Task) -> A2AContinuation | None:
    """The remote A2A task a task waiting for input continues when the user answers."""
    found = task.result.get(CONTINUE_KEY) if task.interrupted and task.result else None
    if not isinstance(found, dict):
        return None
    try:
        return msgspec.convert(found, A2AContinuation)
    except msgspec.ValidationError:
        return None


def read_input(task: Task) -> TaskInput:
    """A coordinator task's input, typed."""
    return msgspec.convert(task.input, TaskInput)


def answer_of(task: Task) -> tuple[AgentResponse, RepairKind | None] | None:
    """The agent's answer a completed task holds (or, while it waits for input, the agent's
    question), and how its JSON was repaired."""
    if not task.answered or task.result is None:
        return None
    document = dict(task.result)
    document.pop(CONTINUE_KEY, None)
    repaired = document.pop(REPAIRED_KEY, None)
    kind: RepairKind | None = repaired if repaired in ("truncated", "malformed") else None
    return AgentResponse.model_validate(document), kind


@dataclass(frozen=True, slots=True)
class Waited:
    """How waiting for a task ended: the task as it was then, its call as the turn records
    it, and whether it still works (detached: its answer comes later)."""

    task: Task
    call: CallResult
    detached: bool


class AgentTasks:
    """Runs the coordinator's task attempts and waits for them."""

    def __init__(self, tasks: TaskService, call: AgentCall) -> None:
        self._tasks = tasks
        self._call = call
        # Requests waiting for a task run here, by request_id (known before the task's id):
        # told when an attempt failed, so that they stop waiting for the retry; and the
        # agent as the request read it, which the first attempt here uses (no re-read).
        self._watching: dict[str, asyncio.Future[str]] = {}
        self._agents: dict[str, Agent] = {}
        # Waits given up (an attempt failed first), until they have ended.
        self._abandoned: set[asyncio.Future[Task]] = set()

    # -- one attempt (the handler) ------------------------------------------------------

    async def attempt(self, task: Task) -> dict[str, Any]:
        """One attempt of a coordinator task: its request posted once to its agent."""
        request = task.input.get("request")
        if not isinstance(request, dict):
            raise TaskFailed("the task has no request to send", retryable=False)
        try:
            return await self._attempt(task, request)
        except TaskFailed as failed:
            if failed.retryable and task.attempt < task.max_attempts:
                # A retry is seconds of backoff away. (A failure for good ends the task at
                # once: the caller's wait returns it, and its fallback answers.)
                self._attempt_failed(request, failed.reason)
            raise
        except TaskInputRequired:
            raise  # an answer (the agent's question): the waiter gets it with the task
        except TaskDelayed as delayed:  # the breaker refuses: no answer before it probes
            self._attempt_failed(request, delayed.reason)
            raise
        except Exception as exc:  # the queue retries it; the caller is not held for that
            self._attempt_failed(request, f"{type(exc).__name__}: {exc}")
            raise

    async def _attempt(self, task: Task, request: dict[str, Any]) -> dict[str, Any]:
        agent = self._agents.pop(str(request.get("request_id")), None)
        if agent is None or agent.name != task.agent_name:
            agent = await self._call.agent(task.agent_name)
        continuation = None
        if task.input.get("a2a") is not None:
            continuation = msgspec.convert(task.input["a2a"], A2AContinuation)
        # What is retried, what waits for the breaker: app/tasks/agent_call.py, for every
        # task that calls an agent.
        answer = await self._call.attempt(agent, request, continuation)
        document: dict[str, Any] = answer.response.model_dump(mode="json")
        if answer.repaired is not None:
            document[REPAIRED_KEY] = answer.repaired
        outcome = answer.a2a
        if outcome is not None and outcome.interrupted and outcome.continuation is not None:
            # The agent asks the user: the task waits, and the user's next message to the
            # session continues the same remote task (CoordinationService).
            document[CONTINUE_KEY] = msgspec.to_builtins(outcome.continuation)
            if outcome.state == "auth-required":
                raise TaskInputRequired("auth-required", document)
            raise TaskInputRequired("input-required", document)
        return document

    def _attempt_failed(self, request: dict[str, Any], reason: str) -> None:
        watcher = self._watching.get(str(request.get("request_id")))
        if watcher is not None and not watcher.done():
            watcher.set_result(reason)

    # -- waiting (the request) ----------------------------------------------------------

    async def awaiting_input(self, session_id: UUID) -> Task | None:
        """The session's newest task that waits for the user's input, if any."""
        return await self._tasks.awaiting_input(session_id)

    async def run(
        self,
        new: NewTask,
        principal: str,
        request_id: str,
        budget: float,
        agent: Agent | None = None,
        resume: tuple[Task, dict[str, Any]] | None = None,
    ) -> Waited:
        """Submit ``new`` (run here) and wait up to ``budget`` seconds for it: its answer,
        its question (it waits for the user's input), its failure for good, or (budget
        spent, or an attempt failed) the task detached, going on. ``agent``: the agent as
        just read, for the first attempt. ``resume``: a task waiting for input and the
        input it resumes with, run instead of ``new`` (``new`` when it no longer waits)."""
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        failed: asyncio.Future[str] = loop.create_future()
        self._watching[request_id] = failed
        if agent is not None:
            self._agents[request_id] = agent
        try:
            resumed = None
            if resume is not None:
                resumed = await self._tasks.resume(resume[0].task_id, resume[1])
            task = resumed or await self._tasks.submit(new, principal, run_here=True)
            remaining = budget - (time.monotonic() - started)
            if not task.settled and remaining > 0:
                try:
                    task = await self._wait(task, remaining, failed)
                except asyncio.CancelledError:
                    # The caller went away (a client disconnected, the server stops): the
                    # task's answer is applied when it comes, as for a caller that gave up.
                    await asyncio.shield(self._tasks.detach(task.task_id))
                    raise
        finally:
            self._watching.pop(request_id, None)
            self._agents.pop(request_id, None)  # not run here (queued): read when claimed
            if not failed.done():
                failed.cancel()
        if not task.settled:
            task = await self._tasks.detach(task.task_id)  # terminal meanwhile: its answer
        reason = failed.result() if failed.done() and not failed.cancelled() else None
        return Waited(task, call_of(task, _ms_since(started), reason), not task.settled)

    def _forget_wait(self, done: asyncio.Future[Task]) -> None:
        self._abandoned.discard(done)
        _consume(done)

    async def _wait(self, task: Task, seconds: float, failed: asyncio.Future[str]) -> Task:
        waiting = asyncio.ensure_future(self._tasks.wait(task.task_id, seconds))
        try:
            watched: set[asyncio.Future[Any]] = {waiting, failed}
            await asyncio.wait(watched, return_when=asyncio.FIRST_COMPLETED)
            if waiting.done():
                return waiting.result()
            return task
        finally:
            if not waiting.done():
                # Not awaited: a cancellation that lands as the wait takes a pooled
                # connection can be swallowed (asyncio.wait_for on Python 3.11), and the
                # caller would sit out the rest of the budget. The wait then ends at its
                # own deadline, in the background.
                waiting.cancel()
                self._abandoned.add(waiting)
                waiting.add_done_callback(self._forget_wait)


def _consume(done: asyncio.Future[Task]) -> None:
    if not done.cancelled():
        done.exception()  # retrieved: a failed background wait is nobody's error


def call_of(task: Task, elapsed_ms: int, failed_attempt: str | None = None) -> CallResult:
    """A task as the call a turn records: the agent's answer, or why there is none."""
    answered = answer_of(task)
    if answered is not None:
        response, repaired = answered
        return CallResult(response, task.attempt, None, elapsed_ms, repaired)
    if task.terminal:
        error = task.last_error or f"task {task.status}"
    elif failed_attempt is not None:
        error = failed_attempt  # and retried in the background: the decision names the task
    else:
        error = f"no answer within the wait (task {task.status}, attempt {task.attempt})"
    return CallResult(None, task.attempt, error, elapsed_ms)


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
