"""AsyncCircuitBreaker: pybreaker's state machine driven by real coroutines (no mocks)."""

from __future__ import annotations

import asyncio
import logging
import traceback
from datetime import UTC, datetime, timedelta

import pybreaker
import pytest

from app.clock import FrozenClock
from app.coordination.breaker import AsyncCircuitBreaker, BreakerOpen, BreakerSnapshot

START = datetime(2025, 1, 1, 12, 0, tzinfo=UTC)
RESET = timedelta(seconds=30)


class AgentDown(Exception):
    pass


class NotFound(Exception):
    """A business answer, not a malfunction."""


class Agent:
    """A coroutine operation that counts its invocations; it can fail or wait for a gate."""

    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    async def __call__(self) -> str:
        self.calls += 1
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail:
            raise AgentDown(f"call {self.calls} failed")
        return "ok"


async def start_call(
    breaker: AsyncCircuitBreaker, agent: Agent, call_timeout: float | None = None
) -> asyncio.Task[str]:
    """Start a call in its own task and return once the agent is running it."""
    agent.started.clear()
    task = asyncio.create_task(breaker.call(agent, timeout=call_timeout))
    async with asyncio.timeout(1):  # fail, rather than hang, if the call was refused
        await agent.started.wait()
    return task


class Harness:
    """A breaker on a frozen clock, with every on_change snapshot recorded."""

    def __init__(self, fail_max: int = 3, exclude: tuple[type[BaseException], ...] = ()) -> None:
        self.fail_max = fail_max
        self.clock = FrozenClock(START)
        self.changes: list[BreakerSnapshot] = []
        self.breaker = AsyncCircuitBreaker(
            "planner",
            fail_max=fail_max,
            reset_timeout=RESET.total_seconds(),
            clock=self.clock.now,
            on_change=self.changes.append,
            exclude=exclude,
        )

    @property
    def states(self) -> list[str]:
        return [change.state for change in self.changes]

    async def trip(self, agent: Agent, failures: int | None = None) -> None:
        agent.fail = True
        for _ in range(failures or self.fail_max):
            with pytest.raises(AgentDown):
                await self.breaker.call(agent)
        assert self.breaker.snapshot().state == "open"
        agent.fail = False


async def test_plain_pybreaker_records_a_failing_coroutine_as_a_success() -> None:
    """Why the wrapper exists: pybreaker's call() returns the coroutine unawaited."""
    plain = pybreaker.CircuitBreaker(fail_max=1)
    agent = Agent()
    agent.fail = True
    pending = plain.call(agent)
    assert agent.calls == 0
    with pytest.raises(AgentDown):
        await pending
    assert plain.current_state == "closed"
    assert plain.fail_counter == 0


async def test_failing_coroutines_trip_the_breaker_and_the_open_circuit_does_not_call() -> None:
    h = Harness(fail_max=3)
    agent = Agent()
    agent.fail = True
    for expected in (1, 2):
        with pytest.raises(AgentDown):
            await h.breaker.call(agent)
        assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", expected, None)
    with pytest.raises(AgentDown, match="call 3 failed"):
        await h.breaker.call(agent)
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "open", 3, START)

    for _ in range(4):
        with pytest.raises(BreakerOpen) as refused:
            await h.breaker.call(agent)
        assert (refused.value.name, refused.value.state) == ("planner", "open")
    assert agent.calls == 3


async def test_the_caller_sees_its_own_traceback_not_pybreakers() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown) as raised:
        await h.breaker.call(agent)
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert not [frame for frame in frames if "pybreaker" in frame.filename]
    assert frames[-1].name == "__call__"  # Agent.__call__, where it was raised


async def test_a_success_resets_the_failure_count() -> None:
    h = Harness(fail_max=3)
    agent = Agent()
    agent.fail = True
    for _ in range(2):
        with pytest.raises(AgentDown):
            await h.breaker.call(agent)
    agent.fail = False
    assert await h.breaker.call(agent) == "ok"
    assert h.breaker.snapshot().failure_count == 0

    agent.fail = True
    for _ in range(2):
        with pytest.raises(AgentDown):
            await h.breaker.call(agent)
    assert h.breaker.snapshot().state == "closed"  # 2 < 3: the earlier failures were forgotten
    assert h.changes == []


async def test_a_timeout_is_raised_to_the_caller_and_counts_as_a_failure() -> None:
    h = Harness(fail_max=2)
    agent = Agent()
    agent.gate = asyncio.Event()  # never set: the agent never answers
    with pytest.raises(TimeoutError):
        await h.breaker.call(agent, timeout=0.01)
    assert h.breaker.snapshot().failure_count == 1
    with pytest.raises(TimeoutError):
        await h.breaker.call(agent, timeout=0.01)
    assert h.breaker.snapshot().state == "open"
    assert h.states == ["open"]


async def test_an_operation_within_its_timeout_succeeds() -> None:
    h = Harness()
    assert await h.breaker.call(Agent(), timeout=5) == "ok"
    assert h.breaker.snapshot().failure_count == 0


