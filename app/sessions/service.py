"""Session rules: creation, optimistic writes with a version row per change, handoffs,
completion, heartbeats, history and rollback. The one place these rules live: the API,
the webhooks and the scheduler all call this service."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from app.clock import Clock
from app.common.pagination import (
    DEFAULT_LIMIT,
    FIRST_PAGE,
    cut_page,
    decode_time_id_cursor,
)
from app.common.preconditions import MAX_VERSION
from app.db.pool import BeforeCommit, Connection, Database
from app.errors import (
    BadRequest,
    Conflict,
    MergeConflicted,
    NotFound,
    ValidationFailed,
    VersionConflict,
)
from app.events.schemas import NewEvent
from app.sessions import repository as repo
from app.sessions.patching import patched
from app.sessions.schemas import (
    CLOSED_STATUSES,
    Completion,
    Handoff,
    Rollback,
    Session,
    SessionContent,
    SessionCreate,
    SessionPage,
    SessionVersion,
    SessionVersionPage,
    WrittenContent,
)
from app.sessions.sequence import EMPTY
from app.sessions.state import (
    PATCHABLE,
    close_current_execution,
    content_from_document,
    content_of,
    evolve,
    keep_last_executions,
    merge_contents,
    resolve_mirrored,
    session_at,
    start_execution,
    typed_content,
    version_content,
)
from app.settings import SessionSettings
from app.users import repository as users_repo

# Optimistic tries of a write before it falls back to locking the row (contended sessions).
_OPTIMISTIC_ATTEMPTS = 3

Mutation = Callable[[Session, datetime], tuple[WrittenContent, str]]


class SessionService:
    """Creates and changes sessions; every change is versioned and conflict-checked."""

    def __init__(self, database: Database, clock: Clock, settings: SessionSettings) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings

    # -- reads -------------------------------------------------------------------------

    async def get_session(self, session_id: UUID) -> Session:
        """One session (404 if unknown)."""
        async with self._db.connection() as conn:
            session = await repo.get_session(conn, session_id)
        if session is None:
            raise NotFound(f"No session {session_id}.")
        return session

    async def list_user_sessions(
        self,
        user_id: UUID,
        status: str | None,
        limit: int = DEFAULT_LIMIT,
        cursor: str | None = None,
    ) -> SessionPage:
        """A user's sessions, newest first, one keyset page at a time."""
        before = decode_time_id_cursor(cursor) if cursor else FIRST_PAGE
        async with self._db.connection() as conn:
            items = await repo.list_user_sessions(conn, user_id, status, before, limit + 1)
            if not items and not await users_repo.user_exists(conn, user_id):
                raise NotFound(f"No user {user_id}.")
        page, next_cursor = cut_page(items, limit, lambda s: (s.created_at, s.session_id))
        return SessionPage(items=page, next_cursor=next_cursor)

    async def list_versions(
        self, session_id: UUID, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> SessionVersionPage:
        """A session's history, newest first; the cursor is the last version seen."""
        before = MAX_VERSION + 1
        if cursor is not None:
            # ASCII only: isdigit() also takes superscripts (int() then fails: a 500) and
            # other scripts' digits, none of which this server issues.
            if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 18:
                # A parameter, so a 400 as every other cursor's (app/common/pagination.py).
                raise BadRequest(
                    "The cursor is not one this server issued.",
                    parameter="cursor",
                    errors=[{"field": "cursor", "message": "expected a version number"}],
                )
            before = int(cursor)
        async with self._db.connection() as conn:
            items = await repo.list_session_versions(conn, session_id, before, limit + 1)
            if not items and await repo.get_session(conn, session_id) is None:
                raise NotFound(f"No session {session_id}.")
        next_cursor = None
        if len(items) > limit:
            items = items[:limit]
            next_cursor = str(items[-1].version)
        return SessionVersionPage(items=items, next_cursor=next_cursor)

    async def get_version(self, session_id: UUID, version: int) -> SessionVersion:
        """One version of a session (404 if either is unknown)."""
        async with self._db.connection() as conn:
            found = await repo.get_session_version(conn, session_id, version)
        if found is None:
            raise NotFound(f"Session {session_id} has no version {version}.")
        return found

    # -- writes ------------------------------------------------------------------------

    async def create_session(self, data: SessionCreate, actor: str) -> Session:
        """Open a session at version 1 and record that version."""
        lifetime = self._lifetime(data.ttl_seconds)
        progress = resolve_mirrored(
            data.model_dump(include={"progress_percentage", "session_state"}, exclude_unset=True),
            "progress_percentage",
            "session_state",
            "progress_percentage",
            0,
        )
        priority = resolve_mirrored(
            data.model_dump(include={"priority", "coordination_metadata"}, exclude_unset=True),
            "priority",
            "coordination_metadata",
            "session_priority",
            "normal",
        )
        # An explicit null asks for the default, as leaving the field out does.
        progress = 0 if progress is None else progress
        priority = "normal" if priority is None else priority
        content = SessionContent(
            session_state=evolve(data.session_state, progress_percentage=None),
            agent_sequence=EMPTY,
            coordination_metadata=evolve(data.coordination_metadata, session_priority=None),
            current_agent=data.current_agent,
            progress_percentage=progress,
            status="active",
            priority=priority,
            preserve=data.preserve,
            completed_at=None,
        )
        now = self._clock.now()
        # One statement writes the session and its version row: no transaction needed.
        async with self._db.connection() as conn:
            session = await repo.insert_session(
                conn,
                user_id=data.user_id,
                session_type=data.session_type,
                content=content,
                now=now,
                expires_at=now + lifetime,
                changed_by=actor,
            )
        if session is None:
            raise ValidationFailed(
                f"No user {data.user_id}; create the user first.",
                errors=[{"field": "user_id", "message": "unknown user"}],
            )
        return session

    async def patch_session(
        self,
        session_id: UUID,
        patch: dict[str, Any],
        bases: set[int] | None,
        actor: str,
        merge: bool | None = None,
    ) -> Session:
        """Apply a JSON merge patch to the editable view of the session; ``merge`` (default:
        the setting) merges a patch based on an older version with the changes since."""
        unknown = sorted(set(patch) - PATCHABLE - {"base_version"})
        if unknown:
            raise ValidationFailed(
                "These fields cannot be changed with PATCH.",
                errors=[{"field": name, "message": "not patchable"} for name in unknown],
            )
        patch = {k: v for k, v in patch.items() if k != "base_version"}

        def mutate(current: Session, _: datetime) -> tuple[WrittenContent, str]:
            return patched(current, patch), "patched"

        return await self._versioned_write(session_id, bases, actor, mutate, merge)

    async def handoff(
        self,
        session_id: UUID,
        data: Handoff,
        bases: set[int] | None,
        actor: str,
        merge: bool | None = None,
    ) -> Session:
        """Close the current agent's step and start one for ``to_agent``, which must be a
        registered agent that is neither switched off nor revoked (422 otherwise)."""
        async with self._db.connection() as conn:
            read, to_agent = await repo.get_session_for_handoff(conn, session_id, data.to_agent)

        def mutate(current: Session, now: datetime) -> tuple[SessionContent, str]:
            require_open(current)
            _require_available(data.to_agent, to_agent)
            base = content_of(current)
            sequence = close_current_execution(
                base.agent_sequence,
                now=now,
                outcome=data.outcome,
                output_summary=data.output_summary,
                next_agent=data.to_agent,
            )
            sequence = start_execution(sequence, data.to_agent, now)
            content = replace(
                base,
                agent_sequence=sequence,
                current_agent=data.to_agent,
                status="active" if base.status == "idle" else base.status,
            )
            return content, f"handoff to {data.to_agent}: {data.reason}"

        # The read above is the first optimistic base; a retry re-reads only the session
        # (an agent switched off in between is a race the next handoff settles).
        written, _ = await self._write(
            session_id, bases, actor, mutate, read, None, merge=self.merging(merge)
        )
        return written

    async def complete(
        self, session_id: UUID, data: Completion, bases: set[int] | None, actor: str
    ) -> Session:
        """Mark the session completed; the running step (if any) completes with it."""

        def mutate(current: Session, now: datetime) -> tuple[SessionContent, str]:
            require_open(current)
            base = content_of(current)
            sequence = close_current_execution(
                base.agent_sequence,
                now=now,
                outcome="completed",
                output_summary=data.output_summary,
                next_agent=None,
            )
            content = replace(
                base,
                session_state=evolve(base.session_state, active_process=None),
                agent_sequence=sequence,
                status="completed",
                completed_at=now,
            )
            return content, "completed"

        return await self._versioned_write(session_id, bases, actor, mutate)

    async def rollback(
        self, session_id: UUID, data: Rollback, bases: set[int] | None, actor: str
    ) -> Session:
        """Write a new version whose content equals ``to_version`` (its agent sequence
        capped like every write's); history is never rewritten."""
        async with self._db.connection() as conn:
            target = await repo.get_session_version(conn, session_id, data.to_version)
        if target is None:
            raise NotFound(f"Session {session_id} has no version {data.to_version}.")

        def mutate(current: Session, _: datetime) -> tuple[SessionContent, str]:
            require_open(current)
            # The old version goes through today's rules, as a write of it would; status,
            # preserve and completed_at are not content: they stay as they are now.
            content = version_content(target, current)
            return content, f"rollback to version {data.to_version}"

        return await self._versioned_write(session_id, bases, actor, mutate)

    async def touch(self, session_id: UUID) -> Session:
        """Heartbeat: activity now; a running process keeps the session alive longer."""
        async with self._db.transaction() as conn:
            session = await repo.touch_session(
                conn, session_id, self._clock.now(), self._settings.active_process_extension
            )
            if session is None:
                existing = await repo.get_session(conn, session_id)
                if existing is None:
                    raise NotFound(f"No session {session_id}.")
                raise Conflict(
                    f"Session {session_id} is {existing.status}.", session_status=existing.status
                )
        return session

    async def apply_change(
        self,
        session_id: UUID,
        actor: str,
        mutate: Mutation,
        *,
        read: Session | None = None,
        decision: msgspec.Struct | None = None,
        event: NewEvent | None = None,
        before_commit: BeforeCommit[tuple[Session, UUID | None]] | None = None,
    ) -> tuple[Session, UUID | None]:
        """A server-side change (the coordinator's): applied to whatever version is current,
        versioned like any other write. ``read`` is the session as the caller last read it,
        tried first as the base; ``decision`` is logged with the new version (its id is
        returned with the session), and ``event`` is written to the outbox with it.
        ``before_commit`` runs in the write's transaction with what it wrote."""

        def guarded(current: Session, now: datetime) -> tuple[WrittenContent, str]:
            require_open(current)
            return mutate(current, now)

        return await self._write(
            session_id,
            None,
            actor,
            guarded,
            read,
            decision,
            event=event,
            before_commit=before_commit,
        )

    # -- helpers -----------------------------------------------------------------------

    def merging(self, requested: bool | None) -> bool:
        """Whether a write based on an older version is merged: as the request asks
        (Prefer: merge=...), else as the setting says."""
        if requested is not None:
            return requested
        return self._settings.merge_default == "auto"

    async def _versioned_write(
        self,
        session_id: UUID,
        bases: set[int] | None,
        actor: str,
        mutate: Mutation,
        merge: bool | None = False,
    ) -> Session:
        written, _ = await self._write(
            session_id, bases, actor, mutate, None, None, merge=self.merging(merge)
        )
        return written

    async def _write(
        self,
        session_id: UUID,
        bases: set[int] | None,
        actor: str,
        mutate: Mutation,
        read: Session | None,
        decision: msgspec.Struct | None,
        *,
        merge: bool = False,
        event: NewEvent | None = None,
        before_commit: BeforeCommit[tuple[Session, UUID | None]] | None = None,
    ) -> tuple[Session, UUID | None]:
        """Check the base version, apply ``mutate``, bump and record the version.

        Optimistic first: read (unless ``read`` is given), then one statement that writes
        only if the version is unchanged (no transaction, unless ``before_commit`` must
        commit with the write). A write that keeps losing that race takes the row lock
        instead. With ``merge``, a write based on an older version is merged three-way with
        what happened since instead of refused.
        """
        now = self._clock.now()
        atomic = before_commit is not None
        for _ in range(_OPTIMISTIC_ATTEMPTS):
            async with self._db.transaction() if atomic else self._db.connection() as conn:
                if read is None or read.session_id != session_id:
                    read = await repo.get_session(conn, session_id)
                current = _found(session_id, read)
                content, reason, mark = await self._change(conn, current, bases, mutate, now, merge)
                written = await repo.update_session_content(
                    conn,
                    session_id,
                    current.version,
                    content,
                    actor,
                    reason,
                    now,
                    decision,
                    mark,
                    event,
                )
                if written is not None and before_commit is not None:
                    await before_commit(conn, written)
            if written is not None:
                return written
            read = None  # someone else wrote first: read again
        async with self._db.transaction() as conn:
            current = _found(session_id, await repo.lock_session(conn, session_id))
            content, reason, mark = await self._change(conn, current, bases, mutate, now, merge)
            written = await repo.update_session_content(
                conn,
                session_id,
                current.version,
                content,
                actor,
                reason,
                now,
                decision,
                mark,
                event,
            )
            if written is None:  # cannot happen while we hold the row lock
                raise VersionConflict(f"Session {session_id} changed underneath this write.")
            if before_commit is not None:
                await before_commit(conn, written)
        return written

    async def _change(
        self,
        conn: Connection,
        current: Session,
        bases: set[int] | None,
        mutate: Mutation,
        now: datetime,
        merge: bool,
    ) -> tuple[WrittenContent, str, repo.MergeMark | None]:
        """The content to write over ``current``: ``mutate`` applied to it when it is at one
        of the ``bases``; else, with ``merge``, ``mutate`` applied to the newest base and
        merged three-way with ``current`` (409 listing the conflicts); else 409."""
        if bases is None or current.version in bases:
            content, reason = self._bounded(mutate(current, now))
            return content, reason, None
        base_version = max(bases)
        found = None
        if merge and base_version < current.version:
            found = await repo.get_session_version(conn, current.session_id, base_version)
        if found is None:
            raise _stale(current, bases)
        require_open(current)
        proposed, reason = self._bounded(mutate(session_at(found, current), now))
        # The base as stored, as the current content is: the merge compares stored steps.
        merged = merge_contents(typed_content(found, current), content_of(current), proposed)
        if not merged.clean:
            raise MergeConflicted(
                f"Session {current.session_id} is at version {current.version}; this write, "
                f"based on version {base_version}, changes paths that changed since. "
                "Re-read, reapply your change and retry, or resolve the listed conflicts.",
                current_version=current.version,
                base_version=base_version,
                conflicts=[conflict.as_json() for conflict in merged.conflicts],
            )
        content = content_from_document(merged.document, proposed)
        content, _ = self._bounded((content, reason))
        return (
            content,
            f"{reason} (merged from version {base_version})",
            repo.MergeMark(base=base_version),
        )

    def _bounded(self, change: tuple[WrittenContent, str]) -> tuple[WrittenContent, str]:
        """The change with only the last ``agent_sequence_limit`` executions kept."""
        content, reason = change
        return keep_last_executions(content, self._settings.agent_sequence_limit), reason

    def _lifetime(self, ttl_seconds: int | None) -> timedelta:
        if ttl_seconds is None:
            return self._settings.default_ttl
        # Compared as numbers first: a huge ttl_seconds would overflow timedelta (a 500).
        if ttl_seconds > self._settings.max_ttl.total_seconds():
            raise ValidationFailed(
                f"ttl_seconds may be at most {int(self._settings.max_ttl.total_seconds())}.",
                errors=[{"field": "ttl_seconds", "message": "above the configured maximum"}],
            )
        return timedelta(seconds=ttl_seconds)


def require_open(session: Session) -> None:
    """409 naming the status if the session is closed (it takes no content changes)."""
    if session.status in CLOSED_STATUSES:
        raise Conflict(
            f"Session {session.session_id} is {session.status}.", session_status=session.status
        )


def _found(session_id: UUID, current: Session | None) -> Session:
    """``current``, if the session exists (else 404)."""
    if current is None:
        raise NotFound(f"No session {session_id}.")
    return current


def _stale(current: Session, bases: set[int]) -> VersionConflict:
    """The 409 of a strict write based on a version that is no longer current."""
    return VersionConflict(
        f"Session {current.session_id} is at version {current.version}, not "
        f"{_describe(bases)}; re-read it, reapply your change and retry (or send "
        "Prefer: merge=auto to have a change to other paths merged).",
        current_version=current.version,
        current=current,
    )


def _require_available(name: str, state: repo.AgentState) -> None:
    """A session is handed only to an agent that exists and may work (422 naming to_agent)."""
    if state == "available":
        return
    if state is None:
        detail = f"No agent named {name!r} is registered; hand the session to a registered agent."
        message = "not a registered agent"
    elif state == "revoked":
        detail = f"Agent {name!r} is disabled (its key was revoked); issue it a new key first."
        message = "agent is disabled"
    else:
        detail = f"Agent {name!r} is disabled (enabled is false); enable it first."
        message = "agent is disabled"
    raise ValidationFailed(detail, errors=[{"field": "to_agent", "message": message}])


def _describe(bases: set[int]) -> str:
    return " or ".join(str(v) for v in sorted(bases))
