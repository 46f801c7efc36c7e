"""The asyncio wrapper around pybreaker, with real coroutines (no mocks)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from app.coordination.breaker import AsyncCircuitBreaker, BreakerOpen, BreakerSnapshot


class AgentDown(Exception):
    pass


class Agent:
    """A coroutine-based operation that counts its invocations."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.delay = 0.0

    async def __call__(self) -> str:
        self.calls += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise AgentDown("boom")
        return "ok"


def breaker(
    fail_max: int = 3, reset_timeout: float = 60.0
) -> tuple[AsyncCircuitBreaker, list[BreakerSnapshot]]:
    changes: list[BreakerSnapshot] = []
    return (
        AsyncCircuitBreaker(
            "agent", fail_max=fail_max, reset_timeout=reset_timeout, on_change=changes.append
        ),
        changes,
    )


async def test_a_failing_coroutine_trips_the_breaker_and_is_then_not_called() -> None:
    cb, changes = breaker(fail_max=3)
    agent = Agent()
    agent.fail = True
    for expected in (1, 2):
        with pytest.raises(AgentDown):
            await cb.call(agent)
        assert cb.snapshot().failure_count == expected
        assert cb.snapshot().state == "closed"
    with pytest.raises(AgentDown):
        await cb.call(agent)
    assert cb.snapshot().state == "open"
    assert [c.state for c in changes] == ["open"]
    assert changes[0].opened_at is not None

    with pytest.raises(BreakerOpen) as refused:
        await cb.call(agent)
    assert refused.value.state == "open"
    assert agent.calls == 3  # the open circuit did not invoke the operation


async def test_plain_pybreaker_would_count_a_failing_coroutine_as_success() -> None:
    """Why the wrapper exists: pybreaker's call() never awaits the coroutine."""
    import pybreaker

    plain = pybreaker.CircuitBreaker(fail_max=1)
    agent = Agent()
    agent.fail = True
    coroutine = plain.call(agent)
    assert plain.current_state == "closed"
    with pytest.raises(AgentDown):
        await coroutine  # the failure surfaces only here, after pybreaker recorded success
    assert plain.current_state == "closed"


async def test_success_resets_the_failure_count() -> None:
    cb, _ = breaker(fail_max=3)
    agent = Agent()
    agent.fail = True
    for _ in range(2):
        with pytest.raises(AgentDown):
            await cb.call(agent)
    agent.fail = False
    assert await cb.call(agent) == "ok"
    assert cb.snapshot().failure_count == 0
    agent.fail = True
    for _ in range(2):
        with pytest.raises(AgentDown):
            await cb.call(agent)
    assert cb.snapshot().state == "closed"


async def test_a_timeout_counts_as_a_failure() -> None:
    cb, _ = breaker(fail_max=2)
    agent = Agent()
    agent.delay = 5
    for _ in range(2):
        with pytest.raises(TimeoutError):
            await cb.call(agent, timeout=0.02)
    assert cb.snapshot().state == "open"


async def test_cancellation_is_neither_failure_nor_success() -> None:
    cb, changes = breaker(fail_max=1)
    agent = Agent()
    agent.delay = 5
    task = asyncio.create_task(cb.call(agent))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cb.snapshot().state == "closed"
    assert cb.snapshot().failure_count == 0
    assert changes == []
    agent.delay = 0
    assert await cb.call(agent) == "ok"


async def test_half_open_lets_exactly_one_probe_through_then_closes() -> None:
    cb, changes = breaker(fail_max=1, reset_timeout=0.05)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown):
        await cb.call(agent)
    assert cb.snapshot().state == "open"
    await asyncio.sleep(0.08)

    agent.fail = False
    agent.delay = 0.05
    results = await asyncio.gather(*(cb.call(agent) for _ in range(6)), return_exceptions=True)
    assert results.count("ok") == 1
    refused = [r for r in results if isinstance(r, BreakerOpen)]
    assert len(refused) == 5
    assert {r.state for r in refused} == {"half_open"}
    assert agent.calls == 2  # the original failure and the single probe
    assert cb.snapshot().state == "closed"
    assert [c.state for c in changes] == ["open", "half_open", "closed"]


async def test_a_failed_probe_opens_the_circuit_again() -> None:
    cb, changes = breaker(fail_max=1, reset_timeout=0.05)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown):
        await cb.call(agent)
    first_opened = cb.snapshot().opened_at
    await asyncio.sleep(0.08)
    with pytest.raises(AgentDown):
        await cb.call(agent)
    snapshot = cb.snapshot()
    assert snapshot.state == "open"
    assert first_opened is not None
    assert snapshot.opened_at is not None
    assert snapshot.opened_at > first_opened
    assert [c.state for c in changes] == ["open", "half_open", "open"]
    with pytest.raises(BreakerOpen):
        await cb.call(agent)


async def test_a_cancelled_probe_frees_the_slot() -> None:
    cb, _ = breaker(fail_max=1, reset_timeout=0.02)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown):
        await cb.call(agent)
    await asyncio.sleep(0.04)
    agent.fail = False
    agent.delay = 5
    probe = asyncio.create_task(cb.call(agent))
    await asyncio.sleep(0.01)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    agent.delay = 0
    assert await cb.call(agent) == "ok"
    assert cb.snapshot().state == "closed"


async def test_manual_isolation_ignores_the_reset_timeout() -> None:
    cb, changes = breaker(fail_max=5, reset_timeout=0.01)
    agent = Agent()
    cb.force_open()
    await asyncio.sleep(0.03)
    with pytest.raises(BreakerOpen) as refused:
        await cb.call(agent)
    assert refused.value.state == "forced_open"
    assert agent.calls == 0
    cb.force_close()
    assert await cb.call(agent) == "ok"
    assert [c.state for c in changes] == ["forced_open", "closed"]


async def test_remote_states_are_adopted_without_being_published_again() -> None:
    cb, changes = breaker(fail_max=5, reset_timeout=60)
    agent = Agent()
    opened = datetime.now(UTC)
    cb.apply_remote(BreakerSnapshot("agent", "open", 5, opened))
    assert cb.snapshot().state == "open"
    assert cb.snapshot().opened_at == opened
    with pytest.raises(BreakerOpen):
        await cb.call(agent)
    cb.apply_remote(BreakerSnapshot("agent", "closed", 0, None))
    assert await cb.call(agent) == "ok"
    cb.apply_remote(BreakerSnapshot("agent", "forced_open", 0, opened))
    with pytest.raises(BreakerOpen):
        await cb.call(agent)
    assert changes == []


async def test_reconfigure_changes_the_threshold() -> None:
    cb, _ = breaker(fail_max=10)
    cb.reconfigure(fail_max=1, reset_timeout=60)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown):
        await cb.call(agent)
    assert cb.snapshot().state == "open"
