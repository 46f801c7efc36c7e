"""A client's merge patch applied to a session's editable view, validated where it touches it.

What a session stores passed validation when it was written (every write validates what
it writes), so a PATCH validates what it changes and carries the rest as stored:

- the view's own fields (progress, priority, current agent, preserve, status) always, the
  mirrored progress and priority resolved first, as before;
- of ``session_state`` and ``coordination_metadata``, each member the patch names, with the
  value it has after the patch (the stored value merged with the patch's), through the same
  models: a model holding only those members (every other member has a default), so a field
  is checked by exactly the rule that checked it in the whole; of ``agent_outputs`` (free
  JSON: a key is valid whatever the others hold) only the keys the patch names;
- the nesting limit of ``session_state`` on the patch alone: a value the patch does not
  reach is where it was stored, within the limit, and every object of the patch is an
  object of the result at the same depth, so the result is too deep exactly when the
  patch's ``session_state`` is.

A patch that breaks any of these, or that replaces or removes ``session_state`` or
``coordination_metadata`` whole, is validated whole, as every PATCH was before: its 422 is
the same answer, naming the same fields. The untouched members are stored again as they
were read, the touched ones as their models dump them (every field, defaults filled in).

A member stored before a rule tightened is carried while no PATCH names it, as an agent
step is (app/sessions/sequence.py); a PATCH that names it validates it (a 422 naming its
field). Writes that read the whole content (the coordinator's, a rollback, a merge) type it
whole, as before (docs/design.md, "Sessions").
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, ValidationError

from app.common.validation import MAX_JSON_DEPTH, json_depth, strictly, validate_input
from app.errors import Conflict, ValidationFailed
from app.sessions.schemas import (
    CLOSED_STATUSES,
    DEPTH_CHECKED,
    CoordinationMetadata,
    PatchedContent,
    Session,
    SessionContent,
    SessionEditable,
    SessionState,
    WrittenContent,
)
from app.sessions.sequence import AgentSequence
from app.sessions.state import evolve, merge_patch, resolve_mirrored

# The view's own fields, validated on every PATCH (scalars: cheap).
_OWN_FIELDS: Final = ("progress_percentage", "priority", "current_agent", "preserve", "status")
_CONTEXT: Final = {DEPTH_CHECKED: True}
_WHAT: Final = "session after this patch"
# Members that are free-form JSON objects (``dict[str, Any]`` with no constraint or
# validator of their own): a key is valid whatever the others hold, so only the keys a patch
# names are validated (and their nesting, above). A member that gains a constraint (a
# max_length, a validator) drops out of this set and is validated whole again.
_OPEN_OBJECTS: Final = frozenset(
    name
    for model in (SessionState, CoordinationMetadata)
    for name, field in model.model_fields.items()
    if field.annotation == dict[str, Any]
    and not field.metadata
    and not any(
        name in validator.info.fields or "*" in validator.info.fields
        for validator in model.__pydantic_decorators__.field_validators.values()
    )
)


def patched(current: Session, patch: dict[str, Any]) -> WrittenContent:
    """``current`` (a session, or a branch or version shown as one) with a merge patch
    applied to its editable view, validated where the patch touches it (module doc);
    409 if it is closed, 422 naming each field the result breaks."""
    _require_patchable(current, patch)
    closed_status = current.status if current.status in CLOSED_STATUSES else None
    view = {
        "session_state": current.session_state,
        "coordination_metadata": current.coordination_metadata,
        "progress_percentage": current.progress_percentage,
        "priority": current.priority,
        "current_agent": current.current_agent,
        "preserve": current.preserve,
        "status": "active" if closed_status else current.status,
    }
    merged = merge_patch(view, patch)
    merged["progress_percentage"] = resolve_mirrored(
        patch,
        "progress_percentage",
        "session_state",
        "progress_percentage",
        current.progress_percentage,
    )
    merged["priority"] = resolve_mirrored(
        patch, "priority", "coordination_metadata", "session_priority", current.priority
    )
    lean = _validated_where_touched(current, patch, merged, closed_status)
    if lean is not None:
        return lean
    # Validated whole: the patch breaks a rule (this names every field it breaks) or
    # replaces a whole member.
    editable = validate_input(SessionEditable, merged, what=_WHAT)
    return SessionContent(
        session_state=evolve(editable.session_state, progress_percentage=None),
        # The sequence is not patchable: it is carried over as stored, not even parsed.
        agent_sequence=AgentSequence.carried(current.agent_sequence),
        coordination_metadata=evolve(editable.coordination_metadata, session_priority=None),
        current_agent=editable.current_agent,
        progress_percentage=editable.progress_percentage,
        status=closed_status or editable.status,
        priority=editable.priority,
        preserve=editable.preserve,
        completed_at=current.completed_at,
    )


def _require_patchable(current: Session, patch: dict[str, Any]) -> None:
    """409 if the session is closed (only preserve changes) or the patch would take it out
    of escalated."""
    if current.status in CLOSED_STATUSES and set(patch) - {"preserve"}:
        raise Conflict(
            f"Session {current.session_id} is {current.status}; only preserve can change.",
            session_status=current.status,
        )
    if current.status == "escalated" and patch.get("status", "escalated") != "escalated":
        # Leaving escalated is a person's resolution, recorded and announced: not a PATCH.
        raise Conflict(
            f"Session {current.session_id} is escalated; a person resolves it with POST "
            f"/v1/sessions/{current.session_id}/resolve (a PATCH cannot change its status).",
            session_status=current.status,
        )


def _validated_where_touched(
    current: Session, patch: dict[str, Any], merged: dict[str, Any], closed_status: str | None
) -> PatchedContent | None:
    """The content with only what the patch touches validated; None if it must be
    validated whole (a member replaced or removed whole, or a rule broken)."""
    state_patch = patch.get("session_state", {})
    metadata_patch = patch.get("coordination_metadata", {})
    if not (isinstance(state_patch, dict) and isinstance(metadata_patch, dict)):
        return None
    if json_depth(state_patch) > MAX_JSON_DEPTH:
        return None
    state: dict[str, Any] = merged["session_state"]
    metadata: dict[str, Any] = merged["coordination_metadata"]
    touched: dict[str, Any] = {k: merged[k] for k in _OWN_FIELDS if k in merged}
    touched["session_state"] = _named(state, state_patch)
    touched["coordination_metadata"] = _named(metadata, metadata_patch)
    try:
        editable = strictly(SessionEditable, touched, context=_CONTEXT)
    except (ValidationError, ValidationFailed):
        return None
    return PatchedContent(
        session_state=_stored_form(
            state, state_patch, editable.session_state, "progress_percentage"
        ),
        agent_sequence=AgentSequence.carried(current.agent_sequence),
        coordination_metadata=_stored_form(
            metadata, metadata_patch, editable.coordination_metadata, "session_priority"
        ),
        current_agent=editable.current_agent,
        progress_percentage=editable.progress_percentage,
        status=closed_status or editable.status,
        priority=editable.priority,
        preserve=editable.preserve,
        completed_at=current.completed_at,
    )


def _named(merged: dict[str, Any], member_patch: dict[str, Any]) -> dict[str, Any]:
    """The members the patch names, with their values after it; of an open object the
    patch merges into (``agent_outputs``), only the keys it names."""
    named: dict[str, Any] = {}
    for key, inner in member_patch.items():
        if key not in merged:
            continue  # removed: its default
        value = merged[key]
        if key in _OPEN_OBJECTS and isinstance(inner, dict) and isinstance(value, dict):
            value = {k: value[k] for k in inner if k in value}
        named[key] = value
    return named


def _stored_form(
    merged: dict[str, Any], member_patch: dict[str, Any], typed: BaseModel, mirror: str
) -> dict[str, Any]:
    """A member's storage form: the members the patch did not name as they were stored,
    the ones it named (removed ones too: their defaults) as their model dumps them (an
    open object the patch merged into: as merged, its values need no dump); the mirrored
    copy left out."""
    stored = {k: v for k, v in merged.items() if k != mirror}
    dumped = {
        key
        for key, inner in member_patch.items()
        if key != mirror and not (key in _OPEN_OBJECTS and isinstance(inner, dict))
    }
    if dumped:
        stored.update(typed.model_dump(mode="json", include=dumped))
    return stored
