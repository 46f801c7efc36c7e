"""Where a coordinated turn is read and written: the session itself (``main``) or one of its
branches.

The coordinator (service.py) and a task's late answer (completion.py) run the same turn
against either; what differs between the two lives here and nowhere else: which document
the turn reads and writes its version to (with its decision and event, in one statement),
where the agent's memory updates go, and which memories the agent is shown with its request
and the fallback reads. On a branch: the branch's versions, the branch's memories (its own
values over main's), and a decision naming the branch; main is untouched until the branch
merges.
"""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

import msgspec

from app.agents.schemas import Agent
from app.auth.principal import Principal
from app.branches.service import BranchService
from app.coordination.memory_updates import (
    agent_principal,
    apply_branch_memory_updates,
    apply_memory_updates,
)
from app.coordination.schemas import AgentResponse, MemoryUpdateOutcome
from app.db.pool import BeforeCommit, Database
from app.events.schemas import NewEvent
from app.memories.branch_service import BranchMemoryService
from app.memories.schemas import BranchMemory, Memory
from app.memories.service import MemoryService
from app.sessions.schemas import Session
from app.sessions.service import Mutation, SessionService, require_open


@dataclass(frozen=True, slots=True)
class SessionTarget:
    """The session itself: its versions (``SessionService.apply_change``), the user's
    memories."""

    session_id: UUID
    _db: Database
    _sessions: SessionService
    _memories: MemoryService

    @property
    def branch(self) -> str | None:
        """The branch's name; None: the session is main."""
        return None

    async def document(self) -> Session:
        """The document as the turn reads it: 404 when it is unknown, 409 when it takes
        no changes."""
        session = await self._sessions.get_session(self.session_id)
        require_open(session)
        return session

    async def current(self) -> Session:
        """The document as it is, writable or not (404 when it is gone)."""
        return await self._sessions.get_session(self.session_id)

    async def write(
        self,
        actor: str,
        mutate: Mutation,
        *,
        read: Session | None = None,
        decision: msgspec.Struct | None = None,
        event: NewEvent | None = None,
        before_commit: BeforeCommit[tuple[Session, UUID | None]] | None = None,
    ) -> tuple[Session, UUID | None]:
        """``mutate`` applied to the head and written as the next version, with
        ``decision`` (its id returned) and ``event``; ``read``: the document as last read;
        ``before_commit``: work that commits with the write."""
        return await self._sessions.apply_change(
            self.session_id,
            actor,
            mutate,
            read=read,
            decision=decision,
            event=event,
            before_commit=before_commit,
        )

    async def remember(
        self, agent: Agent, session: Session, response: AgentResponse
    ) -> MemoryUpdateOutcome:
        """The memory updates of ``agent``'s answer: the user's memories."""
        return await apply_memory_updates(self._memories, agent, session, response)

    async def agent_memories(self, agent: Agent) -> tuple[str | None, list[BranchMemory]]:
        """What an agent's request shows of the memories: nothing on main (an agent reads
        main's memories itself, GET /v1/memories)."""
        return None, []

    async def read_category(
        self, session: Session, category: str, principal: Principal, purpose: str, limit: int
    ) -> list[Memory]:
        """The user's memories of ``category`` that ``principal`` may read (a fallback
        filling in a template), newest first: main's."""
        async with self._db.connection() as conn:
            return await self._memories.read_user_category(
                conn, session.user_id, category, principal, purpose=purpose, limit=limit
            )


@dataclass(frozen=True, slots=True)
class BranchTarget:
    """A branch of the session: its versions (``BranchService.apply_change``), its
    memories (an overlay on the user's), shown to the agent with its request."""

    session_id: UUID
    name: str
    _branches: BranchService
    _memories: BranchMemoryService
    # How many memories an agent's request shows on a branch.
    _memory_limit: int

    @property
    def branch(self) -> str | None:
        """The branch's name."""
        return self.name

    async def document(self) -> Session:
        """The branch shown as its session, if it takes changes (open, session open)."""
        return await self._branches.document(self.session_id, self.name)

    async def current(self) -> Session:
        """The branch shown as its session, merged or not."""
        return await self._branches.document(self.session_id, self.name, writable=False)

    async def write(
        self,
        actor: str,
        mutate: Mutation,
        *,
        read: Session | None = None,
        decision: msgspec.Struct | None = None,
        event: NewEvent | None = None,
        before_commit: BeforeCommit[tuple[Session, UUID | None]] | None = None,
    ) -> tuple[Session, UUID | None]:
        """The branch's next version (under its row lock: ``read`` is not needed)."""
        return await self._branches.apply_change(
            self.session_id,
            self.name,
            actor,
            mutate,
            decision=decision,
            event=event,
            before_commit=before_commit,
        )

    async def remember(
        self, agent: Agent, session: Session, response: AgentResponse
    ) -> MemoryUpdateOutcome:
        """The branch's memories (named values only)."""
        return await apply_branch_memory_updates(
            self._memories, agent, self.session_id, self.name, response
        )

    async def agent_memories(self, agent: Agent) -> tuple[str | None, list[BranchMemory]]:
        """The newest memories the agent may read as the branch sees them."""
        if self._memory_limit == 0:
            return self.name, []
        page = await self._memories.list_memories(
            self.session_id, self.name, None, self._memory_limit, None, agent_principal(agent)
        )
        return self.name, page.items

    async def read_category(
        self, session: Session, category: str, principal: Principal, purpose: str, limit: int
    ) -> list[Memory]:
        """The branch's view of the category (its values over main's)."""
        page = await self._memories.list_memories(
            self.session_id, self.name, category, limit, None, principal
        )
        return list(page.items)


# The document a turn works on: both kinds answer the same calls (document, current,
# write, remember, agent_memories, read_category), and nothing outside this module asks
# which one it has.
TurnTarget = SessionTarget | BranchTarget


class TurnTargets:
    """Makes the target of a turn: the session, or a branch of it."""

    def __init__(
        self,
        database: Database,
        sessions: SessionService,
        memories: MemoryService,
        branches: BranchService,
        branch_memories: BranchMemoryService,
        branch_memory_limit: int,
    ) -> None:
        self._db = database
        self._sessions = sessions
        self._memories = memories
        self._branches = branches
        self._branch_memories = branch_memories
        self._branch_memory_limit = branch_memory_limit

    def of(self, session_id: UUID, branch: str | None = None) -> TurnTarget:
        """The session itself (``branch`` None), or its branch ``branch``."""
        if branch is None:
            return SessionTarget(session_id, self._db, self._sessions, self._memories)
        return BranchTarget(
            session_id,
            branch,
            self._branches,
            self._branch_memories,
            self._branch_memory_limit,
        )
