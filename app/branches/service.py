"""Branch rules: fork a session at a version, write to a branch (optimistic, with the same
auto-merge as the session), merge a branch into the session three-way (conflicts listed,
then settled by a resolution), rebase it onto the session's head, delete it, and expire
idle ones. ``main`` is the session itself (app/sessions)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import asyncpg
import msgspec

from app.auth.principal import Principal
from app.branches import repository as repo
from app.branches.schemas import (
    MAIN,
    Branch,
    BranchCreate,
    BranchList,
    BranchVersion,
    BranchVersionPage,
    GraphNode,
    MergeResolution,
    SessionGraph,
)
from app.clock import Clock
from app.common.pagination import DEFAULT_LIMIT
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
from app.jobs.sweep import Sweep
from app.memories.branch_service import (
    MEMORY_PATHS,
    branch_memory_conflicts,
    merge_branch_memories,
)
from app.sessions import repository as sessions_repo
from app.sessions.merge import Choice, MergeConflict, MergeResult, resolve
from app.sessions.patching import patched
from app.sessions.schemas import Session, SessionVersion, WrittenContent
from app.sessions.service import Mutation, require_open
from app.sessions.state import (
    DOCUMENT_FIELDS,
    PATCHABLE,
    content_from_document,
    content_of,
    keep_last_executions,
    merge_contents,
    session_at,
    typed_content,
)
from app.settings import SessionSettings

# What a resolution document may set: the content, not the session's status.
RESOLVABLE = frozenset(DOCUMENT_FIELDS) - {"status"}
# What a branch write may change: the session's content, not its life (status, preserve).
BRANCH_PATCHABLE = PATCHABLE - {"status", "preserve"}


class BranchService:
    """Forks, writes, merges, rebases and deletes branches of sessions."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: SessionSettings,
        max_memory_bytes: int = 1024 * 1024,
    ) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings
        self._max_memory_bytes = max_memory_bytes

    # -- reads -------------------------------------------------------------------------

    async def list_branches(self, session_id: UUID) -> BranchList:
        """A session's branches, oldest first, with the session's head version."""
        async with self._db.connection() as conn:
            session = await _session(conn, session_id)
            items = await repo.list_branches(conn, session_id)
        return BranchList(items=items, session_version=session.version)

    async def get_branch(self, session_id: UUID, name: str) -> Branch:
        """One branch (404 if the session or the branch is unknown)."""
        async with self._db.connection() as conn:
            branch = await repo.get_branch(conn, session_id, name)
            if branch is None:
                await _session(conn, session_id)
        return _found(branch, session_id, name)

    async def document(self, session_id: UUID, name: str, *, writable: bool = True) -> Session:
        """The branch shown as its session (the branch's content and version, the session's
        identity and life): what the coordinator reads on the branch. ``writable``: 404 for
        an unknown branch, 409 for a merged one or a closed session, as a write would."""
        async with self._db.connection() as conn:
            session = await _session(conn, session_id)
            branch = _found(await repo.get_branch(conn, session_id, name), session_id, name)
        if writable:
            _open(branch, session_id, name)
            require_open(session)
        return session_at(branch, session)

    async def list_versions(
        self, session_id: UUID, name: str, limit: int = DEFAULT_LIMIT, cursor: str | None = None
    ) -> BranchVersionPage:
        """A branch's history, newest first; the cursor is the last version seen."""
        before = MAX_VERSION + 1
        if cursor is not None:
            if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 18:
                raise BadRequest(
                    "The cursor is not one this server issued.",
                    parameter="cursor",
                    errors=[{"field": "cursor", "message": "expected a version number"}],
                )
            before = int(cursor)
        async with self._db.connection() as conn:
            _found(await repo.get_branch(conn, session_id, name), session_id, name)
            items = await repo.list_branch_versions(conn, session_id, name, before, limit + 1)
        next_cursor = None
        if len(items) > limit:
            items = items[:limit]
            next_cursor = str(items[-1].version)
        return BranchVersionPage(items=items, next_cursor=next_cursor)

    async def get_version(self, session_id: UUID, name: str, version: int) -> BranchVersion:
        """One version of a branch (404 if any of the three is unknown)."""
        async with self._db.connection() as conn:
            found = await repo.get_branch_version(conn, session_id, name, version)
        if found is None:
            raise NotFound(f"Branch {name!r} of session {session_id} has no version {version}.")
        return found

    async def graph(self, session_id: UUID) -> SessionGraph:
        """The session's versions and its branches' versions as one graph: each node names
        the versions it came from (``branch@version``)."""
        async with self._db.connection() as conn:
            await _session(conn, session_id)
            main_rows, branch_rows = await repo.graph_rows(conn, session_id)
        nodes: list[GraphNode] = []
        for row in main_rows:
            parents = [f"{MAIN}@{row['version'] - 1}"] if row["version"] > 1 else []
            if row["merged_branch"] is not None:
                parents.append(f"{row['merged_branch']}@{row['merged_branch_version']}")
            nodes.append(_node(MAIN, row, parents))
        previous: dict[str, int] = {}
        for row in branch_rows:
            branch = row["branch"]
            parents = [f"{branch}@{previous[branch]}"] if branch in previous else []
            if row["parent_version"] is not None:
                parents.append(f"{MAIN}@{row['parent_version']}")
            previous[branch] = row["version"]
            nodes.append(_node(branch, row, parents))
        return SessionGraph(session_id=session_id, nodes=nodes)

    # -- writes ------------------------------------------------------------------------

    async def fork(self, session_id: UUID, data: BranchCreate, actor: str) -> Branch:
        """A new branch with the content of the session at ``from_version`` (default: now)."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            session = await _session(conn, session_id)
            require_open(session)
            at = session.version if data.from_version is None else data.from_version
            if at > session.version:
                raise ValidationFailed(
                    f"Session {session_id} has no version {at} (it is at {session.version}).",
                    errors=[{"field": "from_version", "message": "no such version"}],
                )
            try:
                branch = await repo.fork_branch(
                    conn,
                    session_id,
                    at,
                    data.name,
                    data.purpose,
                    data.owner_agent or actor,
                    actor,
                    now,
                )
            except asyncpg.UniqueViolationError:
                raise Conflict(
                    f"Session {session_id} already has a branch named {data.name!r}.",
                    branch=data.name,
                ) from None
        if branch is None:  # versions are never removed from a live session
            raise NotFound(f"Session {session_id} has no version {at}.")
        return branch

    async def patch_branch(
        self,
        session_id: UUID,
        name: str,
        patch: dict[str, Any],
        bases: set[int] | None,
        actor: str,
        merge: bool | None = None,
    ) -> Branch:
        """A JSON merge patch on the branch, as on the session: based on the branch version
        in ``bases``; an older base merges three-way with ``merge`` (default: the setting)."""
        unknown = sorted(set(patch) - BRANCH_PATCHABLE - {"base_version"})
        if unknown:
            raise ValidationFailed(
                "These fields cannot be changed on a branch.",
                errors=[{"field": field, "message": "not patchable"} for field in unknown],
            )
        patch = {k: v for k, v in patch.items() if k != "base_version"}
        merging = merge if merge is not None else self._settings.merge_default == "auto"
        now = self._clock.now()
        async with self._db.transaction() as conn:
            session = await _session(conn, session_id)
            branch = _open(await repo.lock_branch(conn, session_id, name), session_id, name)
            require_open(session)
            merge_base = None
            if bases is None or branch.version in bases:
                content = patched(session_at(branch, session), patch)
                reason = "patched"
            else:
                base_version = max(bases)
                found = None
                if merging and base_version < branch.version:
                    found = await repo.get_branch_version(conn, session_id, name, base_version)
                if found is None:
                    raise VersionConflict(
                        f"Branch {name!r} is at version {branch.version}, not "
                        f"{' or '.join(str(v) for v in sorted(bases))}; re-read it, reapply "
                        "your change and retry (or send Prefer: merge=auto).",
                        current_version=branch.version,
                    )
                proposed = patched(session_at(found, session), patch)
                result = merge_contents(
                    typed_content(found, session), typed_content(branch, session), proposed
                )
                if not result.clean:
                    raise _conflicted(
                        f"Branch {name!r} is at version {branch.version}; this write, based "
                        f"on version {base_version}, changes paths that changed since.",
                        result,
                        current_version=branch.version,
                        base_version=base_version,
                    )
                content = content_from_document(result.document, proposed)
                reason, merge_base = f"patched (merged from version {base_version})", base_version
            written = await repo.update_branch_content(
                conn, branch, self._bounded(content), actor, reason, now, merge_base=merge_base
            )
        if written is None:  # cannot happen while we hold the row lock
            raise VersionConflict(f"Branch {name!r} changed underneath this write.")
        return written[0]

    async def apply_change(
        self,
        session_id: UUID,
        name: str,
        actor: str,
        mutate: Mutation,
        *,
        decision: msgspec.Struct | None = None,
        event: NewEvent | None = None,
        before_commit: BeforeCommit[tuple[Session, UUID | None]] | None = None,
    ) -> tuple[Session, UUID | None]:
        """A server-side change on the branch (a coordinator's turn, a task's late answer):
        ``mutate`` applied to the branch's head under its row lock and written as its next
        version, with ``decision`` (naming the branch; its id is returned) and ``event``.
        404 for an unknown branch, 409 for a merged one or a closed session.
        ``before_commit`` runs in the write's transaction with what it wrote (the branch
        shown as its session)."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            session = await _session(conn, session_id)
            branch = _open(await repo.lock_branch(conn, session_id, name), session_id, name)
            require_open(session)
            content, reason = mutate(session_at(branch, session), now)
            written = await repo.update_branch_content(
                conn,
                branch,
                self._bounded(content),
                actor,
                reason,
                now,
                decision=decision,
                event=event,
            )
            if written is None:  # cannot happen while we hold the row lock
                raise VersionConflict(f"Branch {name!r} changed underneath this write.")
            shown = session_at(written[0], session), written[1]
            if before_commit is not None:
                await before_commit(conn, shown)
        return shown

    async def merge(
        self,
        session_id: UUID,
        name: str,
        resolution: MergeResolution | None,
        principal: Principal,
    ) -> Session:
        """Merge the branch into the session three-way (base: the session version the
        branch sits on; theirs: the session now; ours: the branch), and the branch's
        memories into main's in the same transaction. Clean, or settled by ``resolution``:
        a new session version naming the branch, and the branch is merged. Otherwise 409
        listing the conflicts (session paths and ``/memories/{category}/{key}``)."""
        now = self._clock.now()
        actor = principal.name
        async with self._db.transaction() as conn:
            # The session's row first, then the branch's: the order in which deleting a
            # session (archival, erasure) takes them, so the two never wait on each other.
            session = await sessions_repo.lock_session(conn, session_id)
            if session is None:
                raise NotFound(f"No session {session_id}.")
            branch = _open(await repo.lock_branch(conn, session_id, name), session_id, name)
            require_open(session)
            base = await _session_version(conn, session_id, branch.base_version)
            current = content_of(session)
            result = merge_contents(
                typed_content(base, session), current, typed_content(branch, session)
            )
            rows, memory_conflicts = await branch_memory_conflicts(
                conn, session_id, session.user_id, name, now, principal
            )
            detail = (
                f"Branch {name!r} (version {branch.version}) and session {session_id} "
                f"(version {session.version}) both changed these paths since version "
                f"{branch.base_version}."
            )
            extensions: dict[str, Any] = {
                "current_version": session.version,
                "branch_version": branch.version,
                "base_version": branch.base_version,
            }
            if resolution is None and memory_conflicts:
                both = MergeResult(result.document, result.conflicts + memory_conflicts)
                raise _conflicted(detail, both, **extensions)
            session_resolution, memory_choices = _split_choices(resolution)
            _check_memory_choices(memory_conflicts, memory_choices)
            document = _settled(result, session_resolution, detail, **extensions)
            content = self._bounded(content_from_document(document, current))
            written = await sessions_repo.update_session_content(
                conn,
                session_id,
                session.version,
                content,
                actor,
                f"merge branch {name} (version {branch.version})",
                now,
                merge=sessions_repo.MergeMark(
                    base=branch.base_version, branch=name, branch_version=branch.version
                ),
            )
            if written is None:  # cannot happen while we hold the row lock
                raise VersionConflict(f"Session {session_id} changed underneath this merge.")
            merged, _ = written
            await repo.mark_branch_merged(conn, session_id, name, merged.version, now)
            await merge_branch_memories(
                conn,
                session_id,
                name,
                rows,
                memory_conflicts,
                memory_choices,
                principal,
                now,
                self._max_memory_bytes,
            )
        return merged

    async def rebase(
        self, session_id: UUID, name: str, resolution: MergeResolution | None, actor: str
    ) -> Branch:
        """Replay the branch's changes onto the session's head: a new branch version that
        sits on it. Conflicts: 409 listing them, or settled by ``resolution``."""
        now = self._clock.now()
        async with self._db.transaction() as conn:
            branch = _open(await repo.lock_branch(conn, session_id, name), session_id, name)
            session = await _session(conn, session_id)
            require_open(session)
            if branch.base_version == session.version:
                return branch  # already on the head: nothing to replay
            base = await _session_version(conn, session_id, branch.base_version)
            result = merge_contents(
                typed_content(base, session), content_of(session), typed_content(branch, session)
            )
            document = _settled(
                result,
                resolution,
                f"Branch {name!r} and session {session_id} (version {session.version}) both "
                f"changed these paths since version {branch.base_version}.",
                current_version=session.version,
                branch_version=branch.version,
                base_version=branch.base_version,
            )
            content = self._bounded(content_from_document(document, content_of(session)))
            written = await repo.update_branch_content(
                conn,
                branch,
                content,
                actor,
                f"rebased onto main at version {session.version}",
                now,
                rebased_onto=session.version,
            )
        if written is None:  # cannot happen while we hold the row lock
            raise VersionConflict(f"Branch {name!r} changed underneath this rebase.")
        return written[0]

    async def delete(self, session_id: UUID, name: str) -> None:
        """Delete a branch and its versions (merged or not)."""
        async with self._db.connection() as conn:
            if not await repo.delete_branch(conn, session_id, name):
                await _session(conn, session_id)
                raise NotFound(f"Session {session_id} has no branch {name!r}.")

    # -- sweep (called by the jobs) ------------------------------------------------------

    async def expire_idle(self, sweep: Sweep) -> None:
        """Open branches with no write for ``branch_idle_ttl`` are deleted, unless their
        session is preserved (a preserved session keeps its branches)."""
        before = sweep.now - self._settings.branch_idle_ttl
        await sweep.step(
            "branches_expired",
            lambda conn, limit: repo.expire_idle(conn, before, limit),
            lambda conn: repo.count_idle(conn, before),
        )

    def _bounded(self, content: WrittenContent) -> WrittenContent:
        return keep_last_executions(content, self._settings.agent_sequence_limit)


