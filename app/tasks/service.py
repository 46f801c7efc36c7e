"""TaskService: submitting, running, waiting for and reading durable agent tasks.

A task is a row in ``agent_tasks`` (sql/queries/tasks.sql). Whoever runs an attempt holds
the task's lease and this process renews every lease it holds in one statement each
lease/3; an attempt whose lease is gone (taken over by the reaper, or the task canceled)
is cancelled here. Every statement that ends an attempt is fenced by (lease owner,
attempt), so a replica that lost its lease changes nothing. Claimed tasks (the worker,
app/tasks/worker.py) and tasks run where they were submitted (``run_here``) go through the
same ``_run``: the kind's handler, then completed, a retry after the backoff, a delay
(open breaker: no attempt burnt) or a failure for good with its dead letter; the kind's
``on_finished`` hook once the task is terminal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg

from app.agents.service import AgentService
from app.auth.principal import Principal
from app.clock import Clock
from app.common.background import stop_loop
from app.common.ids import uuid7
from app.common.pagination import FIRST_PAGE, cut_page, decode_time_id_cursor
from app.db.listener import Listener
from app.db.pool import Connection, Database
from app.errors import Conflict, Forbidden, NotFound, ValidationFailed
from app.sessions.service import SessionService
from app.settings import TaskSettings
from app.tasks import repository as repo
from app.tasks.repository import TaskFilter
from app.tasks.retry import Backoff
from app.tasks.schemas import (
    TASK_KINDS,
    DeadLetter,
    DeadLetterPage,
    FinishedHook,
    Handler,
    NewTask,
    Task,
    TaskCreate,
    TaskDelayed,
    TaskDetail,
    TaskFailed,
    TaskInputRequired,
    TaskPage,
)
from app.tracing import Tracing, current_trace_id, current_traceparent

logger = logging.getLogger("switchboard.tasks")

# Channels the schema's triggers announce on (announce_after_commit): this process's own
# listeners are told after the commit, the other processes by a coalesced NOTIFY
# (app/db/announce.py).
QUEUED_CHANNEL = "switchboard_tasks"
FINISHED_CHANNEL = "switchboard_task_finished"
# How long stopping waits for finished hooks still running (late answers being applied).
HOOK_DRAIN_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class _Kind:
    handler: Handler
    on_finished: FinishedHook | None


class TaskService:
    """The task queue of one process: submit, run, wait, detach, cancel, read."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: TaskSettings,
        replica: str,
        tracing: Tracing,
        agents: AgentService,
        sessions: SessionService,
    ) -> None:
        self._db = database
        self._clock = clock
        self.settings = settings
        self.replica = replica
        self._tracing = tracing
        self._agents = agents
        self._sessions = sessions
        self.backoff = Backoff(settings.retry_base_seconds, settings.retry_cap_seconds)
        self._lease = timedelta(seconds=settings.lease_seconds)
        self._kinds: dict[str, _Kind] = {}
        # Attempts running in this process, and those whose lease was found gone.
        # An attempt is known by its asyncio task (lost) or by (task id, attempt): a task
        # whose lease ran out here may be claimed here again as a later attempt while the
        # earlier one is still being stopped.
        self._running: dict[UUID, tuple[Task, asyncio.Task[None]]] = {}
        # Every attempt's asyncio task until it is done, its finished hook included (an
        # attempt leaves _running before its hook runs): what stop() waits for.
        self._attempts: set[asyncio.Task[None]] = set()
        self._lost: set[asyncio.Task[None]] = set()
        # Attempts whose outcome is being stored: their lease is released by that store, so
        # the renewal must not take its absence for a lost lease.
        self._finishing: set[tuple[UUID, int]] = set()
        self._waiters: dict[UUID, set[asyncio.Future[Task | None]]] = {}
        # Results waiting for the next group commit, and the task storing them.
        self._completing: list[tuple[Task, dict[str, Any], asyncio.Future[Task | None]]] = []
        self._completer: asyncio.Task[None] | None = None
        # Set when an attempt ends here: a worker may claim again.
        self.slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._renewer: asyncio.Task[None] | None = None
        # The LISTEN for finished tasks starts with the first wait (a process that never
        # waits holds no connection for it).
        self._started = False
        self._listening = False
        self._finished = Listener(
            database.url,
            FINISHED_CHANNEL,
            self._on_finished_notice,
            catch_up=self._wake_waiters,
            interval=settings.poll_interval,
        )
        # A task finished by this process's commit (a late answer, a cancel) wakes its
        # waiters here at once.
        database.announcer.listen(FINISHED_CHANNEL, self._on_finished_notice)

    # -- handlers and lifecycle ---------------------------------------------------------

    def register(
        self, kind: str, handler: Handler, on_finished: FinishedHook | None = None
    ) -> None:
        """Say how tasks of ``kind`` run (one attempt) and what happens once one is over."""
        if kind not in TASK_KINDS:
            raise ValueError(f"unknown task kind {kind!r}")
        self._kinds[kind] = _Kind(handler, on_finished)

    async def start(self) -> None:
        """Follow finished tasks (for ``wait``) and renew the leases of running attempts."""
        self._stopping.clear()
        self._started = True
        self._renewer = asyncio.create_task(self._renew_leases(), name="task-lease-renewal")

    async def stop(self) -> None:
        """Stop the attempts running here (their attempt is given back: the task is queued
        again at once), then stop following."""
        running = [attempt for _, attempt in self._running.values()]
        for attempt in running:
            attempt.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)
        # Attempts that had ended and run their finished hook (a late answer being applied
        # to its session) are let finish, within a bound.
        if self._attempts:
            await asyncio.wait(set(self._attempts), timeout=HOOK_DRAIN_SECONDS)
        if self._renewer is not None:
            await stop_loop(self._renewer, self._stopping)
            self._renewer = None
        self._started = False
        if self._listening:
            self._listening = False
            await self._finished.stop()

    @property
    def running_count(self) -> int:
        """Attempts running in this process."""
        return len(self._running)

    # -- submitting ---------------------------------------------------------------------

    async def submit(self, new: NewTask, principal_name: str, *, run_here: bool = False) -> Task:
        """Create a task, or return the one ``principal_name`` created under the same
        idempotency key. ``run_here``: leased to this process and started at once (no
        claim round trip), unless the agent is at its concurrency limit."""
        task, _ = await self._submit(new, principal_name, run_here=run_here)
        return task

    async def _submit(
        self, new: NewTask, principal_name: str, *, run_here: bool
    ) -> tuple[Task, bool]:
        if new.kind not in TASK_KINDS:
            raise ValidationFailed(f"Unknown task kind {new.kind!r}.", errors=[])
        now = self._clock.now()
        max_attempts = new.max_attempts or self.settings.max_attempts_for(new.agent_name)
        trace = (current_trace_id(), current_traceparent())
        task_id = uuid7()
        leased = run_here and (new.scheduled_at is None or new.scheduled_at <= now)
        try:
            # A queued submission is one statement (autocommit); a leased one first takes
            # the claimers' turn, which lasts until its transaction ends.
            async with self._db.transaction() if leased else self._db.connection() as conn:
                task: Task | None = None
                if leased:
                    await repo.claim_lock(conn)
                    task = await repo.insert_task_leased(
                        conn,
                        task_id,
                        new,
                        principal_name,
                        max_attempts,
                        trace,
                        now,
                        self.replica,
                        now + self._lease,
                        self.settings.concurrency_for(new.agent_name),
                    )
                if task is None:
                    task = await repo.insert_task(
                        conn,
                        task_id,
                        new,
                        principal_name,
                        max_attempts,
                        new.scheduled_at or now,
                        trace,
                        now,
                    )
                if task is None and new.idempotency_key is not None:
                    existing = await repo.get_task_by_key(conn, principal_name, new.idempotency_key)
                    if existing is not None:
                        return existing, False
        except asyncpg.ForeignKeyViolationError:
            raise NotFound(f"No session {new.session_id}.") from None
        if task is None:  # the key's task vanished between the conflict and the read
            raise Conflict("The task was removed meanwhile; retry.", retryable=True)
        if task.lease_owner == self.replica and task.task_id == task_id:
            self.start_attempt(task)
        return task, True

    async def submit_agent_call(
        self, data: TaskCreate, principal: Principal, idempotency_key: str | None
    ) -> tuple[Task, bool]:
        """POST /v1/tasks: queue a call of a registered agent (kind agent_call); the task
        and whether it is new (False: the key's earlier task)."""
        await self._agents.get_agent(data.agent_name)  # 404 for an unknown agent
        return await self._submit(
            NewTask(
                agent_name=data.agent_name,
                kind="agent_call",
                input=data.input,
                session_id=data.session_id,
                user_id=data.user_id,
                priority=data.priority,
                idempotency_key=idempotency_key,
                max_attempts=data.max_attempts,
                scheduled_at=data.scheduled_at,
            ),
            principal.name,
            run_here=False,
        )

    # -- waiting ------------------------------------------------------------------------

    async def wait(self, task_id: UUID, timeout: float) -> Task:  # noqa: ASYNC109 - the budget
        """The task once it is terminal or waits for input, or as it is when ``timeout``
        seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        if self._started and not self._listening:
            self._listening = True
            await self._finished.start()
        while True:
            waiter: asyncio.Future[Task | None] = loop.create_future()
            self._waiters.setdefault(task_id, set()).add(waiter)
            try:
                task = await self.get(task_id)
                remaining = deadline - loop.time()
                if task.settled or remaining <= 0:
                    return task
                with contextlib.suppress(TimeoutError):
                    finished = await asyncio.wait_for(
                        waiter, timeout=min(remaining, self.settings.poll_interval)
                    )
                    if finished is not None and finished.settled:
                        return finished
            finally:
                self._forget_waiter(task_id, waiter)

    def _forget_waiter(self, task_id: UUID, waiter: asyncio.Future[Task | None]) -> None:
        waiters = self._waiters.get(task_id)
        if waiters is not None:
            waiters.discard(waiter)
            if not waiters:
                del self._waiters[task_id]

    def _resolve_waiters(self, task_id: UUID, task: Task | None) -> None:
        for waiter in self._waiters.get(task_id, ()):
            if not waiter.done():
                waiter.set_result(task)

    def _on_finished_notice(self, payload: str) -> None:
        try:
            task_id = UUID(payload)
        except ValueError:
            return
        self._resolve_waiters(task_id, None)

    async def _wake_waiters(self) -> None:
        # A NOTIFY sent while the listener was reconnecting is gone: every waiter looks.
        for task_id in list(self._waiters):
            self._resolve_waiters(task_id, None)

    async def detach(self, task_id: UUID) -> Task:
        """Mark the task detached (its waiter gave up) unless it is already terminal;
        returns the row (terminal: its result is the answer)."""
        async with self._db.connection() as conn:
            task = await repo.detach_task(conn, task_id) or await repo.get_task(conn, task_id)
        if task is None:
            raise NotFound(f"No task {task_id}.")
        return task

    # -- tasks waiting for the user's input -------------------------------------------

    async def awaiting_input(self, session_id: UUID) -> Task | None:
        """The session's newest task that waits for the user's input, if any."""
        async with self._db.connection() as conn:
            return await repo.session_task_awaiting_input(conn, session_id)

    async def resume(self, task_id: UUID, new_input: dict[str, Any]) -> Task | None:
        """Resume a task that waits for input with ``new_input``: the same task, a new
        attempt leased here and started at once (like ``run_here``), with a fresh budget of
        attempts. None when it no longer waits (canceled, or another message resumed it)."""
        now = self._clock.now()
        async with self._db.connection() as conn:
            current = await repo.get_task(conn, task_id)
            if current is None:
                return None
            task = await repo.resume_task(
                conn,
                task_id,
                self.replica,
                new_input,
                now + self._lease,
                self.settings.max_attempts_for(current.agent_name),
                now,
            )
        if task is not None:
            self.start_attempt(task)
        return task

    # -- reading and cancelling -----------------------------------------------------------

    async def get(self, task_id: UUID) -> Task:
        """One task (404 if unknown)."""
        async with self._db.connection() as conn:
            task = await repo.get_task(conn, task_id)
        if task is None:
            raise NotFound(f"No task {task_id}.")
        return task

    async def detail(self, task_id: UUID, principal: Principal) -> TaskDetail:
        """A task and its transitions, if ``principal`` may see it."""
        async with self._db.connection() as conn:
            task = await repo.get_task(conn, task_id)
            if task is None or not _may_see(principal, task):
                raise NotFound(f"No task {task_id}.")
            transitions = await repo.task_transitions(conn, task_id)
        return TaskDetail(task=task, transitions=transitions)

    async def list_for_session(self, session_id: UUID, limit: int, cursor: str | None) -> TaskPage:
        """A session's tasks, newest first (404 for an unknown session)."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        await self._sessions.get_session(session_id)
        async with self._db.connection() as conn:
            items = await repo.list_session_tasks(conn, session_id, before, limit + 1)
        page, next_cursor = cut_page(items, limit, lambda t: (t.created_at, t.task_id))
        return TaskPage(items=page, next_cursor=next_cursor)

    async def list_visible(
        self, principal: Principal, where: TaskFilter, limit: int, cursor: str | None
    ) -> tuple[TaskPage, int]:
        """The tasks ``principal`` may see that ``where`` selects, newest first, and how many
        there are: a session's tasks for every key, else the admin's every task and an
        agent's the ones it submitted or that are for it (as ``detail`` allows)."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        if where.session_id is None and not principal.is_admin:
            where = replace(where, caller=principal.name)
        async with self._db.connection() as conn:
            items = await repo.list_visible_tasks(conn, where, before, limit + 1)
            total = await repo.count_visible_tasks(conn, where)
        page, next_cursor = cut_page(items, limit, lambda t: (t.created_at, t.task_id))
        return TaskPage(items=page, next_cursor=next_cursor), total

    async def cancel(self, task_id: UUID, principal: Principal, reason: str | None = None) -> Task:
        """Cancel a task that is not over; its running attempt (here or elsewhere) stops.
        409 if it is already over."""
        async with self._db.transaction() as conn:
            current = await repo.get_task(conn, task_id)
            if current is None or not _may_see(principal, current):
                raise NotFound(f"No task {task_id}.")
            if not _may_change(principal, current):
                raise Forbidden("Only the admin, the task's submitter or its agent may cancel it.")
            task = await repo.cancel_task(
                conn, task_id, principal.name, self._clock.now(), reason or "canceled"
            )
        if task is None:
            raise Conflict(f"Task {task_id} is already {current.status}.", status=current.status)
        stopped = self._drop_attempt(task_id)
        if stopped is not None:
            await asyncio.wait({stopped}, timeout=5)
        self._resolve_waiters(task_id, task)
        await self._finish(task)  # its kind's hook: a detached coordinator task closes its step
        return task

    # -- dead letters -------------------------------------------------------------------

    async def dead_letters(self, state: str, limit: int, cursor: str | None) -> DeadLetterPage:
        """Dead letters in ``state`` (open, requeued, discarded, all), newest first."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            items = await repo.list_dead_letters(conn, state, before, limit + 1)
        page, next_cursor = cut_page(items, limit, lambda d: (d.failed_at, d.dead_letter_id))
        return DeadLetterPage(items=page, next_cursor=next_cursor)

    async def requeue(self, dead_letter_id: UUID, principal: Principal) -> Task:
        """Retry a dead letter as a NEW task (a fresh budget of attempts, linked to the
        failed one by requeue_of); the failed task stays failed."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            letter = await _open_letter(conn, dead_letter_id)
            failed = await repo.get_task(conn, letter.task_id)
            assert failed is not None  # a dead letter's task goes only with the letter
            new = NewTask(
                agent_name=failed.agent_name,
                kind=failed.kind,
                input=failed.input,
                session_id=failed.session_id,
                user_id=failed.user_id,
                priority=failed.priority,
                decision_id=failed.decision_id,
            )
            task = await repo.insert_task(
                conn,
                uuid7(),
                new,
                principal.name,
                self.settings.max_attempts_for(failed.agent_name),
                now,
                (current_trace_id(), current_traceparent()),
                now,
                requeue_of=failed.task_id,
            )
            assert task is not None  # no idempotency key: no conflict
            await repo.mark_requeued(conn, dead_letter_id, task.task_id, now, principal.name)
        return task

    async def discard(
        self, dead_letter_id: UUID, principal: Principal, reason: str | None
    ) -> DeadLetter:
        """Give a dead letter up; the row stays, marked with who, when and why (the audit)."""
        async with self._db.transaction() as conn:
            await _open_letter(conn, dead_letter_id)
            await repo.mark_discarded(
                conn, dead_letter_id, self._clock.now(), principal.name, reason
            )
            letter = await repo.get_dead_letter(conn, dead_letter_id)
        assert letter is not None
        return letter

    # -- running attempts (the worker and run_here) --------------------------------------

    async def claim(self, limit: int) -> list[Task]:
        """Lease up to ``limit`` due tasks to this process and start them."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            await repo.claim_lock(conn)
            tasks = await repo.claim_tasks(
                conn,
                now,
                self.replica,
                now + self._lease,
                limit,
                self.settings.agent_concurrency,
                self.settings.agent_concurrency_default,
            )
        for task in tasks:
            self.start_attempt(task)
        return tasks

    async def reap(self) -> int:
        """Return tasks whose lease ran out (their process died) to the queue as a new
        attempt, or fail them for good when that was their last; how many."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            released = await repo.release_expired_leases(conn, now, self.replica)
        async with self._db.transaction() as conn:
            failed = await repo.fail_expired_leases(conn, now, self.replica)
        for task in failed:
            logger.warning("task %s failed for good: %s", task.task_id, task.last_error)
            await self._finish(task)
        if released:
            logger.info("requeued %d tasks whose lease expired", released)
        return released + len(failed)

    def start_attempt(self, task: Task) -> None:
        """Run a task leased to this process, in the background. An earlier attempt of it
        still running here lost its lease (this one was claimed after it ran out): it stops,
        so that one task never runs twice at once."""
        self._drop_attempt(task.task_id)
        attempt = asyncio.create_task(self._run(task), name=f"task-{task.task_id}")
        self._attempts.add(attempt)
        attempt.add_done_callback(self._attempts.discard)
        self._running[task.task_id] = (task, attempt)

    def _drop_attempt(self, task_id: UUID) -> asyncio.Task[None] | None:
        """Stop the attempt running here (its lease is gone: nothing is recorded)."""
        running = self._running.get(task_id)
        if running is None:
            return None
        self._lost.add(running[1])
        running[1].cancel()
        return running[1]

    async def _run(self, task: Task) -> None:
        finished: Task | None = None
        me = asyncio.current_task()
        try:
            with self._tracing.continue_trace(task.traceparent, f"task {task.kind}"):
                finished = await self._attempt(task)
        except asyncio.CancelledError:
            if me not in self._lost:  # stopping: the attempt is given back
                await asyncio.shield(self._give_back(task))
        except Exception:  # the database was unreachable: the lease runs out, the reaper retries
            logger.exception("task %s: its outcome could not be recorded", task.task_id)
        finally:
            running = self._running.get(task.task_id)
            if running is not None and running[1] is me:  # not a later attempt's entry
                del self._running[task.task_id]
            if me is not None:
                self._lost.discard(me)
            self._finishing.discard((task.task_id, task.attempt))
            self.slot_freed.set()
        if finished is not None and finished.settled:
            await self._finish(finished)

    async def _attempt(self, task: Task) -> Task | None:
        kind = self._kinds.get(task.kind)
        try:
            if kind is None:
                raise TaskFailed(f"no handler for tasks of kind {task.kind}", retryable=False)
            result = await kind.handler(task)
            if not isinstance(result, dict):
                raise TaskFailed("the handler returned no result document", retryable=True)
        except TaskDelayed as delayed:
            self._finishing.add((task.task_id, task.attempt))
            async with self._db.connection() as conn:
                return await repo.delay_task(
                    conn, task.task_id, self.replica, task.attempt, delayed.reason, delayed.until
                )
        except TaskFailed as failed:
            self._finishing.add((task.task_id, task.attempt))
            return await self._failed(task, failed.reason, retryable=failed.retryable)
        except TaskInputRequired as asks:
            self._finishing.add((task.task_id, task.attempt))
            async with self._db.connection() as conn:
                return await repo.interrupt_task(
                    conn, task.task_id, self.replica, task.attempt, asks.status, asks.result
                )
        except Exception as exc:
            self._finishing.add((task.task_id, task.attempt))
            logger.exception("task %s: its handler raised", task.task_id)
            return await self._failed(task, f"{type(exc).__name__}: {exc}", retryable=True)
        self._finishing.add((task.task_id, task.attempt))
        done = await self._complete(task, result)
        if done is None:
            logger.warning("task %s: lease lost before its result was stored", task.task_id)
        return done

    async def _complete(self, task: Task, result: dict[str, Any]) -> Task | None:
        """Store an attempt's result. Results that arrive while a store is in flight go
        together in the next one (group commit): one statement and one connection for
        many tasks under load, no wait when idle."""
        waiter: asyncio.Future[Task | None] = asyncio.get_running_loop().create_future()
        self._completing.append((task, result, waiter))
        if self._completer is None or self._completer.done():
            self._completer = asyncio.create_task(self._store_completions())
        return await asyncio.shield(waiter)

    async def _store_completions(self) -> None:
        while self._completing:
            batch, self._completing = self._completing, []
            now = self._clock.now()
            try:
                async with self._db.connection() as conn:
                    stored = await repo.complete_tasks(
                        conn,
                        self.replica,
                        [(task.task_id, task.attempt, result) for task, result, _ in batch],
                        now,
                    )
            except Exception as exc:
                for _, _, waiter in batch:
                    if not waiter.done():
                        waiter.set_exception(exc)
                continue
            for task, result, waiter in batch:
                if not waiter.done():
                    # The row as the statement left it, without reading it back.
                    waiter.set_result(
                        replace(
                            task,
                            status="completed",
                            result=result,
                            finished_at=now,
                            lease_owner=None,
                            lease_expires_at=None,
                            last_error=None,
                            detached=stored[task.task_id],
                        )
                        if task.task_id in stored
                        else None
                    )

    async def _failed(self, task: Task, error: str, *, retryable: bool) -> Task | None:
        now = self._clock.now()
        async with self._db.connection() as conn:
            if retryable and task.attempt < task.max_attempts:
                at = now + timedelta(seconds=self.backoff.delay(task.attempt))
                return await repo.retry_task(
                    conn, task.task_id, self.replica, task.attempt, error, at
                )
            why = "not_retryable" if not retryable else "attempts_exhausted"
            failed = await repo.fail_task(
                conn, task.task_id, self.replica, task.attempt, error, now, why
            )
        if failed is not None:
            logger.warning("task %s failed for good (%s): %s", task.task_id, why, error)
        return failed

    async def _give_back(self, task: Task) -> None:
        try:
            async with self._db.connection() as conn:
                await repo.delay_task(
                    conn,
                    task.task_id,
                    self.replica,
                    task.attempt,
                    "worker stopped",
                    self._clock.now(),
                )
        except Exception:
            logger.warning("task %s: could not give its attempt back", task.task_id, exc_info=True)

    async def _finish(self, task: Task) -> None:
        self._resolve_waiters(task.task_id, task)
        kind = self._kinds.get(task.kind)
        if kind is None or kind.on_finished is None:
            return
        try:
            await kind.on_finished(task)
        except Exception:
            logger.exception("task %s: its on_finished hook failed", task.task_id)

    async def _renew_leases(self) -> None:
        interval = self._lease.total_seconds() / 3
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=interval)
            held = {
                task_id: task.attempt
                for task_id, (task, _) in self._running.items()
                if (task_id, task.attempt) not in self._finishing
            }
            if not held or self._stopping.is_set():
                continue
            try:
                async with self._db.connection() as conn:
                    kept = await repo.renew_leases(
                        conn, self.replica, held, self._clock.now() + self._lease
                    )
            except Exception:
                logger.warning("could not renew task leases", exc_info=True)
                continue
            for task_id in set(held) - kept:
                running = self._running.get(task_id)
                if running is None or running[0].attempt != held[task_id]:
                    continue  # ended, or replaced by a later attempt, while this ran
                if (task_id, held[task_id]) in self._finishing:
                    continue  # its outcome is being stored: that releases the lease
                logger.warning("task %s: lease lost (canceled or taken over)", task_id)
                self._drop_attempt(task_id)


def _may_see(principal: Principal, task: Task) -> bool:
    """The admin sees every task; an agent the tasks of sessions (which every agent key
    may read), the ones it submitted and the ones for it."""
    return (
        principal.is_admin
        or task.session_id is not None
        or principal.name in (task.created_by, task.agent_name)
    )


def _may_change(principal: Principal, task: Task) -> bool:
    return principal.may_delegate or principal.name in (task.created_by, task.agent_name)


async def _open_letter(conn: Connection, dead_letter_id: UUID) -> DeadLetter:
    """The dead letter, locked; 404 if unknown, 409 once requeued or discarded."""
    letter = await repo.lock_dead_letter(conn, dead_letter_id)
    if letter is None:
        raise NotFound(f"No dead letter {dead_letter_id}.")
    if letter.discarded_at is not None:
        raise Conflict(f"Dead letter {dead_letter_id} was discarded.", state="discarded")
    if letter.requeued_at is not None:
        raise Conflict(
            f"Dead letter {dead_letter_id} was requeued as task {letter.requeued_task_id}.",
            state="requeued",
        )
    return letter
