"""Pure rules for session content: RFC 7396 merge patch, the mirrored fields, the typed
content and its storage form, the agent sequence.

Nothing here touches the database or the clock; the service passes times in.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol, TypeVar

import msgspec
from pydantic import BaseModel

from app.common.validation import validate_as
from app.errors import ValidationFailed
from app.sessions.merge import MergeResult, merge3
from app.sessions.schemas import (
    AgentExecution,
    CoordinationMetadata,
    ExecutionStatus,
    PatchedContent,
    Session,
    SessionContent,
    SessionDocument,
    SessionState,
    SessionVersion,
    WrittenContent,
)
from app.sessions.sequence import AgentSequence, sequence_of

M = TypeVar("M", bound=BaseModel)

# Fields of the API view that a merge patch may touch (base_version is a precondition).
PATCHABLE = frozenset(
    {
        "session_state",
        "coordination_metadata",
        "progress_percentage",
        "priority",
        "current_agent",
        "preserve",
        "status",
    }
)


def merge_patch(target: Any, patch: Any) -> Any:
    """Apply an RFC 7396 JSON merge patch: objects merge, ``null`` removes, the rest replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def show_mirrors(
    state: dict[str, Any], metadata: dict[str, Any], progress: int, priority: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The API view: progress and priority appear inside state and metadata too."""
    return {**state, "progress_percentage": progress}, {**metadata, "session_priority": priority}


def strip_mirrors(
    state: dict[str, Any], metadata: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The storage form: the mirrored copies removed (their columns are the truth)."""
    stored_state = {k: v for k, v in state.items() if k != "progress_percentage"}
    stored_metadata = {k: v for k, v in metadata.items() if k != "session_priority"}
    return stored_state, stored_metadata


def resolve_mirrored(
    patch: dict[str, Any], field: str, container: str, inner: str, current: Any
) -> Any:
    """The new value of a field that a patch may set in two places; 422 if they disagree."""
    outer_value = patch.get(field)
    inner_patch = patch.get(container)
    inner_value = inner_patch.get(inner) if isinstance(inner_patch, dict) else None
    if outer_value is not None and inner_value is not None and outer_value != inner_value:
        raise ValidationFailed(
            f"{field} and {container}.{inner} are the same value and must agree.",
            errors=[{"field": f"{container}.{inner}", "message": f"differs from {field}"}],
        )
    if outer_value is not None:
        return outer_value
    if inner_value is not None:
        return inner_value
    if field in patch:  # explicit null on a required field: let validation name it
        return None
    return current


def evolve(model: M, **changes: Any) -> M:
    """A copy of ``model`` with ``changes``, validated like a new model.

    The one way content models are changed: pydantic's ``model_copy`` with an update skips
    validation, which is how a server-side write could store what a client PATCH then
    refuses. Unchanged nested models are taken as they are (they were validated already).
    """
    return type(model).model_validate({**dict(model), **changes})


def content_of(session: Session) -> SessionContent:
    """The typed, versioned content of a session as stored (mirrored fields removed).

    Stored content was validated when written; content stored before a rule tightened is
    refused here with a 422 naming the field, which a client PATCH can then repair.
    """
    return _typed(session, session)


def version_content(version: SessionVersion, session: Session) -> SessionContent:
    """An earlier version's content under today's rules (a rollback writes it again), with
    the session's status, preserve and completed_at: those are not content. Its whole agent
    sequence is typed: a rollback writes old steps again, so they pass today's rules."""
    content = _typed(version, session)
    return replace(content, agent_sequence=AgentSequence.of(sequence_of(version.agent_sequence)))


class ContentRow(Protocol):
    """Anything holding a session's versioned content as the API shows it: a session, a
    version of it, a branch or a branch's version."""

    @property
    def session_state(self) -> dict[str, Any]: ...
    @property
    def agent_sequence(self) -> list[dict[str, Any]]: ...
    @property
    def coordination_metadata(self) -> dict[str, Any]: ...
    @property
    def current_agent(self) -> str | None: ...
    @property
    def progress_percentage(self) -> int: ...
    @property
    def priority(self) -> str: ...
    @property
    def version(self) -> int: ...


def typed_content(source: ContentRow, life: Session) -> SessionContent:
    """The content of ``source`` (a branch, a version), typed under today's rules, with
    the session's status, preserve and completed_at."""
    return _typed(source, life)


def _typed(source: ContentRow, life: Session) -> SessionContent:
    state, metadata = strip_mirrors(source.session_state, source.coordination_metadata)
    return SessionContent(
        session_state=validate_as(SessionState, state, what="stored session_state"),
        agent_sequence=AgentSequence.stored(source.agent_sequence),
        coordination_metadata=validate_as(
            CoordinationMetadata, metadata, what="stored coordination_metadata"
        ),
        current_agent=source.current_agent,
        progress_percentage=source.progress_percentage,
        priority=source.priority,
        status=life.status,
        preserve=life.preserve,
        completed_at=life.completed_at,
    )


def storage_json(content: WrittenContent) -> tuple[Any, Any, Any]:
    """(session_state, agent_sequence, coordination_metadata) as the JSON the columns hold:
    every field of the seed's shape, without the mirrored copies; the agent steps a write
    did not touch as they were stored (and a PATCH's untouched members: its content holds
    them in this form already)."""
    if isinstance(content, PatchedContent):
        return (
            content.session_state,
            content.agent_sequence.storage(),
            content.coordination_metadata,
        )
    return (
        content.session_state.model_dump(mode="json", exclude={"progress_percentage"}),
        content.agent_sequence.storage(),
        content.coordination_metadata.model_dump(mode="json", exclude={"session_priority"}),
    )


def close_current_execution(
    sequence: AgentSequence,
    *,
    now: datetime,
    outcome: ExecutionStatus,
    output_summary: str | None,
    next_agent: str | None,
) -> AgentSequence:
    """Mark the newest still-running execution finished (a new sequence; the input is
    untouched). An execution of an agent task is not: its task closes it when it ends.
    Only that step is typed (422 naming it if it is stored invalid)."""
    index = sequence.newest_running()
    if index is None:
        return sequence[:]
    changes: dict[str, Any] = {"status": outcome, "completion_time": now}
    if output_summary is not None:
        changes["output_summary"] = output_summary
    if next_agent is not None:
        changes["next_agent"] = next_agent
    return sequence.replaced(index, evolve(sequence[index], **changes))


def append_execution(
    sequence: AgentSequence,
    agent_name: str,
    *,
    status: ExecutionStatus,
    start_time: datetime,
    completion_time: datetime | None = None,
    output_summary: str | None = None,
    next_agent: str | None = None,
    task_id: str | None = None,
) -> AgentSequence:
    """``sequence`` with a step for ``agent_name`` appended, numbered after every step
    before it (a new sequence; the input is untouched)."""
    step = AgentExecution(
        agent_name=agent_name,
        execution_order=sequence.next_order(),
        status=status,
        start_time=start_time,
        completion_time=completion_time,
        output_summary=output_summary,
        next_agent=next_agent,
        task_id=task_id,
    )
    return sequence.appended(step)


def start_execution(sequence: AgentSequence, agent_name: str, now: datetime) -> AgentSequence:
    """Append a new executing step for ``agent_name``."""
    return append_execution(sequence, agent_name, status="executing", start_time=now)


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, marked with an ellipsis when cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


# -- the document a three-way merge works on (app/sessions/merge.py) ------------------------

# The versioned content of a session as one JSON object: what the merge compares. preserve
# and completed_at are not content (not versioned): they are taken from the writes.
DOCUMENT_FIELDS = (
    "session_state",
    "agent_sequence",
    "coordination_metadata",
    "current_agent",
    "progress_percentage",
    "priority",
    "status",
)


def document_of(content: WrittenContent) -> dict[str, Any]:
    """The content as the JSON document a merge compares (storage form, no mirrors)."""
    state, sequence, metadata = storage_json(content)
    return {
        "session_state": state,
        "agent_sequence": sequence,
        "coordination_metadata": metadata,
        "current_agent": content.current_agent,
        "progress_percentage": content.progress_percentage,
        "priority": content.priority,
        "status": content.status,
    }


def content_from_document(document: dict[str, Any], life: WrittenContent) -> SessionContent:
    """A merged (or resolved) document as typed content, validated like any write (422
    naming the field if it breaks a rule, e.g. too many pending actions after a merge);
    preserve and completed_at from ``life``."""
    typed = validate_as(SessionDocument, document, what="merged session")
    return SessionContent(
        session_state=evolve(typed.session_state, progress_percentage=None),
        agent_sequence=AgentSequence.of(typed.agent_sequence),
        coordination_metadata=evolve(typed.coordination_metadata, session_priority=None),
        current_agent=typed.current_agent,
        progress_percentage=typed.progress_percentage,
        priority=typed.priority,
        status=typed.status,
        preserve=life.preserve,
        completed_at=life.completed_at,
    )


def keep_last_executions(content: WrittenContent, limit: int) -> WrittenContent:
    """``content`` with only the last ``limit`` executions of its agent sequence (the
    others are not typed for it)."""
    if len(content.agent_sequence) > limit:
        return replace(content, agent_sequence=content.agent_sequence.last(limit))
    return content


def merge_contents(
    base: SessionContent, current: SessionContent, proposed: WrittenContent
) -> MergeResult:
    """Three-way merge of two writes' content from one base (app/sessions/merge.py)."""
    return merge3(document_of(base), document_of(current), document_of(proposed))


def session_at(version: ContentRow, current: Session) -> Session:
    """The session as it was at ``version``: that version's content, the session's
    identity and life (status and preserve as now): the base a merged write replays on."""
    return msgspec.structs.replace(
        current,
        version=version.version,
        session_state=version.session_state,
        agent_sequence=version.agent_sequence,
        coordination_metadata=version.coordination_metadata,
        current_agent=version.current_agent,
        progress_percentage=version.progress_percentage,
        priority=version.priority,
    )