async def _session(conn: Connection, session_id: UUID) -> Session:
    session = await sessions_repo.get_session(conn, session_id)
    if session is None:
        raise NotFound(f"No session {session_id}.")
    return session


async def _session_version(conn: Connection, session_id: UUID, version: int) -> SessionVersion:
    found = await sessions_repo.get_session_version(conn, session_id, version)
    if found is None:  # versions are never removed from a live session
        raise NotFound(f"Session {session_id} has no version {version}.")
    return found


def _found(branch: Branch | None, session_id: UUID, name: str) -> Branch:
    if branch is None:
        raise NotFound(f"Session {session_id} has no branch {name!r}.")
    return branch


def _open(branch: Branch | None, session_id: UUID, name: str) -> Branch:
    """The branch, if it exists (404) and takes changes (409 once merged)."""
    found = _found(branch, session_id, name)
    if found.state != "open":
        raise Conflict(
            f"Branch {name!r} was merged as session version {found.merged_version}; it takes "
            "no more changes. Fork a new branch to go on.",
            branch_state=found.state,
        )
    return found


def _conflicted(detail: str, result: MergeResult, **extensions: Any) -> MergeConflicted:
    return MergeConflicted(
        detail + " Resolve them: POST the merge again with a choice per path.",
        conflicts=[conflict.as_json() for conflict in result.conflicts],
        **extensions,
    )


