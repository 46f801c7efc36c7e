"""Tasks in and out of PostgreSQL: one typed function per named query (sql/queries/tasks.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import asyncpg

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.tasks.schemas import DeadLetter, NewTask, Task, TaskTransition

Q = QUERIES.tasks


def _task(row: asyncpg.Record) -> Task:
    return Task(
        task_id=row["task_id"],
        session_id=row["session_id"],
        user_id=row["user_id"],
        agent_name=row["agent_name"],
        kind=row["kind"],
        input=row["input"],
        priority=row["priority"],
        scheduled_at=row["scheduled_at"],
        status=row["status"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
        idempotency_key=row["idempotency_key"],
        created_by=row["created_by"],
        trace_id=row["trace_id"],
        traceparent=row["traceparent"],
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        last_error=row["last_error"],
        result=row["result"],
        decision_id=row["decision_id"],
        detached=row["detached"],
        requeue_of=row["requeue_of"],
    )


def _dead_letter(row: asyncpg.Record) -> DeadLetter:
    return DeadLetter(
        dead_letter_id=row["dead_letter_id"],
        task_id=row["task_id"],
        agent_name=row["agent_name"],
        kind=row["kind"],
        session_id=row["session_id"],
        user_id=row["user_id"],
        attempts=row["attempts"],
        failure_reason=row["failure_reason"],
        last_error=row["last_error"],
        failed_at=row["failed_at"],
        manual_intervention_required=row["manual_intervention_required"],
        escalation_level=row["escalation_level"],
        requeued_task_id=row["requeued_task_id"],
        requeued_at=row["requeued_at"],
        requeued_by=row["requeued_by"],
        discarded_at=row["discarded_at"],
        discarded_by=row["discarded_by"],
        discard_reason=row["discard_reason"],
    )


def _optional(row: asyncpg.Record | None) -> Task | None:
    return None if row is None else _task(row)


def _insert_args(
    task_id: UUID,
    new: NewTask,
    created_by: str,
    max_attempts: int,
    scheduled_at: datetime,
    trace: tuple[str | None, str | None],
    now: datetime,
    requeue_of: UUID | None,
) -> tuple[Any, ...]:
    return (
        task_id,
        new.session_id,
        new.user_id,
        new.agent_name,
        new.kind,
        new.input,
        new.priority,
        scheduled_at,
        max_attempts,
        new.idempotency_key,
        created_by,
        trace[0],
        trace[1],
        now,
        new.decision_id,
        requeue_of,
    )


async def insert_task(
    conn: Connection,
    task_id: UUID,
    new: NewTask,
    created_by: str,
    max_attempts: int,
    scheduled_at: datetime,
    trace: tuple[str | None, str | None],
    now: datetime,
    requeue_of: UUID | None = None,
) -> Task | None:
    """Queue a task; None if ``created_by`` already used its idempotency key."""
    args = _insert_args(
        task_id, new, created_by, max_attempts, scheduled_at, trace, now, requeue_of
    )
    return _optional(await conn.fetchrow(Q.insert_task, *args))


async def insert_task_leased(
    conn: Connection,
    task_id: UUID,
    new: NewTask,
    created_by: str,
    max_attempts: int,
    trace: tuple[str | None, str | None],
    now: datetime,
    owner: str,
    lease_until: datetime,
    agent_limit: int,
) -> Task | None:
    """Insert a task already leased to ``owner`` at attempt 1; None if the agent is at its
    limit or the key was used (the caller then queues it, or reads the existing task)."""
    args = _insert_args(task_id, new, created_by, max_attempts, now, trace, now, None)
    row = await conn.fetchrow(Q.insert_task_leased, *args, owner, lease_until, agent_limit)
    return _optional(row)


async def claim_lock(conn: Connection) -> None:
    """Take the claimers' turn (until the transaction ends)."""
    await conn.execute(Q.claim_lock)


