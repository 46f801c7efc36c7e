"""The console's pure parts: the version diff, the signed cookie, the uuid7 time bound."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from app.console.diff import diff_versions
from app.console.repository import uuid7_floor
from app.console.session import SessionSigner, derive_secret, same_token
from app.sessions.schemas import SessionVersion

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def version(number: int, **content: Any) -> SessionVersion:
    fields: dict[str, Any] = {
        "session_state": {},
        "agent_sequence": [],
        "coordination_metadata": {},
        "current_agent": None,
        "progress_percentage": 0,
        "status": "active",
        "priority": "normal",
    } | content
    return SessionVersion(
        session_id=UUID(int=1),
        version=number,
        changed_by="admin",
        change_reason="test",
        created_at=NOW,
        **fields,
    )


def test_the_diff_lists_added_removed_and_changed_leaves() -> None:
    old = version(1, session_state={"a": 1, "gone": "x", "list": [1, 2]}, priority="normal")
    new = version(2, session_state={"a": 2, "new": {"deep": True}, "list": [1]}, priority="high")
    diff = diff_versions(old, new)
    seen = {(c.path, c.change, c.old, c.new) for c in diff.changes}
    assert seen == {
        ("priority", "changed", '"normal"', '"high"'),
        ("session_state.a", "changed", "1", "2"),
        ("session_state.gone", "removed", '"x"', None),
        ("session_state.list[1]", "removed", "2", None),
        ("session_state.new", "added", None, '{"deep":true}'),
    }
    assert diff.unified[0] == "--- version 1"
    assert '+  "priority": "high",' in diff.unified


def test_equal_versions_have_no_changes() -> None:
    assert diff_versions(version(1), version(2)).changes == []


def test_long_values_are_cut_in_the_path_list() -> None:
    diff = diff_versions(version(1), version(2, session_state={"note": "x" * 1000}))
    (change,) = diff.changes
    assert change.new is not None
    assert len(change.new) == 200
    assert change.new.endswith("…")


def test_a_cookie_round_trips_and_expires() -> None:
    signer = SessionSigner(derive_secret("admin-key-0123456789", None))
    value, issued = signer.issue(b"\x01" * 32, NOW, 60)
    session, expired = signer.read(value, NOW + timedelta(seconds=59))
    assert session == issued
    assert not expired
    assert signer.read(value, NOW + timedelta(seconds=60)) == (None, True)


def test_a_cookie_of_another_secret_or_altered_is_no_session() -> None:
    signer = SessionSigner(derive_secret("admin-key-0123456789", None))
    other = SessionSigner(derive_secret("another-admin-key-0123", None))
    value, _ = signer.issue(b"\x01" * 32, NOW, 60)
    assert other.read(value, NOW) == (None, False)
    body, mac = value.split(".")
    for bad in (f"{body}x.{mac}", f"{body}.{mac}x", body, "", "a.b.c", None):
        assert signer.read(bad, NOW) == (None, False)


def test_a_configured_secret_replaces_the_admin_key() -> None:
    assert derive_secret("k" * 16, "s" * 32) == derive_secret("other" * 4, "s" * 32)
    assert derive_secret("k" * 16, None) != derive_secret("other" * 4, None)


def test_same_token() -> None:
    assert same_token("abc", "abc")
    assert not same_token("abd", "abc")
    assert not same_token(None, "abc")
    assert not same_token("", "abc")


def test_uuid7_floor_orders_before_every_later_uuid7() -> None:
    floor = uuid7_floor(NOW)
    ms = int(NOW.timestamp() * 1000)
    later = UUID(int=(ms << 80) | (0x7 << 76) | uuid.uuid4().int & ((1 << 76) - 1))
    earlier = UUID(int=((ms - 1) << 80) | (0x7 << 76) | ((1 << 76) - 1))
    assert earlier < floor <= later
