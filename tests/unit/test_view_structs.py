"""The views built many times per request (``Memory``, ``Session``) stay out of the cyclic
garbage collector's reach, and still encode as before."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from uuid import UUID

import msgspec

from app.memories.schemas import Memory
from app.sessions.schemas import Session

AT = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
ID = UUID("0193a6b2-0000-7000-8000-000000000001")


def _memory() -> Memory:
    return Memory(
        ID, ID, None, "Orchestrator_Agent", "orchestrator", "general", None,
        {"text": "x", "nested": [1, {"a": None}]}, 40, "private", 1, AT, AT, None,
    )  # fmt: skip


def _session() -> Session:
    return Session(
        ID, ID, "support", "active", "normal", None, [{"agent": "a"}],
        {"conversation_context": {}}, {}, 0, False, 3, AT, AT, AT, AT, None,
    )  # fmt: skip


def test_memory_and_session_views_are_not_tracked_by_the_garbage_collector() -> None:
    # Their fields hold ids, strings, times and decoded JSON, none of which can refer back
    # to the view: untracked, a page of them sets off no young collection.
    assert not gc.is_tracked(_memory())
    assert not gc.is_tracked(_session())


def test_untracked_views_encode_as_before() -> None:
    assert msgspec.json.decode(msgspec.json.encode(_memory()))["content"] == {
        "text": "x",
        "nested": [1, {"a": None}],
    }
    assert msgspec.json.decode(msgspec.json.encode(_session()))["version"] == 3
