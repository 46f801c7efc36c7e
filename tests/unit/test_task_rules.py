"""The pure parts of the task queue: version-7 ids and the retry backoff."""

from __future__ import annotations

import random
import time
import uuid

from app.common.ids import uuid7
from app.settings import TaskSettings
from app.tasks.retry import Backoff


def test_uuid7_has_version_variant_time_and_order() -> None:
    before = time.time_ns() // 1_000_000
    ids = [uuid7() for _ in range(10_000)]
    after = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    assert {value.version for value in ids} == {7}
    assert {value.variant for value in ids} == {uuid.RFC_4122}
    assert all(before <= value.int >> 80 <= after + 3 for value in ids)
    # Made in one process, they sort in the order they were made (as text and as bytes).
    assert ids == sorted(ids)
    assert [str(value) for value in ids] == sorted(str(value) for value in ids)


def test_backoff_is_full_jitter_under_a_doubling_capped_ceiling() -> None:
    backoff = Backoff(base_seconds=1.0, cap_seconds=10.0)
    assert [backoff.ceiling(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    rng = random.Random(7)
    for attempt in range(1, 7):
        delays = [backoff.delay(attempt, rng) for _ in range(2000)]
        assert all(0 <= d <= backoff.ceiling(attempt) for d in delays)
        # Spread over the whole window, not bunched at its end (that is what jitter is for).
        assert min(delays) < 0.05 * backoff.ceiling(attempt)
        assert max(delays) > 0.95 * backoff.ceiling(attempt)
    assert backoff.ceiling(10_000) == 10.0


def test_per_agent_settings_override_the_defaults() -> None:
    settings = TaskSettings(
        agent_concurrency={"Make_Plan_Agent": 2}, agent_max_retries={"Make_Plan_Agent": 1}
    )
    assert settings.max_attempts_for("Make_Plan_Agent") == 2
    assert settings.max_attempts_for("Other") == 6
    assert settings.concurrency_for("Make_Plan_Agent") == 2
    assert settings.concurrency_for("Other") == 10
