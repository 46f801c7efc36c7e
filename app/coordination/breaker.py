"""An asyncio circuit breaker built on pybreaker's state machine.

pybreaker (mandated) has no asyncio support: ``CircuitBreaker.call()`` on a coroutine
function sees a coroutine object come back, records a success and never awaits it. This
wrapper keeps pybreaker as the state machine and store (its states, fail counter,
``fail_max``, ``reset_timeout``, listeners) and does the async parts itself:

* gate: refuse while open (pybreaker's rule: until ``reset_timeout`` has passed since
  ``opened_at``), then move to half-open with pybreaker's ``half_open()`` and let exactly
  one probe through; other callers are refused while that probe is in flight;
* await the operation (under ``asyncio.timeout``: a timeout is a failure);
* record the outcome by replaying it through pybreaker's synchronous ``call()``, so
  pybreaker counts the failure, trips or resets exactly as it would for a sync call;
* cancellation is neither success nor failure: nothing is recorded, the probe slot is freed.

Only pybreaker's public API is used: ``CircuitBreaker(...)``, ``call``, ``open``,
``half_open``, ``close``, ``current_state``, ``fail_counter``, the ``fail_max`` and
``reset_timeout`` setters, ``CircuitBreakerListener.state_change``, and the public
properties of the ``CircuitMemoryStorage`` we hand it (``opened_at``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import pybreaker

T = TypeVar("T")
State = Literal["closed", "open", "half_open", "forced_open"]

_FROM_PYBREAKER: dict[str, State] = {
    pybreaker.STATE_CLOSED: "closed",
    pybreaker.STATE_OPEN: "open",
    pybreaker.STATE_HALF_OPEN: "half_open",
}


class BreakerOpen(Exception):
    """The call was refused without being made: the circuit is open (or probing)."""

    def __init__(self, name: str, state: State) -> None:
        super().__init__(f"circuit of {name} is {state}")
        self.name = name
        self.state = state


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """A breaker's state, as published to other replicas."""

    name: str
    state: State
    failure_count: int
    opened_at: datetime | None


class _Relay(pybreaker.CircuitBreakerListener):  # type: ignore[misc]
    """Forwards pybreaker's state changes to the owner (unless it is applying a remote one)."""

    def __init__(self, owner: AsyncCircuitBreaker) -> None:
        self._owner = owner

    def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
        # pybreaker notifies before it stores the new state, so pass the new state along.
        self._owner._changed(new_state.name)


class _Replay:
    """A synchronous stand-in for the finished operation, for pybreaker to record."""

    __slots__ = ("error", "value")

    def __init__(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error

    def __call__(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class AsyncCircuitBreaker:
    """One agent's breaker: pybreaker's state machine, awaited properly."""

    def __init__(
        self,
        name: str,
        *,
        fail_max: int,
        reset_timeout: float,
        on_change: Callable[[BreakerSnapshot], None] | None = None,
    ) -> None:
        self.name = name
        self._storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self._cb = pybreaker.CircuitBreaker(
            fail_max=fail_max,
            reset_timeout=reset_timeout,
            state_storage=self._storage,
            listeners=[_Relay(self)],
            name=name,
        )
        self._on_change = on_change
        self._forced = False
        self._probing = False
        self._quiet = False

    # -- calls --------------------------------------------------------------------------

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a timeout must count as a failure
    ) -> T:
        """Run ``operation`` if the circuit allows it and record how it went."""
        probe = self._admit()
        try:
            async with asyncio.timeout(timeout):
                value = await operation()
        except asyncio.CancelledError:
            raise  # neither success nor failure; the finally frees the probe slot
        except BaseException as error:
            self._record(_Replay(error=error))
            raise
        finally:
            if probe:
                self._probing = False
        self._record(_Replay(value=value))
        return value

    def _admit(self) -> bool:
        """Refuse, or let through; True when this call is the half-open probe."""
        if self._forced:
            raise BreakerOpen(self.name, "forced_open")
        state = self._cb.current_state
        if state == pybreaker.STATE_OPEN:
            opened_at = self._storage.opened_at
            reset = timedelta(seconds=self._cb.reset_timeout)
            if opened_at is not None and datetime.now(UTC) < opened_at + reset:
                raise BreakerOpen(self.name, "open")
            self._cb.half_open()
            state = pybreaker.STATE_HALF_OPEN
        if state == pybreaker.STATE_HALF_OPEN:
            if self._probing:
                raise BreakerOpen(self.name, "half_open")
            self._probing = True
            return True
        return False

    def _record(self, outcome: _Replay) -> None:
        if self._cb.current_state == pybreaker.STATE_OPEN:
            return  # another call tripped it meanwhile; this result changes nothing
        # pybreaker re-raises what it recorded (or CircuitBreakerError on a trip).
        with contextlib.suppress(BaseException):
            self._cb.call(outcome)

    # -- state --------------------------------------------------------------------------

    def snapshot(self) -> BreakerSnapshot:
        """The current state, failure count and opening time."""
        return self._snapshot(self._cb.current_state)

    def _snapshot(self, pybreaker_state: str) -> BreakerSnapshot:
        state: State = "forced_open" if self._forced else _FROM_PYBREAKER[pybreaker_state]
        opened_at = self._storage.opened_at if state in ("open", "forced_open") else None
        return BreakerSnapshot(self.name, state, self._cb.fail_counter, opened_at)

    def force_open(self) -> None:
        """Manual isolation: refuse every call until :meth:`force_close`."""
        self._forced = True
        self._cb.open()

    def force_close(self) -> None:
        """End isolation (or close a tripped circuit) and reset the failure count."""
        self._forced = False
        self._cb.close()

    def reconfigure(self, *, fail_max: int, reset_timeout: float) -> None:
        """Apply changed agent settings."""
        self._cb.fail_max = fail_max
        self._cb.reset_timeout = reset_timeout

    def apply_remote(self, snapshot: BreakerSnapshot) -> None:
        """Adopt a state another replica published, without publishing it again."""
        self._quiet = True
        try:
            self._forced = snapshot.state == "forced_open"
            if snapshot.state in ("open", "forced_open"):
                self._cb.open()
                if snapshot.opened_at is not None:
                    self._storage.opened_at = snapshot.opened_at
            elif snapshot.state == "half_open":
                self._cb.half_open()
            else:
                self._cb.close()
        finally:
            self._quiet = False

    def _changed(self, pybreaker_state: str) -> None:
        if not self._quiet and self._on_change is not None:
            self._on_change(self._snapshot(pybreaker_state))
