"""An asyncio circuit breaker built on pybreaker's state machine.

pybreaker (mandated) has no asyncio support: ``CircuitBreaker.call()`` on a coroutine
function gets a coroutine object back, records a success and never awaits it. This
wrapper keeps pybreaker as the state machine and the store (its states and transitions,
fail counter, ``fail_max``, ``reset_timeout``, ``exclude``, listeners, ``opened_at``) and
does the asynchronous parts itself:

* gate: refuse while forced open, or while open and ``reset_timeout`` has not passed
  since ``opened_at`` (pybreaker's own rule, evaluated with our clock); once it has, move
  to half-open with pybreaker's ``half_open()`` and let exactly one probe through;
* await the operation, under ``asyncio.timeout`` when a timeout is given;
* record the outcome by replaying it through pybreaker's synchronous ``call()``, so
  pybreaker counts the failure, applies ``exclude``, trips, reopens or closes exactly as
  it would for a synchronous call;
* cancellation (or any non-``Exception`` such as ``KeyboardInterrupt``) is neither success
  nor failure: nothing is recorded and the probe slot is freed.

An outcome is only recorded if the breaker has not changed state since the call was let
through: a slow call started while closed must not decide a later half-open probe.

pybreaker surface relied on (a pybreaker upgrade must keep these):
``CircuitBreaker(fail_max=, reset_timeout=, exclude=, listeners=, state_storage=, name=)``,
``call`` (runs a sync function and records its outcome), ``open``/``half_open``/``close``,
``fail_counter``, the ``fail_max``/``reset_timeout`` setters, the state names
``STATE_*``, ``CircuitBreakerError`` (raised by ``call`` on a trip),
``CircuitBreakerListener.state_change`` (called with the new state object, whose ``name``
is the new state, *before* the storage holds it), and ``CircuitMemoryStorage``'s
``state``, ``opened_at`` (read and written), ``reset_counter`` and ``increment_counter``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

import pybreaker

logger = logging.getLogger("switchboard.breaker")

T = TypeVar("T")
BreakerState = Literal["closed", "open", "half_open", "forced_open"]

_FROM_PYBREAKER: dict[str, BreakerState] = {
    pybreaker.STATE_CLOSED: "closed",
    pybreaker.STATE_OPEN: "open",
    pybreaker.STATE_HALF_OPEN: "half_open",
}


def _utc_now() -> datetime:
    # The same time source pybreaker uses for opened_at and its reset check.
    return datetime.now(UTC)


def _succeeded() -> None:
    """Stands in for an operation that returned, when pybreaker records the outcome."""


class BreakerOpen(Exception):
    """The call was refused without being made: the circuit is open (or probing)."""

    def __init__(self, name: str, state: BreakerState) -> None:
        super().__init__(f"circuit of {name} is {state}")
        self.name = name
        self.state = state


@dataclass(frozen=True, slots=True)
class BreakerSnapshot:
    """A breaker's state, as published to other replicas."""

    name: str
    state: BreakerState
    failure_count: int
    opened_at: datetime | None


class _Relay(pybreaker.CircuitBreakerListener):  # type: ignore[misc]
    """Forwards pybreaker's state changes to the breaker that owns it."""

    def __init__(self, owner: AsyncCircuitBreaker) -> None:
        self._owner = owner

    def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
        # pybreaker notifies before its storage holds the new state: pass the new one along.
        self._owner._state_changed(new_state.name)


