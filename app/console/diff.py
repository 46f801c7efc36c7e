"""A readable difference between two versions of a session: the paths that changed, with
their old and new values, and a unified diff of the two documents."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import orjson

from app.sessions.schemas import SessionVersion

_MISSING = object()
# Long values are cut in the path list (the unified diff shows them whole).
_SHOWN_CHARS = 200


@dataclass(frozen=True, slots=True)
class PathChange:
    """One leaf that differs: added, removed or changed, with both sides as JSON text."""

    path: str
    change: str
    old: str | None
    new: str | None


@dataclass(frozen=True, slots=True)
class VersionDiff:
    """What changed from version ``old`` to version ``new``."""

    old: int
    new: int
    changes: list[PathChange]
    unified: list[str]


def document(version: SessionVersion) -> dict[str, Any]:
    """The part of a version an operator compares: its content and life fields."""
    return {
        "status": version.status,
        "priority": version.priority,
        "current_agent": version.current_agent,
        "progress_percentage": version.progress_percentage,
        "session_state": version.session_state,
        "coordination_metadata": version.coordination_metadata,
        "agent_sequence": version.agent_sequence,
    }


def _text(value: Any) -> str:
    shown = orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    return shown if len(shown) <= _SHOWN_CHARS else shown[: _SHOWN_CHARS - 1] + "…"


def _walk(path: str, old: Any, new: Any, out: list[PathChange]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new), key=str):
            _walk(
                f"{path}.{key}" if path else str(key),
                old.get(key, _MISSING),
                new.get(key, _MISSING),
                out,
            )
        return
    if isinstance(old, list) and isinstance(new, list):
        for index in range(max(len(old), len(new))):
            _walk(
                f"{path}[{index}]",
                old[index] if index < len(old) else _MISSING,
                new[index] if index < len(new) else _MISSING,
                out,
            )
        return
    if old is _MISSING:
        out.append(PathChange(path, "added", None, _text(new)))
    elif new is _MISSING:
        out.append(PathChange(path, "removed", _text(old), None))
    elif old != new:
        out.append(PathChange(path, "changed", _text(old), _text(new)))


def diff_versions(old: SessionVersion, new: SessionVersion) -> VersionDiff:
    """The changed paths and the unified diff from ``old`` to ``new``."""
    before, after = document(old), document(new)
    changes: list[PathChange] = []
    _walk("", before, after, changes)
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    unified = list(
        difflib.unified_diff(
            orjson.dumps(before, option=options, default=str).decode().splitlines(),
            orjson.dumps(after, option=options, default=str).decode().splitlines(),
            fromfile=f"version {old.version}",
            tofile=f"version {new.version}",
            lineterm="",
        )
    )
    return VersionDiff(old=old.version, new=new.version, changes=changes, unified=unified)
