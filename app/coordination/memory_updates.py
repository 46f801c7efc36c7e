"""The memories an agent's answer asks Switchboard to store: written under the agent's own
access rules, each on its own, and those that are refused reported, not raised. On the
session itself they are the user's memories; on a branch, the branch's (an overlay that
reaches main when the branch merges)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from uuid import UUID

from app.agents.schemas import Agent
from app.auth.principal import Principal
from app.coordination.schemas import (
    AgentResponse,
    MemoryUpdate,
    MemoryUpdateOutcome,
    RejectedMemoryUpdate,
)
from app.errors import SwitchboardError, ValidationFailed
from app.memories.branch_service import BranchMemoryService
from app.memories.schemas import BranchMemoryWrite, MemoryWrite
from app.memories.service import MemoryService
from app.sessions.schemas import Session

# Why a memory update is refused on a branch: a branch's memories are named values.
UNNAMED_ON_BRANCH = (
    "A memory written on a branch is the branch's value of a (category, key): "
    "this update names no category or no key."
)


def agent_principal(agent: Agent) -> Principal:
    """The agent as the principal its memory reads and writes run under."""
    return Principal(kind="agent", name=agent.name, roles=frozenset(agent.roles))


async def apply_memory_updates(
    memories: MemoryService, agent: Agent, session: Session, response: AgentResponse
) -> MemoryUpdateOutcome:
    """Store what ``agent`` asked to remember (``MemoryService.remember``: by key when it
    names a category and a key, else as a new memory), for the session's user."""
    principal = agent_principal(agent)

    async def store(update: MemoryUpdate) -> None:
        await memories.remember(_write(update, session), principal)

    return await _each(response, store)


async def apply_branch_memory_updates(
    memories: BranchMemoryService,
    agent: Agent,
    session_id: UUID,
    branch: str,
    response: AgentResponse,
) -> MemoryUpdateOutcome:
    """Store what ``agent`` asked to remember as the branch's values (``PUT`` of a branch
    memory); an update without a category and a key is refused (422)."""
    principal = agent_principal(agent)

    async def store(update: MemoryUpdate) -> None:
        if update.category is None or update.key is None:
            raise ValidationFailed(UNNAMED_ON_BRANCH)
        # The update's fields but its scope: a branch's value is the branch's.
        write = BranchMemoryWrite(**update.model_dump(exclude={"scope"}))
        await memories.put(session_id, branch, write, None, False, principal)

    return await _each(response, store)


async def _each(
    response: AgentResponse, store: Callable[[MemoryUpdate], Awaitable[None]]
) -> MemoryUpdateOutcome:
    """``store`` each update on its own: the refused ones reported with their status."""
    if not response.memory_updates:
        return MemoryUpdateOutcome()
    applied = 0
    rejected: list[RejectedMemoryUpdate] = []
    for index, update in enumerate(response.memory_updates):
        try:
            await store(update)
            applied += 1
        except (SwitchboardError, ValueError) as exc:
            status = exc.status if isinstance(exc, SwitchboardError) else 422
            rejected.append(RejectedMemoryUpdate(index=index, status=status, detail=str(exc)))
    return MemoryUpdateOutcome(applied=applied, rejected=rejected)


def _write(update: MemoryUpdate, session: Session) -> MemoryWrite:
    """The write an update asks for: session-level unless it says the fact belongs to the
    user (a ValueError if it is not a memory POST /v1/memories would take)."""
    return MemoryWrite(
        user_id=session.user_id,
        session_id=session.session_id if update.scope == "session" else None,
        memory_type=update.memory_type,
        category=update.category,
        key=update.key,
        content=update.content,
        access_level=update.access_level,
    )