async def claim_tasks(
    conn: Connection,
    now: datetime,
    owner: str,
    lease_until: datetime,
    limit: int,
    agent_limits: dict[str, int],
    default_limit: int,
) -> list[Task]:
    """Lease up to ``limit`` due tasks to ``owner``, agents at their limit skipped."""
    names = list(agent_limits)
    rows = await conn.fetch(
        Q.claim_tasks,
        now,
        owner,
        lease_until,
        limit,
        names,
        [agent_limits[name] for name in names],
        default_limit,
    )
    return [_task(row) for row in rows]


async def renew_leases(
    conn: Connection, owner: str, held: dict[UUID, int], lease_until: datetime
) -> set[UUID]:
    """Extend the leases ``owner`` holds on the tasks of ``held`` at those attempts; the
    ids it still holds."""
    ids = list(held)
    rows = await conn.fetch(
        Q.renew_leases, owner, ids, lease_until, [held[task_id] for task_id in ids]
    )
    return {row["task_id"] for row in rows}


async def complete_tasks(
    conn: Connection,
    owner: str,
    done: list[tuple[UUID, int, dict[str, Any]]],
    now: datetime,
) -> dict[UUID, bool]:
    """Store the results of ``owner``'s attempts (task, attempt, result); the ids stored
    with their ``detached`` flag (one whose lease was lost is left out)."""
    rows = await conn.fetch(
        Q.complete_tasks,
        owner,
        [task_id for task_id, _, _ in done],
        [attempt for _, attempt, _ in done],
        [result for _, _, result in done],
        now,
    )
    return {row["task_id"]: row["detached"] for row in rows}


async def retry_task(
    conn: Connection, task_id: UUID, owner: str, attempt: int, error: str, at: datetime
) -> Task | None:
    """Give the lease up and schedule the next attempt at ``at``."""
    return _optional(await conn.fetchrow(Q.retry_task, task_id, owner, attempt, error, at))


async def interrupt_task(
    conn: Connection,
    task_id: UUID,
    owner: str,
    attempt: int,
    status: str,
    result: dict[str, Any],
) -> Task | None:
    """The task waits for the user's input (``status``), holding ``result``."""
    return _optional(await conn.fetchrow(Q.interrupt_task, task_id, owner, attempt, status, result))


async def resume_task(
    conn: Connection,
    task_id: UUID,
    owner: str,
    new_input: dict[str, Any],
    lease_until: datetime,
    attempts: int,
    now: datetime,
) -> Task | None:
    """A task waiting for input works again with ``new_input``, leased to ``owner``."""
    return _optional(
        await conn.fetchrow(Q.resume_task, task_id, owner, new_input, lease_until, attempts, now)
    )


async def session_task_awaiting_input(conn: Connection, session_id: UUID) -> Task | None:
    """The newest task of the session that waits for the user's input."""
    return _optional(await conn.fetchrow(Q.session_task_awaiting_input, session_id))


async def delay_task(
    conn: Connection, task_id: UUID, owner: str, attempt: int, reason: str, until: datetime
) -> Task | None:
    """Give the lease and the attempt back; the task waits until ``until``."""
    return _optional(await conn.fetchrow(Q.delay_task, task_id, owner, attempt, reason, until))


async def fail_task(
    conn: Connection,
    task_id: UUID,
    owner: str,
    attempt: int,
    error: str,
    now: datetime,
    why: str,
) -> Task | None:
    """Fail the task for good and write its dead letter; None if the lease was lost."""
    return _optional(await conn.fetchrow(Q.fail_task, task_id, owner, attempt, error, now, why))


async def release_expired_leases(conn: Connection, now: datetime, reaper: str) -> int:
    """Requeue attempts whose lease ran out (attempts left); how many."""
    return len(await conn.fetch(Q.release_expired_leases, now, reaper))


async def fail_expired_leases(conn: Connection, now: datetime, reaper: str) -> list[Task]:
    """Fail (and dead-letter) tasks whose last attempt's lease ran out."""
    return [_task(row) for row in await conn.fetch(Q.fail_expired_leases, now, reaper)]


async def cancel_task(
    conn: Connection, task_id: UUID, actor: str, now: datetime, reason: str
) -> Task | None:
    """Cancel a task that is not over; None if it is (or does not exist)."""
    return _optional(await conn.fetchrow(Q.cancel_task, task_id, actor, now, reason))


