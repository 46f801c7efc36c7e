"""The pool's connections hear announcements through asyncpg's private notice entry
(``app/db/pool.py``, ``_AnnouncingConnection``): an asyncpg that renamed it would leave
every announcement to the listeners' timers without a word. This says so at once."""

from __future__ import annotations

import inspect

import asyncpg

from app.db.pool import _AnnouncingConnection


def test_asyncpg_still_hands_notices_to_the_overridden_method() -> None:
    hook = getattr(asyncpg.Connection, "_process_log_message", None)
    assert callable(hook)
    assert list(inspect.signature(hook).parameters) == ["self", "fields", "last_query"]
    assert "_process_log_message" in vars(_AnnouncingConnection)


def test_the_pool_still_names_its_user_in_the_slot_read() -> None:
    assert "_proxy" in asyncpg.Connection.__slots__
