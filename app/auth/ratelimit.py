"""Rate limiting: a token bucket per caller, in memory (so per replica). The API spends one
token per request of a key; the console's sign-in spends one per failed attempt of an
address (app/console/controller.py)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from app.errors import RateLimited


class RateLimiter:
    """``rate`` tokens a second, at most ``burst`` saved; one token per request.

    ``max_callers`` bounds how many buckets are kept when callers are not a closed set (client
    addresses): past it, buckets that have refilled are forgotten (a full bucket is the
    same as none), then the longest idle ones."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        what: str = "this key",
        max_callers: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._monotonic = monotonic  # seconds; a test's own clock
        self._rate = rate
        self._burst = float(burst)
        self._what = what
        self._max_callers = max_callers
        self._buckets: dict[str, tuple[float, float]] = {}

    @property
    def enabled(self) -> bool:
        """False when the rate is 0."""
        return self._rate > 0

    def give_back(self, caller: str) -> None:
        """Return the token ``take`` spent (a request that turned out not to count), never
        above the burst."""
        if not self.enabled or caller not in self._buckets:
            return
        now = self._monotonic()
        self._buckets[caller] = (min(self._burst, self._tokens(caller, now) + 1), now)

    def _tokens(self, caller: str, now: float) -> float:
        tokens, last = self._buckets.get(caller, (self._burst, now))
        return min(self._burst, tokens + (now - last) * self._rate)

    def _refuse(self, tokens: float) -> RateLimited:
        wait = math.ceil((1 - tokens) / self._rate)
        return RateLimited(
            f"Too many requests for {self._what}; retry in {wait} s.", retry_after=wait
        )

    def take(self, caller: str) -> None:
        """Spend a token of ``caller``'s bucket, or raise 429 with the wait in Retry-After."""
        if not self.enabled:
            return
        now = self._monotonic()
        tokens = self._tokens(caller, now)
        if tokens < 1:
            self._buckets[caller] = (tokens, now)
            raise self._refuse(tokens)
        self._buckets[caller] = (tokens - 1, now)
        if self._max_callers is not None and len(self._buckets) > self._max_callers:
            self._forget(now)

    def _forget(self, now: float) -> None:
        full = [c for c in self._buckets if self._tokens(c, now) >= self._burst]
        for caller in full:
            del self._buckets[caller]
        limit = self._max_callers or 0
        if len(self._buckets) > limit:
            by_age = sorted(self._buckets, key=lambda c: self._buckets[c][1])
            for caller in by_age[: len(self._buckets) - limit // 2]:
                del self._buckets[caller]
