"""What the n8n webhooks do, built from the same services as the REST API."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar
from uuid import UUID

import msgspec

from app.auth.principal import Principal
from app.clock import Clock
from app.coordination.prefer import WaitPreference
from app.coordination.schemas import MessageAccepted, MessageRequest, MessageResult
from app.coordination.service import CoordinationService
from app.db.pool import BeforeCommit, Connection, Database
from app.errors import CleanupFailed, Forbidden, NotFound, SwitchboardError, ValidationFailed
from app.jobs.service import JobService
from app.jobs.table import JOBS
from app.memories.repository import MemoryFilter
from app.memories.schemas import Memory
from app.memories.service import MemoryService
from app.sessions.schemas import Session, SessionCreate, SessionState
from app.sessions.service import SessionService
from app.users.service import UserService
from app.webhooks import repository as repo
from app.webhooks.idempotency import (
    ClaimedWrite,
    ClaimingWrite,
    IdempotencyService,
    KeyClaim,
    Seal,
)
from app.webhooks.schemas import MemoryHook

T = TypeVar("T")


def _written(memory: Memory, created: bool) -> dict[str, Any]:
    """The answer to a memory write."""
    return {"action": "write", "created": created, "memory": msgspec.structs.asdict(memory)}


def _coordinated(
    session: Session, created: bool, result: MessageResult | MessageAccepted
) -> dict[str, Any]:
    """The answer to a coordination call: one flat object."""
    if not isinstance(result, MessageResult):  # no respond-async was asked for
        raise RuntimeError("The coordinator accepted a message it was to answer.")
    return {
        "session_id": str(result.session_id),
        "session_created": created,
        "user_id": str(session.user_id),
        "response": result.response,
        "agent": result.agent,
        "degraded": result.degraded,
        "fallback": result.fallback,
        "routed_to": result.routed_to,
        "clarification": result.clarification.question if result.clarification else None,
        "pending_actions": result.pending_actions,
        "progress": result.progress_percentage,
        "decision_id": str(result.decision_id),
        # The agent's task; when degraded, it still works and its answer reaches the
        # session (and subscribers of task.completed) later.
        "task_id": str(result.task_id) if result.task_id else None,
        "task_url": result.task_url,
    }


def _sealing(seal: Seal | None, answer: Callable[[T], dict[str, Any]]) -> BeforeCommit[T] | None:
    """Work for a write's transaction that stores its answer under the Idempotency-Key."""
    if seal is None:
        return None

    async def store(conn: Connection, result: T) -> None:
        await seal(conn, answer(result))

    return store


