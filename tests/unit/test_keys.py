"""API keys: random and long, stored as SHA-256, and the admin key file kept private."""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import stat
import threading
from pathlib import Path

import pytest

from app.auth.keys import (
    KEY_PREFIX,
    UnusableAdminKey,
    generate_key,
    hash_key,
    load_or_create_admin_key,
    same_digest,
)


def test_generated_keys_are_unique() -> None:
    keys = [generate_key() for _ in range(2000)]
    assert len(set(keys)) == len(keys)


def test_generated_keys_are_long_and_url_safe() -> None:
    for key in (generate_key() for _ in range(100)):
        assert key.startswith(KEY_PREFIX)
        body = key.removeprefix(KEY_PREFIX)
        # 32 random bytes are 43 characters of unpadded base64url.
        assert len(body) >= 43
        assert re.fullmatch(r"[A-Za-z0-9_-]+", body), key


def test_generated_keys_do_not_share_a_body() -> None:
    # Not a counter or a timestamp: no long common prefix beyond the fixed one.
    keys = sorted(generate_key().removeprefix(KEY_PREFIX) for _ in range(200))
    for first, second in itertools.pairwise(keys):
        assert first[:8] != second[:8], (first, second)


def test_hash_key_is_a_sha256_digest() -> None:
    key = generate_key()
    digest = hash_key(key)
    assert isinstance(digest, bytes)
    assert len(digest) == 32
    assert digest == hashlib.sha256(key.encode()).digest()


def test_hash_key_is_deterministic_and_distinguishes_keys() -> None:
    key = generate_key()
    assert hash_key(key) == hash_key("".join(list(key)))
    assert hash_key(key) != hash_key(key + "x")
    assert hash_key(key) != hash_key(key.upper())
    assert len({hash_key(generate_key()) for _ in range(100)}) == 100


@pytest.mark.parametrize("key", ["", "ünïcödé", "\ud800 lone surrogate"])
def test_hash_key_accepts_any_text(key: str) -> None:
    assert len(hash_key(key)) == 32
    assert hash_key(key) == hash_key(key)


def test_same_digest() -> None:
    digest = hash_key("a")
    assert same_digest(digest, hash_key("a"))
    assert not same_digest(digest, hash_key("b"))
    assert not same_digest(digest, digest[:-1])


def test_admin_key_file_is_created_private(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "dir" / "admin.key"
    key = load_or_create_admin_key(path)

    assert path.is_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text(encoding="utf-8") == key + "\n"
    assert key.startswith(KEY_PREFIX)
    assert len(key) >= 40


def test_admin_key_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0)
    try:
        load_or_create_admin_key(tmp_path / "admin.key")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "admin.key").stat().st_mode) == 0o600


def test_admin_key_is_stable_across_calls(tmp_path: Path) -> None:
    path = tmp_path / "admin.key"
    first = load_or_create_admin_key(path)
    assert load_or_create_admin_key(path) == first
    assert load_or_create_admin_key(path) == first
    assert path.read_text(encoding="utf-8") == first + "\n"


def test_admin_keys_differ_between_files(tmp_path: Path) -> None:
    assert load_or_create_admin_key(tmp_path / "a.key") != load_or_create_admin_key(
        tmp_path / "b.key"
    )


def test_an_existing_key_is_used_as_written(tmp_path: Path) -> None:
    path = tmp_path / "admin.key"
    path.write_text("  my-operator-chosen-key-0123\n\n", encoding="utf-8")
    assert load_or_create_admin_key(path) == "my-operator-chosen-key-0123"
    assert path.read_text(encoding="utf-8") == "  my-operator-chosen-key-0123\n\n"


@pytest.mark.parametrize(
    "content", ["", "\n", "   \n", "short\n", "x" * 15, " " + "y" * 15 + " \n"]
)
def test_a_file_without_a_usable_key_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "admin.key"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(UnusableAdminKey, match="admin key"):
        load_or_create_admin_key(path)
    assert path.read_text(encoding="utf-8") == content  # never overwritten


def test_a_sixteen_character_key_is_enough(tmp_path: Path) -> None:
    path = tmp_path / "admin.key"
    path.write_text("z" * 16, encoding="utf-8")
    assert load_or_create_admin_key(path) == "z" * 16


def race_for_key(path: Path, starters: int) -> tuple[list[str], list[BaseException]]:
    """``starters`` threads call load_or_create_admin_key(path) at the same moment."""
    barrier = threading.Barrier(starters)
    keys: list[str] = []
    errors: list[BaseException] = []

    def start() -> None:
        barrier.wait()
        try:
            keys.append(load_or_create_admin_key(path))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=start) for _ in range(starters)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return keys, errors


def test_starters_racing_for_the_admin_key_all_get_the_same_one(tmp_path: Path) -> None:
    # Several processes starting at once: none may read a half-written file, and all must
    # end up with the one key that landed. Repeated because the window is narrow.
    for attempt in range(20):
        path = tmp_path / f"attempt-{attempt}" / "admin.key"
        keys, errors = race_for_key(path, 6)
        assert errors == []
        assert len(keys) == 6
        assert len(set(keys)) == 1
        assert keys[0] == path.read_text(encoding="utf-8").strip()
        assert sorted(p.name for p in path.parent.iterdir()) == ["admin.key"]
