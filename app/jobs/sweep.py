"""A sweep as the services see it: what one job run hands to each service method it calls.

A service's sweep method names its steps and gives, for each, one batch (a statement that
changes at most ``limit`` rows and says how many it took) and one count (what the batches
would take, for a dry run). The rules stay in the service and its SQL; how batches run is
the job runner's rule, kept here once: each batch is one transaction that also records the
run's progress (and renews its claim), so a crash between batches loses nothing, and a
step ends with the first batch that takes fewer rows than the limit (a walk's, with the
first batch that says it is done).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime

from app.db.pool import Connection, Database

# One batch: at most `limit` rows changed, in the caller's transaction; how many it took.
Batch = Callable[[Connection, int], Awaitable[int]]
# One batch of a walk: rows changed, in the caller's transaction, and whether the walk is done
# (a walk's batch may take fewer than `limit` rows and still have more to go).
Stride = Callable[[Connection, int], Awaitable[tuple[int, bool]]]
# A dry run's count of what a step's batches would take.
Count = Callable[[Connection], Awaitable[int]]
# Records a batch's rows and the run's details in the batch's own transaction.
Progress = Callable[[Connection, int, dict[str, int]], Awaitable[None]]


class Sweep:
    """One run of a job: its time, its batch size, dry or not, and the details so far."""

    def __init__(
        self,
        database: Database,
        now: datetime,
        batch_size: int,
        *,
        dry_run: bool,
        progress: Progress,
    ) -> None:
        self._db = database
        self._progress = progress
        self._batch_size = batch_size
        self._dry_run = dry_run
        # Every batch of a run works from the instant the run started.
        self.now = now
        # Rows taken (or, in a dry run, counted) per step, in the order the steps ran.
        self.details: dict[str, int] = {}

    async def step(self, name: str, batch: Batch, count: Count) -> None:
        """Run one step to the end (batches until one is short), or count it (dry run)."""

        async def stride(conn: Connection, limit: int) -> tuple[int, bool]:
            taken = await batch(conn, limit)
            return taken, taken < limit

        await self.walk(name, stride, count)

    async def walk(self, name: str, stride: Stride, count: Count) -> None:
        """Run one step whose batch says itself when the step is done: batches until one
        says so (or, in a dry run, the count)."""
        self.details.setdefault(name, 0)
        if self._dry_run:
            async with self._db.connection() as conn:
                self.details[name] = await count(conn)
            return
        while True:
            # trace: the events a batch writes carry the run's trace (their column default).
            async with self._db.transaction(trace=True) as conn:
                taken, done = await stride(conn, self._batch_size)
                self.details[name] += taken
                await self._progress(conn, taken, self.details)
            if done:
                return

    async def call_out(self, name: str, work: Callable[[], Awaitable[int]], count: Count) -> None:
        """A step that calls out (an agent's card fetched over HTTP): ``work`` runs outside
        any transaction, so that no connection is held while a remote party answers, and
        says how many it took; the run's progress is recorded after it. A dry run counts."""
        self.details.setdefault(name, 0)
        if self._dry_run:
            async with self._db.connection() as conn:
                self.details[name] = await count(conn)
            return
        taken = await work()
        self.details[name] += taken
        async with self._db.transaction(trace=True) as conn:
            await self._progress(conn, taken, self.details)
