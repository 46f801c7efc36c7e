"""When a failed attempt is tried again: exponential backoff with full jitter.

Retry n (the n-th attempt after the first) waits a uniformly random time in
[0, min(cap, base * 2**(n-1))] (AWS's "full jitter"): retries of many tasks that failed
together spread over the window instead of arriving at the agent together.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    """The retry delays of a queue: ``base`` seconds doubled per retry, capped."""

    base_seconds: float = 1.0
    cap_seconds: float = 60.0

    def ceiling(self, failed_attempt: int) -> float:
        """The longest wait after attempt ``failed_attempt`` (1-based) failed."""
        exponent = min(max(failed_attempt - 1, 0), 62)
        return min(self.cap_seconds, self.base_seconds * 2.0**exponent)

    def delay(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the attempt after ``failed_attempt``."""
        draw = (rng or _RANDOM).uniform
        return draw(0.0, self.ceiling(failed_attempt))


_RANDOM = random.Random()  # noqa: S311 - jitter, not secrecy