class WebhookService:
    """Coordination, memory and cleanup for n8n, as flat JSON."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        continuation_window: timedelta,
        users: UserService,
        sessions: SessionService,
        coordinator: CoordinationService,
        memories: MemoryService,
        jobs: JobService,
        idempotency: IdempotencyService,
    ) -> None:
        self._db = database
        # Who runs a webhook under its Idempotency-Key (the controller asks for it here).
        self.idempotency = idempotency
        self._clock = clock
        self._window = continuation_window
        self._users = users
        self._sessions = sessions
        self._coordinator = coordinator
        self._memories = memories
        self._jobs = jobs

    async def coordinate(
        self,
        principal: Principal,
        *,
        user_id: UUID | None,
        user_ref: str | None,
        session_id: UUID | None,
        session_type: str,
        text: str,
        channel: str | None,
        context_flags: list[str],
        prefer: WaitPreference | None = None,
        seal: Seal | None = None,
    ) -> dict[str, Any]:
        """Continue (or start) the user's session and coordinate the message, waiting for
        its agent as ``prefer`` asks (its wait only: n8n's answer is always synchronous, a
        respond-async is ignored). The answer is sealed (stored under the request's
        Idempotency-Key) in the transaction that writes the turn."""
        session, created = await self.continue_session(
            principal,
            user_id=user_id,
            user_ref=user_ref,
            session_id=session_id,
            session_type=session_type,
            channel=channel,
        )
        wait = WaitPreference(wait_seconds=prefer.wait_seconds if prefer else None)
        result = await self._coordinator.handle_message(
            session.session_id,
            MessageRequest(text=text, context_flags=context_flags),
            principal,
            self._coordinator.budget(wait),
            before_commit=_sealing(seal, lambda result: _coordinated(session, created, result)),
        )
        return _coordinated(session, created, result)

    async def continue_session(
        self,
        principal: Principal,
        *,
        user_id: UUID | None,
        user_ref: str | None,
        session_id: UUID | None,
        session_type: str,
        channel: str | None,
    ) -> tuple[Session, bool]:
        """The session a message goes to, and whether it was just created: the one named
        (which must be the user's, when a user is named too), else the user's latest open
        session of ``session_type`` within the continuation window, else a new one. The
        n8n webhook and A2A messages without a contextId (app/a2a) continue sessions so."""
        if session_id is not None:
            session = await self._sessions.get_session(session_id)
            if user_id is not None and session.user_id != user_id:
                raise ValidationFailed(
                    "The session belongs to another user.",
                    errors=[{"field": "session_id", "message": "belongs to another user"}],
                )
            return session, False
        owner = await self._resolve_user(user_id, user_ref)
        found = await self._latest_open_session(owner, session_type)
        if found is not None:
            return await self._sessions.get_session(found), False
        state = SessionState.model_validate(
            {"conversation_context": {"channel": channel}} if channel else {}
        )
        session = await self._sessions.create_session(
            SessionCreate(user_id=owner, session_type=session_type, session_state=state),
            principal.name,
        )
        return session, True

    async def memory(
        self, principal: Principal, data: MemoryHook, seal: Seal | None = None
    ) -> dict[str, Any]:
        """Write, read or query memories for ``data.agent_name``. A write's answer is
        sealed (stored under the request's Idempotency-Key) in the write's transaction."""
        acting = await self._acting_for(principal, data.agent_name)
        if data.action == "write":
            memory, created = await self._memories.remember(
                data.write(),
                acting,
                before_commit=_sealing(seal, lambda result: _written(*result)),
            )
            return _written(memory, created)
        if data.action == "read":
            name = data.memory_name()
            if data.memory_id is not None:
                memory = await self._memories.get(data.memory_id, acting)
            elif name is not None:
                memory = await self._memories.get_by_key(*name, acting)
            else:  # MemoryHook refuses such a read before it gets here
                raise ValidationFailed("A read names memory_id, or user_id, category and key.")
            return {"action": "read", "memory": msgspec.structs.asdict(memory)}
        where = MemoryFilter(
            user_id=data.user_id,
            session_id=data.session_id,
            memory_type=data.memory_type,
            category=data.category,
            since=data.since,
            contains=data.contains,
        )
        query = {
            k: str(v) for k, v in data.model_dump(exclude_none=True).items() if k != "contains"
        }
        page = await self._memories.list_memories(where, data.limit, data.cursor, acting, query)
        return {
            "action": "query",
            "items": [msgspec.structs.asdict(m) for m in page.items],
            "count": len(page.items),
            "next_cursor": page.next_cursor,
        }

    def memory_claiming(self, principal: Principal, data: MemoryHook) -> ClaimingWrite | None:
        """The write of a new memory (no key) as one statement that claims the request's
        Idempotency-Key and stores its answer with it (``IdempotencyService.run``); None
        for reads, queries and named memories, which are claimed first and run as usual."""
        if data.action != "write" or data.key is not None:
            return None

        async def write(claim: KeyClaim) -> ClaimedWrite | None:
            try:
                acting = await self._acting_for(principal, data.agent_name)
            except SwitchboardError:
                return None  # claimed first, so the refusal is stored under the key
            return await self._memories.remember_new_claiming_key(data.write(), acting, claim)

        return write

    async def cleanup(self, job: str, dry_run: bool) -> dict[str, Any]:
        """Run one job (or all) now; per-job counts. Who may is the route's guard
        (``integration_key``): it is decided before the body is read. A job that failed
        makes the whole answer a 500 problem (CleanupFailed) carrying every job's result."""
        names = sorted(JOBS) if job == "all" else [self._jobs.job(job).name]
        results: dict[str, Any] = {}
        total = 0
        for name in names:
            run = await self._jobs.run_now(name, dry_run)
            results[name] = {
                "run_id": str(run.run_id),
                "status": run.status,
                "rows_affected": run.rows_affected,
                "details": run.details,
                "error": run.error,
            }
            total += run.rows_affected if not dry_run else sum(run.details.values())
        failed = [n for n, r in results.items() if r["status"] != "succeeded"]
        if failed:
            # Not a 200: n8n's HTTP node (and any caller) sees a failure, and an
            # Idempotency-Key replay can never hand a rerun this answer (5xx is not stored).
            raise CleanupFailed(
                f"{len(failed)} of {len(names)} cleanup jobs failed: {', '.join(failed)}. "
                "Each job's result is under jobs; the others ran and are not undone.",
                dry_run=dry_run,
                jobs=results,
                total=total,
                failed=failed,
            )
        return {"dry_run": dry_run, "jobs": results, "total": total, "failed": failed}

    async def _acting_for(self, principal: Principal, agent_name: str) -> Principal:
        if agent_name == principal.name and not principal.is_admin:
            return principal
        if not principal.may_delegate:
            raise Forbidden(
                f"This key may act only as {principal.name!r}; acting for other agents needs "
                "the admin key or a coordination_manager agent key."
            )
        async with self._db.connection() as conn:
            roles = await repo.agent_roles(conn, agent_name)
        if roles is None:
            raise ValidationFailed(
                f"No enabled agent named {agent_name!r}.",
                errors=[{"field": "agent_name", "message": "unknown agent"}],
            )
        return Principal(
            kind="agent", name=agent_name, roles=frozenset(roles), delegated_by=principal.name
        )

    async def _resolve_user(self, user_id: UUID | None, user_ref: str | None) -> UUID:
        if user_id is not None:
            await self._users.require_user(user_id)
            return user_id
        if user_ref is None:
            raise ValidationFailed(
                "Send user_id or user_ref.", errors=[{"field": "user_id", "message": "required"}]
            )
        try:
            return (await self._users.find_by_external_ref(user_ref)).id
        except NotFound:
            return (await self._users.create_or_get(user_ref)).id

    async def _latest_open_session(self, user_id: UUID, session_type: str) -> UUID | None:
        now = self._clock.now()
        async with self._db.connection() as conn:
            return await repo.latest_open_session(
                conn, user_id, session_type, now - self._window, now
            )
