"""The context flags a session sets by itself, whoever sends the message: pure."""

from __future__ import annotations

from app.sessions.schemas import Session

_CRITICAL_PRIORITIES = frozenset({"high", "urgent"})


def session_flags(session: Session) -> set[str]:
    """Context modifiers that follow from the session itself: a running process, and one
    that is unfinished in a high-priority session."""
    flags: set[str] = set()
    if session.session_state.get("active_process"):
        flags.add("session_in_progress")
        if session.progress_percentage < 100 and session.priority in _CRITICAL_PRIORITIES:
            flags.add("incomplete_critical_process")
    return flags
