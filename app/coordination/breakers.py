"""One circuit breaker per agent, shared by every replica.

Calls never touch the database: each replica keeps its breakers in memory. A state change
(closed -> open, open -> half-open, manual isolation, ...) is written to ``agent_breakers``
and announced with NOTIFY in the same statement; the other replicas LISTEN and adopt it,
and re-read the table every ``sync_interval`` seconds in case a notification was missed
(a dropped LISTEN connection, a replica that started late).
"""

from __future__ import annotations

import asyncio
import logging

import msgspec

from app.agents.schemas import Agent
from app.clock import Clock
from app.coordination import repository as repo
from app.coordination.breaker import AsyncCircuitBreaker, BreakerSnapshot
from app.coordination.schemas import PublishedBreaker
from app.db.listener import Listener
from app.db.pool import Database

logger = logging.getLogger("switchboard.breakers")

CHANNEL = "switchboard_breakers"
_DEFAULT_SETTINGS = (5, 30.0)
# What save_breaker's NOTIFY carries: the published state as JSON.
_NOTIFICATION = msgspec.json.Decoder(PublishedBreaker).decode


class BreakerRegistry:
    """The breakers of this replica, kept in step with the other replicas."""

    def __init__(
        self, database: Database, clock: Clock, *, sync_interval: float, replica_id: str
    ) -> None:
        self._db = database
        self._clock = clock
        self.replica_id = replica_id
        self._breakers: dict[str, AsyncCircuitBreaker] = {}
        self._settings: dict[str, tuple[int, float]] = {}
        self._versions: dict[str, int] = {}
        self._pending: set[asyncio.Task[None]] = set()
        self._listener = Listener(
            database.url, CHANNEL, self._on_notify, catch_up=self.sync, interval=sync_interval
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Adopt the published states, then follow changes (LISTEN plus periodic re-read).

        A database that is down at start-up does not stop the service: the background loop
        keeps trying, and local breakers work meanwhile."""
        try:
            await self.sync()
        except Exception:
            logger.warning("could not read breaker states at start-up; will retry")
        await self._listener.start()

    async def stop(self) -> None:
        """Stop following, and finish publishing what is still in flight."""
        await self._listener.stop()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    # -- use ----------------------------------------------------------------------------

    def breaker_for(self, agent: Agent) -> AsyncCircuitBreaker:
        """The agent's breaker, created on first use and kept in step with its settings."""
        settings = (agent.fail_max, agent.reset_timeout_ms / 1000)
        breaker = self._breakers.get(agent.name)
        if breaker is None:
            breaker = self._create(agent.name, settings)
        elif self._settings[agent.name] != settings:
            breaker.reconfigure(fail_max=settings[0], reset_timeout=settings[1])
            self._settings[agent.name] = settings
        return breaker

    def snapshots(self) -> list[BreakerSnapshot]:
        """Every breaker this replica holds, by agent name."""
        return [self._breakers[name].snapshot() for name in sorted(self._breakers)]

    def peek(self, agent_name: str) -> BreakerSnapshot | None:
        """The current state of an agent's breaker, if it has one on this replica."""
        breaker = self._breakers.get(agent_name)
        return None if breaker is None else breaker.snapshot()

    async def isolate(self, agent: Agent, state: str) -> BreakerSnapshot:
        """Manual isolation: force the circuit open, or close it; published at once."""
        breaker = self.breaker_for(agent)
        if state == "open":
            breaker.force_open()
        else:
            breaker.force_close()
        await self.flush()
        return breaker.snapshot()

    async def flush(self) -> None:
        """Wait until every state change so far has been published."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def sync(self) -> None:
        """Re-read every published state and adopt the ones newer than what we have."""
        async with self._db.connection() as conn:
            rows = await repo.list_breakers(conn)
        for published in rows:
            self._adopt(published)

    # -- internals ----------------------------------------------------------------------

    def _publish_later(self, snapshot: BreakerSnapshot) -> None:
        # on_change is synchronous (pybreaker listeners are); publishing is I/O.
        task = asyncio.get_running_loop().create_task(self._publish(snapshot))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _publish(self, snapshot: BreakerSnapshot) -> None:
        try:
            async with self._db.connection() as conn:
                version = await repo.save_breaker(
                    conn,
                    snapshot.name,
                    snapshot.state,
                    snapshot.failure_count,
                    snapshot.opened_at,
                    self.replica_id,
                    self._clock.now(),
                )
            self._versions[snapshot.name] = max(self._versions.get(snapshot.name, 0), version)
        except Exception:
            # The local breaker still protects this replica; the periodic sync or the next
            # change publishes again.
            logger.warning("could not publish breaker state of %s", snapshot.name, exc_info=True)

    def _adopt(self, published: PublishedBreaker) -> None:
        name, version = published.agent_name, published.version
        if version <= self._versions.get(name, 0):
            return
        self._versions[name] = version
        if published.updated_by == self.replica_id:
            return
        snapshot = BreakerSnapshot(
            name=name,
            state=published.state,
            failure_count=published.failure_count,
            opened_at=published.opened_at,
        )
        breaker = self._breakers.get(name)
        if breaker is None:
            # Not used here yet: defaults until breaker_for() applies the agent's settings.
            breaker = self._create(name, _DEFAULT_SETTINGS)
        breaker.apply_remote(snapshot)

    def _create(self, name: str, settings: tuple[int, float]) -> AsyncCircuitBreaker:
        breaker = AsyncCircuitBreaker(
            name, fail_max=settings[0], reset_timeout=settings[1], on_change=self._publish_later
        )
        self._breakers[name] = breaker
        self._settings[name] = settings
        return breaker

    def _on_notify(self, payload: str) -> None:
        try:
            self._adopt(_NOTIFICATION(payload))
        except Exception:
            logger.warning("ignored a malformed breaker notification", exc_info=True)
