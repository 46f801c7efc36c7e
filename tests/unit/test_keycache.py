"""The agent-key cache: entries expire, the cache stays bounded, TTL 0 disables it."""

from __future__ import annotations

from uuid import uuid4

from app.auth.keycache import KeyCache
from app.auth.principal import Principal


class Ticks:
    """A hand-driven monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def agent(name: str) -> Principal:
    return Principal(kind="agent", name=name, roles=frozenset({"authorized"}), agent_id=uuid4())


def test_an_entry_is_served_until_its_ttl_runs_out() -> None:
    ticks = Ticks()
    cache = KeyCache(5.0, monotonic=ticks)
    principal = agent("A")
    cache.put(b"k", principal)
    ticks.now += 4.999
    assert cache.get(b"k") is principal
    ticks.now += 0.001
    assert cache.get(b"k") is None
    assert len(cache) == 0  # a stale entry is dropped when found


def test_unknown_digests_miss() -> None:
    cache = KeyCache(5.0)
    cache.put(b"k", agent("A"))
    assert cache.get(b"other") is None


def test_the_oldest_entry_goes_when_full() -> None:
    ticks = Ticks()
    cache = KeyCache(60.0, max_entries=3, monotonic=ticks)
    for n in range(4):
        ticks.now += 1
        cache.put(bytes([n]), agent(str(n)))
    assert len(cache) == 3
    assert cache.get(bytes([0])) is None
    assert [cache.get(bytes([n])).name for n in (1, 2, 3)] == ["1", "2", "3"]  # type: ignore[union-attr]


def test_putting_again_refreshes_the_entry() -> None:
    ticks = Ticks()
    cache = KeyCache(5.0, max_entries=2, monotonic=ticks)
    cache.put(b"a", agent("A"))
    cache.put(b"b", agent("B"))
    ticks.now += 4
    cache.put(b"a", agent("A2"))  # refreshed: now the newest
    cache.put(b"c", agent("C"))  # evicts b, the oldest
    assert cache.get(b"b") is None
    ticks.now += 4
    assert cache.get(b"a").name == "A2"  # type: ignore[union-attr]


def test_clear_forgets_everything() -> None:
    cache = KeyCache(5.0)
    cache.put(b"a", agent("A"))
    cache.put(b"b", agent("B"))
    cache.clear()
    assert (cache.get(b"a"), cache.get(b"b"), len(cache)) == (None, None, 0)


def test_ttl_zero_keeps_nothing() -> None:
    cache = KeyCache(0)
    assert not cache.enabled
    cache.put(b"a", agent("A"))
    assert cache.get(b"a") is None
    assert len(cache) == 0


def test_an_entry_is_due_in_the_last_fifth_of_its_life() -> None:
    ticks = Ticks()
    cache = KeyCache(5.0, monotonic=ticks)
    cache.put(b"k", agent("A"))
    ticks.now += 3.999
    assert not cache.due(b"k")
    ticks.now += 0.001
    assert cache.due(b"k")
    ticks.now += 1.0
    assert not cache.due(b"k")  # run out: a miss, not due
    assert not cache.due(b"absent")


def test_an_entry_ages_from_when_its_lookup_began() -> None:
    ticks = Ticks()
    cache = KeyCache(5.0, monotonic=ticks)
    began = cache.now()
    ticks.now += 2  # a slow lookup
    cache.put(b"k", agent("A"), since=began)
    ticks.now += 3
    assert cache.get(b"k") is None


def test_a_lookup_begun_before_a_clear_stores_nothing() -> None:
    cache = KeyCache(5.0)
    cache.put(b"k", agent("A"))
    generation = cache.generation
    cache.clear()  # agents changed while the lookups ran
    cache.put(b"k", agent("old"), generation=generation)
    cache.forget(b"k", generation=generation)
    assert cache.get(b"k") is None
    cache.put(b"k", agent("new"), generation=cache.generation)
    cache.forget(b"k", generation=generation)  # a stale "gone" does not drop a fresh entry
    assert cache.get(b"k").name == "new"  # type: ignore[union-attr]
