"""The token bucket (app/auth/ratelimit.py) on a clock the test moves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.auth.ratelimit import HostBuckets, RateLimiter
from app.errors import RateLimited


class Ticks:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_take_spends_the_burst_then_refuses_with_the_wait() -> None:
    ticks = Ticks()
    limiter = RateLimiter(0.1, 3, what="sign-ins from this address", monotonic=ticks)
    for _ in range(3):
        limiter.take("10.0.0.1")
    with pytest.raises(RateLimited) as refused:
        limiter.take("10.0.0.1")
    assert refused.value.retry_after == 10  # one token at 0.1 a second
    assert "sign-ins from this address" in refused.value.detail
    limiter.take("10.0.0.2")  # another caller has its own bucket
    ticks.now += 10
    limiter.take("10.0.0.1")


def test_give_back_returns_a_spent_token_never_above_the_burst() -> None:
    ticks = Ticks()
    limiter = RateLimiter(0.001, 2, monotonic=ticks)
    limiter.take("a")
    limiter.take("a")
    limiter.give_back("a")  # the second take did not count
    limiter.take("a")
    with pytest.raises(RateLimited):
        limiter.take("a")
    for _ in range(5):
        limiter.give_back("b")  # an unknown caller: nothing to give back
        limiter.give_back("a")
    limiter.take("a")
    limiter.take("a")  # back to the burst of 2, not 5
    with pytest.raises(RateLimited):
        limiter.take("a")


def test_a_rate_of_zero_never_refuses() -> None:
    limiter = RateLimiter(0, 1)
    for _ in range(10):
        limiter.take("a")
        limiter.give_back("a")


def test_it_remembers_at_most_max_callers() -> None:
    ticks = Ticks()
    limiter = RateLimiter(0.001, 2, max_callers=10, monotonic=ticks)
    for n in range(50):
        limiter.take(f"10.0.0.{n}")
        ticks.now += 0.01
    assert len(limiter._buckets) <= 10
    # The newest callers are still remembered: their next failure counts.
    limiter.take("10.0.0.49")
    with pytest.raises(RateLimited):
        limiter.take("10.0.0.49")


@pytest.fixture
def host() -> Iterator[HostBuckets]:
    buckets = HostBuckets(slots=64)
    yield buckets
    buckets.close()


def test_limiters_on_the_hosts_buckets_share_each_callers_burst(host: HostBuckets) -> None:
    """What ``serve --workers 2`` does: each worker's limiter on the one table (the
    workers' sharing it across the fork: tests/integration/test_serve_workers.py)."""
    ticks = Ticks()
    first, second = (RateLimiter(0.1, 3, monotonic=ticks, buckets=host) for _ in range(2))
    first.take("key-a")
    second.take("key-a")
    first.take("key-a")
    with pytest.raises(RateLimited) as refused:
        second.take("key-a")
    assert refused.value.retry_after == 10
    second.take("key-b")  # another caller has its own bucket
    first.give_back("key-a")
    second.take("key-a")
    ticks.now += 10
    first.take("key-a")
    with pytest.raises(RateLimited):
        second.take("key-a")


def test_a_full_table_gives_the_least_recently_used_slot_away(host: HostBuckets) -> None:
    """More callers than slots: each still gets a bucket, the newest keep theirs."""
    ticks = Ticks()
    limiter = RateLimiter(0.001, 2, monotonic=ticks, buckets=host)
    for n in range(500):
        limiter.take(f"caller-{n}")
        ticks.now += 0.01
    limiter.take("caller-499")
    with pytest.raises(RateLimited):
        limiter.take("caller-499")