async def detach_task(conn: Connection, task_id: UUID) -> Task | None:
    """Mark an unfinished task detached; None if it is over (or does not exist)."""
    return _optional(await conn.fetchrow(Q.detach_task, task_id))


async def get_task(conn: Connection, task_id: UUID) -> Task | None:
    """One task."""
    return _optional(await conn.fetchrow(Q.get_task, task_id))


async def get_tasks(conn: Connection, task_ids: list[UUID]) -> list[Task]:
    """Several tasks, in no order."""
    return [_task(row) for row in await conn.fetch(Q.get_tasks, task_ids)]


async def get_task_by_key(conn: Connection, created_by: str, key: str) -> Task | None:
    """The task ``created_by`` submitted under ``key``."""
    return _optional(await conn.fetchrow(Q.get_task_by_key, created_by, key))


async def list_session_tasks(
    conn: Connection, session_id: UUID, before: tuple[datetime, UUID], limit: int
) -> list[Task]:
    """A page of a session's tasks, newest first."""
    rows = await conn.fetch(Q.list_session_tasks, session_id, before[0], before[1], limit)
    return [_task(row) for row in rows]


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks a listing reads: whose (None: everyone's), of which session, in which
    status, changed since when (each None: any)."""

    caller: str | None = None
    session_id: UUID | None = None
    status: str | None = None
    changed_since: datetime | None = None

    def args(self) -> tuple[str | None, UUID | None, str | None, datetime | None]:
        """The named queries' first four parameters."""
        return (self.caller, self.session_id, self.status, self.changed_since)


async def list_visible_tasks(
    conn: Connection, where: TaskFilter, before: tuple[datetime, UUID], limit: int
) -> list[Task]:
    """A page of the tasks ``where`` selects, newest first."""
    rows = await conn.fetch(Q.list_visible_tasks, *where.args(), before[0], before[1], limit)
    return [_task(row) for row in rows]


async def count_visible_tasks(conn: Connection, where: TaskFilter) -> int:
    """How many tasks ``where`` selects."""
    count: int = await conn.fetchval(Q.count_visible_tasks, *where.args())
    return count


async def task_transitions(conn: Connection, task_id: UUID) -> list[TaskTransition]:
    """A task's history, oldest first."""
    return [
        TaskTransition(
            from_status=row["from_status"],
            to_status=row["to_status"],
            attempt=row["attempt"],
            actor=row["actor"],
            reason=row["reason"],
            at=row["at"],
            due_at=row["due_at"],
        )
        for row in await conn.fetch(Q.task_transitions, task_id)
    ]


async def list_dead_letters(
    conn: Connection, state: str, before: tuple[datetime, UUID], limit: int
) -> list[DeadLetter]:
    """A page of dead letters in ``state``, newest first."""
    rows = await conn.fetch(Q.list_dead_letters, state, before[0], before[1], limit)
    return [_dead_letter(row) for row in rows]


async def lock_dead_letter(conn: Connection, dead_letter_id: UUID) -> DeadLetter | None:
    """A dead letter, locked until the transaction ends."""
    row = await conn.fetchrow(Q.lock_dead_letter, dead_letter_id)
    return None if row is None else _dead_letter(row)


async def get_dead_letter(conn: Connection, dead_letter_id: UUID) -> DeadLetter | None:
    """A dead letter."""
    row = await conn.fetchrow(Q.get_dead_letter, dead_letter_id)
    return None if row is None else _dead_letter(row)


async def mark_requeued(
    conn: Connection, dead_letter_id: UUID, task_id: UUID, now: datetime, actor: str
) -> None:
    """Record the task that retries a dead letter."""
    await conn.execute(Q.mark_requeued, dead_letter_id, task_id, now, actor)


async def mark_discarded(
    conn: Connection, dead_letter_id: UUID, now: datetime, actor: str, reason: str | None
) -> None:
    """Record that a dead letter was given up, by whom and why."""
    await conn.execute(Q.mark_discarded, dead_letter_id, now, actor, reason)
