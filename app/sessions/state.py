"""Pure rules for session content: RFC 7396 merge patch, the mirrored fields, handoffs.

Nothing here touches the database or the clock; the service passes times in.
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from app.errors import ValidationFailed

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


def close_current_execution(
    sequence: list[dict[str, Any]],
    *,
    now: datetime,
    outcome: str,
    output_summary: str | None,
    next_agent: str | None,
) -> list[dict[str, Any]]:
    """Mark the newest still-running execution finished (a copy; the input is untouched)."""
    updated = [dict(step) for step in sequence]
    for step in reversed(updated):
        if step.get("status") in ("executing", "pending"):
            step["status"] = outcome
            step["completion_time"] = now.isoformat()
            if output_summary is not None:
                step["output_summary"] = output_summary
            if next_agent is not None:
                step["next_agent"] = next_agent
            break
    return updated


def start_execution(
    sequence: list[dict[str, Any]], agent_name: str, now: datetime
) -> list[dict[str, Any]]:
    """Append a new executing step for ``agent_name``."""
    order = max((int(step.get("execution_order", 0)) for step in sequence), default=0) + 1
    return [
        *sequence,
        {
            "agent_name": agent_name,
            "execution_order": order,
            "status": "executing",
            "start_time": now.isoformat(),
        },
    ]
