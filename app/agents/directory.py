"""The agent list the coordinator routes by, kept per replica and dropped when agents change.

Every message needs every agent (routing, availability, the handoff); reading them was one
of the four statements a message sends. A statement-level trigger on agents (schema.sql
``agents_changed``) tells of any change, whoever makes it, on ``switchboard_agents``:

- a write through a Switchboard pool (any replica, the scheduler, the CLI) announces it
  (``announce_after_commit``, app/db/announce.py): this process drops the list when the
  writing connection is given back, after the commit and before the response is sent; the
  other processes, when the writer's coalesced NOTIFY arrives (its echo here is skipped);
- a write from psql or another tool, which would hear no announcement, NOTIFYs in its
  statement.

The list is kept only while this replica LISTENs on the channel. While the LISTEN
connection is down nothing is kept (every message reads the table, as before), and the
listener's catch-up, run after each (re)connect and every ``sync_interval`` seconds, drops
the list too, so a missed notification costs at most one interval.
"""

from __future__ import annotations

from app.agents import repository as repo
from app.agents.schemas import Agent
from app.db.listener import Listener
from app.db.pool import Connection, Database

CHANNEL = "switchboard_agents"


class AgentDirectory:
    """Every agent, by name, as the coordinator reads them; kept while it can be told."""

    def __init__(self, database: Database, *, sync_interval: float) -> None:
        self._agents: tuple[Agent, ...] | None = None
        # Bumped by every drop: a read that started before one must not be kept.
        self._generation = 0
        self._announcer = database.announcer
        self._listener = Listener(
            database.url, CHANNEL, self._on_notify, catch_up=self._catch_up, interval=sync_interval
        )
        # This process's own writes drop the list at their commit, with no NOTIFY.
        self._announcer.listen(CHANNEL, self._on_announce)

    async def start(self) -> None:
        """Follow changes; until the LISTEN connection is up, every read goes to the table."""
        await self._listener.start()

    async def stop(self) -> None:
        """Stop following (and keeping)."""
        await self._listener.stop()
        self.invalidate()

    def kept(self) -> list[Agent] | None:
        """The kept list, when there is one and changes can be heard; else None."""
        kept = self._agents
        return list(kept) if kept is not None and self._listener.listening else None

    async def agents(self, conn: Connection) -> list[Agent]:
        """Every agent, by name: the kept list, else read on ``conn`` (and kept if no change
        was announced while it was read and the listener is up)."""
        kept = self.kept()
        if kept is not None:
            return kept
        generation, listening = self._generation, self._listener.listening
        agents = await repo.list_agents(conn)
        if listening and self._listener.listening and generation == self._generation:
            self._agents = tuple(agents)
        return agents

    def invalidate(self) -> None:
        """Drop the kept list: the next read goes to the table."""
        self._agents = None
        self._generation += 1

    def _on_announce(self, _payload: str) -> None:
        self.invalidate()

    def _on_notify(self, payload: str) -> None:
        # The echo of this process's own NOTIFY: its commit dropped the list already.
        if self._announcer.from_elsewhere(payload):
            self.invalidate()

    async def _catch_up(self) -> None:
        self.invalidate()
