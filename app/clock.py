"""The one source of time. Services ask the clock; tests hand in a clock they control."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    """Anything that can tell the current UTC time."""

    def now(self) -> datetime:
        """Return the current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> datetime:
        """Return the current wall-clock time in UTC."""
        return datetime.now(UTC)


class FrozenClock:
    """A clock that only moves when told to; for tests and dry runs."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FrozenClock needs a timezone-aware start time")
        self._now = start

    def now(self) -> datetime:
        """Return the frozen time."""
        return self._now

    def advance(self, delta: timedelta) -> None:
        """Move the clock forward (or back, with a negative delta)."""
        self._now += delta

    def set(self, when: datetime) -> None:
        """Jump to an absolute time."""
        self._now = when