async def test_cancellation_is_neither_a_failure_nor_a_success() -> None:
    h = Harness(fail_max=2)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown):
        await h.breaker.call(agent)
    agent.fail = False
    agent.gate = asyncio.Event()
    task = await start_call(h.breaker, agent)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # not a failure (still 1, still closed) and not a success (not reset to 0)
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", 1, None)
    assert h.changes == []

    agent.gate = None
    assert await h.breaker.call(agent) == "ok"
    assert h.breaker.snapshot().failure_count == 0


async def test_a_cancelled_timeout_guarded_call_is_not_counted_either() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    agent.gate = asyncio.Event()
    task = await start_call(h.breaker, agent, call_timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", 0, None)


async def test_the_open_circuit_waits_for_the_reset_timeout() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    await h.trip(agent)
    h.clock.advance(RESET - timedelta(milliseconds=1))
    with pytest.raises(BreakerOpen):
        await h.breaker.call(agent)
    assert agent.calls == 1
    h.clock.advance(timedelta(milliseconds=1))
    assert await h.breaker.call(agent) == "ok"
    assert h.breaker.snapshot().state == "closed"


async def test_half_open_lets_exactly_one_probe_through_then_closes() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    await h.trip(agent)
    h.clock.advance(RESET)

    agent.gate = asyncio.Event()
    probe = await start_call(h.breaker, agent)
    assert h.breaker.snapshot().state == "half_open"
    async with asyncio.timeout(1):  # fail, rather than hang, if they were let through
        others = await asyncio.gather(
            *(h.breaker.call(agent) for _ in range(5)), return_exceptions=True
        )
    assert all(isinstance(o, BreakerOpen) and o.state == "half_open" for o in others)
    assert agent.calls == 2  # the failure that tripped it, and the one probe

    agent.gate.set()
    assert await probe == "ok"
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", 0, None)
    assert await h.breaker.call(agent) == "ok"
    assert agent.calls == 3


async def test_a_failed_probe_opens_the_circuit_again_with_a_fresh_opened_at() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    await h.trip(agent)
    h.clock.advance(RESET)
    agent.fail = True
    with pytest.raises(AgentDown):
        await h.breaker.call(agent)
    reopened = h.breaker.snapshot()
    assert reopened.state == "open"
    assert reopened.opened_at == START + RESET
    assert h.states == ["open", "half_open", "open"]

    h.clock.advance(RESET / 2)  # measured from the new opening, not the first one
    with pytest.raises(BreakerOpen):
        await h.breaker.call(agent)
    assert agent.calls == 2


async def test_a_cancelled_probe_frees_the_slot_for_the_next_caller() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    await h.trip(agent)
    h.clock.advance(RESET)
    agent.gate = asyncio.Event()
    probe = await start_call(h.breaker, agent)
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert h.breaker.snapshot().state == "half_open"

    agent.gate = None
    assert await h.breaker.call(agent) == "ok"
    assert h.breaker.snapshot().state == "closed"


@pytest.mark.parametrize("slow_fails", [False, True], ids=["late_success", "late_failure"])
async def test_a_slow_call_from_before_the_trip_does_not_decide_the_probe(
    slow_fails: bool,
) -> None:
    h = Harness(fail_max=1)
    slow = Agent()
    slow.gate = asyncio.Event()
    slow.fail = slow_fails
    slow_call = await start_call(h.breaker, slow)  # let through while closed
    agent = Agent()
    await h.trip(agent)
    h.clock.advance(RESET)
    agent.gate = asyncio.Event()
    probe = await start_call(h.breaker, agent)

    slow.gate.set()
    outcome = await asyncio.gather(slow_call, return_exceptions=True)
    assert isinstance(outcome[0], AgentDown) == slow_fails  # the caller gets its answer ...
    # ... but neither closes nor reopens the circuit, nor counts: that is the probe's job
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "half_open", 1, None)
    agent.gate.set()
    assert await probe == "ok"
    assert h.breaker.snapshot().state == "closed"


async def test_on_change_reports_each_transition_in_order() -> None:
    h = Harness(fail_max=2)
    agent = Agent()
    await h.trip(agent)
    h.clock.advance(RESET)
    assert await h.breaker.call(agent) == "ok"
    assert h.changes == [
        BreakerSnapshot("planner", "open", 2, START),
        BreakerSnapshot("planner", "half_open", 2, None),
        BreakerSnapshot("planner", "closed", 0, None),
    ]


