"""A short-lived cache of resolved agent keys: one query per key every few seconds instead
of one per request.

Only keys that resolved to an agent are kept (an unknown key is looked up every time, so a
flood of random keys cannot fill the cache). Any change to agents made through this replica
empties it at once; a change made through another replica is seen here within ``ttl``
seconds, which bounds how long a revoked key keeps working there. An entry's age counts
from when its lookup began, so a lookup that was slow does not stretch that bound.

An entry in the last ``REFRESH_SHARE`` of its life is ``due``: the service looks the key up
again in the background while the entry still answers (``AgentService.authenticate``), so
a busy key never runs out under the requests that use it. When one did, every request
arriving until a lookup came back looked the key up itself: at 64 connections, a burst of
lookups queued for the pool behind the requests every ``ttl`` seconds
(docs/benchmarks.md, "Read paths and the 64-connection tails").
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from app.auth.principal import Principal

# The share of an entry's life, at its end, in which it is looked up again ahead of time.
REFRESH_SHARE = 0.2


class KeyCache:
    """Key digest → principal, each entry good for ``ttl`` seconds, at most ``max_entries``."""

    def __init__(
        self,
        ttl: float,
        max_entries: int = 10_000,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._ttl = ttl
        self._max = max_entries
        self._monotonic = monotonic
        self._entries: OrderedDict[bytes, tuple[float, Principal]] = OrderedDict()
        # Moves at every clear(): a lookup begun before a clear must not store its answer.
        self._generation = 0

    @property
    def enabled(self) -> bool:
        """False when configured with a TTL of 0: every request looks its key up."""
        return self._ttl > 0

    @property
    def generation(self) -> int:
        """Changes whenever the cache is cleared (``put`` takes it to tell a stale lookup)."""
        return self._generation

    def now(self) -> float:
        """The cache's clock: when a lookup begins, for ``put``'s ``since``."""
        return self._monotonic()

    def get(self, digest: bytes) -> Principal | None:
        """The cached principal for ``digest``, unless absent or stale."""
        entry = self._entries.get(digest)
        if entry is None:
            return None
        stored_at, principal = entry
        if self._monotonic() - stored_at >= self._ttl:
            del self._entries[digest]
            return None
        return principal

    def due(self, digest: bytes) -> bool:
        """True if ``digest``'s entry is in the last ``REFRESH_SHARE`` of its life (a
        stale or absent one is not due: it is a miss)."""
        entry = self._entries.get(digest)
        if entry is None:
            return False
        age = self._monotonic() - entry[0]
        return self._ttl * (1 - REFRESH_SHARE) <= age < self._ttl

    def put(
        self,
        digest: bytes,
        principal: Principal,
        *,
        since: float | None = None,
        generation: int | None = None,
    ) -> None:
        """Remember a resolved key, as of ``since`` (when its lookup began; default now),
        unless the cache was cleared after ``generation``; the oldest entry goes when the
        cache is full."""
        if not self.enabled or (generation is not None and generation != self._generation):
            return
        self._entries[digest] = (self._monotonic() if since is None else since, principal)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def forget(self, digest: bytes, *, generation: int | None = None) -> None:
        """Drop ``digest``'s entry (its key no longer resolves), unless the cache was
        cleared after ``generation`` (then there is nothing of that time left to drop)."""
        if generation is None or generation == self._generation:
            self._entries.pop(digest, None)

    def clear(self) -> None:
        """Forget every key (after any change to agents, keys or roles)."""
        self._entries.clear()
        self._generation += 1

    def __len__(self) -> int:
        return len(self._entries)
