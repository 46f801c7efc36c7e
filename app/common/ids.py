"""Time-ordered identifiers: UUID version 7 (RFC 9562), which Python 3.11 lacks.

The same layout as the database's ``uuid_generate_v7()``: 48 bits of Unix milliseconds,
the version nibble 7, then random bits with the RFC 9562 variant. Ids made in one process
within one millisecond also sort in the order they were made (a 12-bit counter in
``rand_a``, RFC 9562 section 6.2 method 1, reseeded each millisecond).
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_lock = threading.Lock()
_last_ms = -1
_counter = 0


def uuid7() -> uuid.UUID:
    """A new version-7 UUID: sortable by creation time, unique without coordination."""
    global _last_ms, _counter
    random_bytes = os.urandom(10)
    with _lock:
        ms = time.time_ns() // 1_000_000
        if ms > _last_ms:
            _last_ms = ms
            _counter = int.from_bytes(random_bytes[:2]) & 0x7FF  # room to count up
        else:
            ms = _last_ms  # the clock stood still or stepped back: keep the order
            _counter += 1
            if _counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                _last_ms = ms = ms + 1
                _counter = 0
        counter = _counter
    tail = int.from_bytes(random_bytes[2:]) & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | counter << 64 | 0b10 << 62 | tail
    return uuid.UUID(int=value)