def _split_choices(
    resolution: MergeResolution | None,
) -> tuple[MergeResolution | None, dict[str, Choice]]:
    """The resolution of the session's paths, and the choices for memory keys."""
    if resolution is None or resolution.choices is None:
        return resolution, {}
    memory = {
        path: Choice(choice.take, choice.value)
        for path, choice in resolution.choices.items()
        if path.startswith(MEMORY_PATHS)
    }
    rest = {p: c for p, c in resolution.choices.items() if not p.startswith(MEMORY_PATHS)}
    if resolution.document is not None:
        return MergeResolution(document=resolution.document), memory
    return MergeResolution(choices=rest), memory


def _check_memory_choices(conflicts: list[MergeConflict], choices: dict[str, Choice]) -> None:
    """Exactly one choice per conflicting memory key (422 naming each one missing or
    extra), as resolve() asks of the session's paths."""
    paths = {conflict.path for conflict in conflicts}
    errors = [
        {"field": path, "message": "no choice for this conflicting path"}
        for path in sorted(paths - set(choices))
    ] + [
        {"field": path, "message": "not a conflicting path of this merge"}
        for path in sorted(set(choices) - paths)
    ]
    if errors:
        raise ValidationFailed("The resolution must settle exactly the conflicts.", errors=errors)


