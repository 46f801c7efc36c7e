"""Rate limiting: a token bucket per caller. The API spends one token per request of a key;
the console's sign-in spends one per failed attempt of an address
(app/console/controller.py).

The buckets live in memory: a process's own (``ProcessBuckets``), or, under ``switchboard
serve --workers N``, a table every worker of the host shares (``HostBuckets``: made by the
supervisor before it forks), so a key gets the limit per host, not N times it. Across
hosts (replicas) each host counts on its own."""

from __future__ import annotations

import fcntl
import hashlib
import math
import mmap
import struct
import tempfile
import time
from collections.abc import Callable
from typing import Protocol

from app.errors import RateLimited

# A bucket: the tokens it held at ``last`` (monotonic seconds).
Bucket = tuple[float, float]
# Given a caller's bucket (None: never seen, or forgotten), its bucket from now on (None:
# leave it as it was).
Change = Callable[[Bucket | None], Bucket | None]


class Buckets(Protocol):
    """Where the buckets are kept; ``update`` reads and writes one atomically."""

    def update(self, caller: str, change: Change) -> None:
        """Replace ``caller``'s bucket by what ``change`` makes of it."""


class ProcessBuckets:
    """This process's buckets, at most ``max_callers`` when callers are not a closed set
    (client addresses): past it, buckets that have refilled are forgotten (a full bucket
    is the same as none), then the longest idle ones."""

    def __init__(self, max_callers: int | None, full: Callable[[Bucket, float], bool]) -> None:
        self._max_callers = max_callers
        self._full = full  # whether a bucket has refilled at a time
        self._buckets: dict[str, Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def update(self, caller: str, change: Change) -> None:
        """Replace ``caller``'s bucket by what ``change`` makes of it."""
        changed = change(self._buckets.get(caller))
        if changed is None:
            return
        self._buckets[caller] = changed
        if self._max_callers is not None and len(self._buckets) > self._max_callers:
            self._forget(changed[1])

    def _forget(self, now: float) -> None:
        full = [c for c, bucket in self._buckets.items() if self._full(bucket, now)]
        for caller in full:
            del self._buckets[caller]
        limit = self._max_callers or 0
        if len(self._buckets) > limit:
            by_age = sorted(self._buckets, key=lambda c: self._buckets[c][1])
            for caller in by_age[: len(self._buckets) - limit // 2]:
                del self._buckets[caller]


# A slot of the host's table: the caller's hash (0: free), its tokens, when (monotonic).
_SLOT = struct.Struct("<Qdd")
# Slots a caller may land in, from the one its hash names: a caller not in them takes a
# free one, else the least recently used one's (that caller starts again with a full burst).
_PROBES = 16


class HostBuckets:
    """Buckets shared by every process forked after this is made: a fixed table of
    ``slots`` in shared memory, keyed by a 64-bit hash of the caller, read and written
    under an exclusive ``fcntl`` lock of the file behind it (the kernel lets it go if
    its holder dies). The clock is CLOCK_MONOTONIC, the same in every process."""

    def __init__(self, slots: int = 16_384) -> None:
        self._slots = slots
        self._file = tempfile.TemporaryFile(prefix="switchboard-rate-")  # noqa: SIM115
        self._file.truncate(slots * _SLOT.size)
        self._table = mmap.mmap(self._file.fileno(), slots * _SLOT.size)

    def close(self) -> None:
        """Unmap the table and close its file."""
        self._table.close()
        self._file.close()

    def update(self, caller: str, change: Change) -> None:
        """Replace ``caller``'s bucket by what ``change`` makes of it, under the lock."""
        digest = hashlib.blake2b(caller.encode(), digest_size=8).digest()
        key = int.from_bytes(digest, "little") or 1  # 0 marks a free slot
        fd = self._file.fileno()
        fcntl.lockf(fd, fcntl.LOCK_EX)
        try:
            offset, bucket = self._find(key)
            changed = change(bucket)
            if changed is not None:
                _SLOT.pack_into(self._table, offset, key, *changed)
        finally:
            fcntl.lockf(fd, fcntl.LOCK_UN)

    def _find(self, key: int) -> tuple[int, Bucket | None]:
        """Where ``key``'s bucket is (or goes), and the bucket if it is there."""
        start = key % self._slots
        victim, oldest = -1, math.inf
        for probe in range(_PROBES):
            offset = ((start + probe) % self._slots) * _SLOT.size
            held, tokens, last = _SLOT.unpack_from(self._table, offset)
            if held == key:
                return offset, (tokens, last)
            if held == 0:
                return offset, None
            if last < oldest:
                victim, oldest = offset, last
        return victim, None


class RateLimiter:
    """``rate`` tokens a second, at most ``burst`` saved; one token per request.

    ``max_callers`` bounds how many buckets are kept when callers are not a closed set
    (``ProcessBuckets``); ``buckets`` keeps them elsewhere (``HostBuckets``)."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        what: str = "this key",
        max_callers: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        buckets: Buckets | None = None,
    ) -> None:
        self._monotonic = monotonic  # seconds; a test's own clock
        self._rate = rate
        self._burst = float(burst)
        self._what = what
        if buckets is None:
            buckets = ProcessBuckets(
                max_callers, lambda bucket, now: self._refilled(bucket, now) >= self._burst
            )
        self._buckets = buckets

    @property
    def enabled(self) -> bool:
        """False when the rate is 0."""
        return self._rate > 0

    def give_back(self, caller: str) -> None:
        """Return the token ``take`` spent (a request that turned out not to count), never
        above the burst."""
        if not self.enabled:
            return
        now = self._monotonic()

        def back(bucket: Bucket | None) -> Bucket | None:
            if bucket is None:  # nothing spent, or forgotten full
                return None
            return min(self._burst, self._refilled(bucket, now) + 1), now

        self._buckets.update(caller, back)

    def _refilled(self, bucket: Bucket | None, now: float) -> float:
        tokens, last = bucket if bucket is not None else (self._burst, now)
        return min(self._burst, tokens + max(0.0, now - last) * self._rate)

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
        short: list[float] = []

        def spend(bucket: Bucket | None) -> Bucket:
            tokens = self._refilled(bucket, now)
            if tokens < 1:
                short.append(tokens)
                return tokens, now
            return tokens - 1, now

        self._buckets.update(caller, spend)
        if short:
            raise self._refuse(short[0])