async def test_a_failing_on_change_is_logged_and_the_breaker_still_trips(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(_: BreakerSnapshot) -> None:
        raise RuntimeError("publisher down")

    breaker = AsyncCircuitBreaker("planner", fail_max=1, reset_timeout=30, on_change=broken)
    agent = Agent()
    agent.fail = True
    with caplog.at_level(logging.ERROR, logger="switchboard.breaker"), pytest.raises(AgentDown):
        await breaker.call(agent)
    assert breaker.snapshot().state == "open"
    assert "on_change of breaker planner failed" in caplog.text
    with pytest.raises(BreakerOpen):
        await breaker.call(agent)


async def test_force_open_refuses_calls_past_the_reset_timeout_until_force_close() -> None:
    h = Harness(fail_max=3)
    agent = Agent()
    agent.fail = True
    with pytest.raises(AgentDown):
        await h.breaker.call(agent)
    h.breaker.force_open()
    assert h.breaker.snapshot().state == "forced_open"
    h.clock.advance(RESET * 10)
    with pytest.raises(BreakerOpen) as refused:
        await h.breaker.call(agent)
    assert refused.value.state == "forced_open"
    assert agent.calls == 1
    assert h.breaker.snapshot().state == "forced_open"  # never half-opened by itself

    h.breaker.force_close()
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", 0, None)
    agent.fail = False
    assert await h.breaker.call(agent) == "ok"
    assert h.changes == [
        BreakerSnapshot("planner", "forced_open", 1, START),
        BreakerSnapshot("planner", "closed", 0, None),
    ]


async def test_force_close_closes_a_tripped_circuit_at_once() -> None:
    h = Harness(fail_max=1)
    agent = Agent()
    await h.trip(agent)
    h.breaker.force_close()
    assert await h.breaker.call(agent) == "ok"
    assert h.states == ["open", "closed"]


async def test_apply_remote_adopts_each_state_without_calling_on_change() -> None:
    h = Harness(fail_max=5)
    agent = Agent()
    opened = START - timedelta(seconds=5)

    h.breaker.apply_remote(BreakerSnapshot("planner", "open", 5, opened))
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "open", 5, opened)
    with pytest.raises(BreakerOpen):
        await h.breaker.call(agent)
    h.clock.advance(RESET - timedelta(seconds=5))  # the remote opened_at decides
    assert await h.breaker.call(agent) == "ok"
    assert h.states == ["half_open", "closed"]  # local transitions are still announced
    h.changes.clear()

    h.breaker.apply_remote(BreakerSnapshot("planner", "closed", 3, None))
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", 3, None)
    agent.fail = True
    for _ in range(2):
        with pytest.raises(AgentDown):
            await h.breaker.call(agent)
    assert h.states == ["open"]  # 3 adopted + 2 local = fail_max
    h.changes.clear()

    h.breaker.apply_remote(BreakerSnapshot("planner", "forced_open", 0, opened))
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "forced_open", 0, opened)
    h.clock.advance(RESET * 10)
    with pytest.raises(BreakerOpen):
        await h.breaker.call(agent)

    h.breaker.apply_remote(BreakerSnapshot("planner", "half_open", 1, None))
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "half_open", 1, None)
    assert h.changes == []


async def test_a_remote_half_open_lets_one_local_probe_through() -> None:
    h = Harness(fail_max=1)
    h.breaker.apply_remote(BreakerSnapshot("planner", "half_open", 1, None))
    agent = Agent()
    agent.gate = asyncio.Event()
    probe = await start_call(h.breaker, agent)
    with pytest.raises(BreakerOpen):
        async with asyncio.timeout(1):  # fail, rather than hang, if it was let through
            await h.breaker.call(agent)
    agent.gate.set()
    assert await probe == "ok"
    assert h.states == ["closed"]


async def test_apply_remote_refuses_another_breakers_snapshot() -> None:
    h = Harness()
    with pytest.raises(ValueError, match="writer"):
        h.breaker.apply_remote(BreakerSnapshot("writer", "open", 5, START))
    assert h.breaker.snapshot().state == "closed"


async def test_reconfigure_changes_threshold_and_reset_timeout() -> None:
    h = Harness(fail_max=10)
    h.breaker.reconfigure(fail_max=1, reset_timeout=5)
    agent = Agent()
    await h.trip(agent, failures=1)
    assert agent.calls == 1
    h.clock.advance(timedelta(seconds=5))
    assert await h.breaker.call(agent) == "ok"


async def test_excluded_exceptions_are_not_failures() -> None:
    h = Harness(fail_max=1, exclude=(NotFound,))

    async def not_found() -> str:
        raise NotFound("no such plan")

    for _ in range(3):
        with pytest.raises(NotFound):
            await h.breaker.call(not_found)
    assert h.breaker.snapshot() == BreakerSnapshot("planner", "closed", 0, None)


async def test_the_default_clock_is_real_time() -> None:
    changes: list[BreakerSnapshot] = []
    breaker = AsyncCircuitBreaker(
        "planner", fail_max=1, reset_timeout=0.05, on_change=changes.append
    )
    agent = Agent()
    agent.fail = True
    before = datetime.now(UTC)
    with pytest.raises(AgentDown):
        await breaker.call(agent)
    opened_at = breaker.snapshot().opened_at
    assert opened_at is not None
    assert before <= opened_at <= datetime.now(UTC)
    with pytest.raises(BreakerOpen):
        await breaker.call(agent)
    await asyncio.sleep(0.07)
    agent.fail = False
    assert await breaker.call(agent) == "ok"
    assert [c.state for c in changes] == ["open", "half_open", "closed"]