def _settled(
    result: MergeResult, resolution: MergeResolution | None, detail: str, **extensions: Any
) -> dict[str, Any]:
    """The merged document: as merged if clean and nothing else is asked; settled by the
    resolution's choices, or the resolution's whole document; else 409 with the conflicts."""
    if resolution is not None and resolution.document is not None:
        unknown = sorted(set(resolution.document) - RESOLVABLE)
        if unknown:
            raise ValidationFailed(
                "A resolution document holds session content only.",
                errors=[
                    {"field": f"document.{field}", "message": "not session content"}
                    for field in unknown
                ],
            )
        return {**result.document, **resolution.document}
    if resolution is not None and resolution.choices is not None:
        choices = {
            path: Choice(choice.take, choice.value) for path, choice in resolution.choices.items()
        }
        document: dict[str, Any] = resolve(result, choices)
        return document
    if not result.clean:
        raise _conflicted(detail, result, **extensions)
    merged: dict[str, Any] = result.document
    return merged


def _node(branch: str, row: dict[str, Any], parents: list[str]) -> GraphNode:
    return GraphNode(
        id=f"{branch}@{row['version']}",
        branch=branch,
        version=row["version"],
        parents=parents,
        changed_by=row["changed_by"],
        change_reason=row["change_reason"],
        created_at=row["created_at"],
        merge_base=row["merge_base"],
    )
