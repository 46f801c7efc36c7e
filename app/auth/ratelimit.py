"""Per-key rate limiting: a token bucket per caller, in memory (so per replica)."""

from __future__ import annotations

import math
import time

from app.errors import RateLimited


class RateLimiter:
    """``rate`` tokens a second, at most ``burst`` saved; one token per request."""

    def __init__(self, rate: float, burst: int) -> None:
        self._rate = rate
        self._burst = float(burst)
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        """False when the rate is 0."""
        return self._rate > 0

    def take(self, caller: str) -> None:
        """Spend a token of ``caller``'s bucket, or raise 429 with the wait in Retry-After."""
        if not self.enabled:
            return
        now = time.monotonic()
        tokens, last = self._buckets.get(caller, (self._burst, now))
        tokens = min(self._burst, tokens + (now - last) * self._rate)
        if tokens < 1:
            self._buckets[caller] = (tokens, now)
            wait = math.ceil((1 - tokens) / self._rate)
            raise RateLimited(
                f"Too many requests for this key; retry in {wait} s.", retry_after=wait
            )
        self._buckets[caller] = (tokens - 1, now)
