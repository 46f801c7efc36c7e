"""A short-lived cache of resolved agent keys: one query per key every few seconds instead
of one per request.

Only keys that resolved to an agent are kept (an unknown key is looked up every time, so a
flood of random keys cannot fill the cache). Any change to agents made through this replica
empties it at once; a change made through another replica is seen here within ``ttl``
seconds, which bounds how long a revoked key keeps working there.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from app.auth.principal import Principal


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

    @property
    def enabled(self) -> bool:
        """False when configured with a TTL of 0: every request looks its key up."""
        return self._ttl > 0

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

    def put(self, digest: bytes, principal: Principal) -> None:
        """Remember a resolved key; the oldest entry goes when the cache is full."""
        if not self.enabled:
            return
        self._entries[digest] = (self._monotonic(), principal)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget every key (after any change to agents, keys or roles)."""
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