class AsyncCircuitBreaker:
    """One agent's breaker: pybreaker's state machine, with coroutines awaited properly."""

    def __init__(
        self,
        name: str,
        *,
        fail_max: int,
        reset_timeout: float,
        clock: Callable[[], datetime] | None = None,
        on_change: Callable[[BreakerSnapshot], None] | None = None,
        exclude: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.name = name
        self._clock = clock or _utc_now
        self._on_change = on_change
        self._forced = False
        self._quiet = False
        # Bumped on every state change; a call remembers the epoch it was let through in.
        self._epoch = 0
        # The epoch whose half-open probe is in flight, if any.
        self._probe_epoch: int | None = None
        self._storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
        self._cb = pybreaker.CircuitBreaker(
            fail_max=fail_max,
            reset_timeout=reset_timeout,
            exclude=list(exclude),
            listeners=[_Relay(self)],
            state_storage=self._storage,
            name=name,
        )

    # -- calls --------------------------------------------------------------------------

    async def call(
        self,
        operation: Callable[[], Awaitable[T]],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - a timeout must count as a failure
    ) -> T:
        """Run ``operation`` if the circuit allows it and record how it went.

        Raises :class:`BreakerOpen` without running it when the circuit refuses, and
        ``TimeoutError`` (counted as a failure) when ``timeout`` seconds pass first."""
        epoch = self._admit()
        try:
            if timeout is None:
                value = await operation()
            else:
                async with asyncio.timeout(timeout):
                    value = await operation()
        except Exception as error:
            self._record_failure(error, epoch)
            raise
        finally:
            # Cancellation ends up here too: the slot is freed, nothing is recorded.
            if self._probe_epoch == epoch:
                self._probe_epoch = None
        if epoch == self._epoch:
            self._cb.call(_succeeded)
        return value

    def refusing(self) -> BreakerState | None:
        """The state in which a call made now would be refused, or None if it would be let
        through (as the probe, after an open circuit's reset timeout). No side effects: the
        coordinator ranks intents by it before calling anyone."""
        if self._forced:
            return "forced_open"
        state = self._storage.state
        if state == pybreaker.STATE_OPEN:
            # pybreaker's CircuitOpenState.before_call rule, with an injectable clock.
            opened_at = self._storage.opened_at
            reset = timedelta(seconds=self._cb.reset_timeout)
            if opened_at is not None and self._clock() < opened_at + reset:
                return "open"
            return None
        if state == pybreaker.STATE_HALF_OPEN and self._probe_epoch == self._epoch:
            # In a half-open epoch only the probe is let through, so the probe is the only
            # call whose epoch can equal _probe_epoch.
            return "half_open"
        return None

    def _admit(self) -> int:
        """Refuse, or let the call through and return the epoch it was let through in."""
        refused = self.refusing()
        if refused is not None:
            raise BreakerOpen(self.name, refused)
        if self._storage.state == pybreaker.STATE_OPEN:
            self._cb.half_open()  # past the reset timeout: this call is the probe
        if self._storage.state == pybreaker.STATE_HALF_OPEN:
            self._probe_epoch = self._epoch
        return self._epoch

    def _record_failure(self, error: Exception, epoch: int) -> None:
        if epoch != self._epoch:
            return  # the circuit moved on while this call was running
        traceback = error.__traceback__

        def fail() -> None:
            raise error

        try:
            self._cb.call(fail)
        except pybreaker.CircuitBreakerError:
            pass  # pybreaker announces a trip this way; the caller gets the real error
        except Exception as replayed:
            if replayed is not error:
                raise
        finally:
            # Re-raising inside pybreaker added its frames; the caller should not see them.
            error.__traceback__ = traceback

    # -- state --------------------------------------------------------------------------

    def snapshot(self) -> BreakerSnapshot:
        """The current state, failure count and opening time."""
        return self._snapshot(self._storage.state)

    def force_open(self) -> None:
        """Manual isolation: refuse every call, whatever the reset timeout, until
        :meth:`force_close`."""
        self._forced = True
        self._cb.open()

    def force_close(self) -> None:
        """End isolation (or close a tripped circuit) and reset the failure count."""
        self._forced = False
        self._cb.close()

    def reconfigure(self, *, fail_max: int, reset_timeout: float) -> None:
        """Apply changed agent settings; the current state and count are kept."""
        self._cb.fail_max = fail_max
        self._cb.reset_timeout = reset_timeout

    def apply_remote(self, snapshot: BreakerSnapshot) -> None:
        """Adopt the state another replica published, without announcing it again."""
        if snapshot.name != self.name:
            raise ValueError(f"snapshot of {snapshot.name} applied to breaker {self.name}")
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
            # The storage has no setter for the counter, only reset and increment.
            self._storage.reset_counter()
            for _ in range(max(snapshot.failure_count, 0)):
                self._storage.increment_counter()
        finally:
            self._quiet = False

    def _snapshot(self, pybreaker_state: str) -> BreakerSnapshot:
        state: BreakerState = "forced_open" if self._forced else _FROM_PYBREAKER[pybreaker_state]
        opened_at = self._storage.opened_at if state in ("open", "forced_open") else None
        return BreakerSnapshot(self.name, state, self._cb.fail_counter, opened_at)

    def _state_changed(self, pybreaker_state: str) -> None:
        """pybreaker moved (or was moved) to ``pybreaker_state``."""
        self._epoch += 1
        if pybreaker_state == pybreaker.STATE_OPEN:
            # pybreaker stamped opened_at with its own datetime.now(); use our clock.
            self._storage.opened_at = self._clock()
        if self._quiet or self._on_change is None:
            return
        try:
            self._on_change(self._snapshot(pybreaker_state))
        except Exception:
            # Raising into pybreaker mid-transition would leave its cached state and its
            # storage disagreeing; a failed announcement must not corrupt the breaker.
            logger.exception("on_change of breaker %s failed", self.name)
