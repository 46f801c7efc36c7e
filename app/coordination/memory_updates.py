"""The memories an agent's answer asks Switchboard to store: written under the agent's own
access rules, each on its own, and those that are refused reported, not raised."""

from __future__ import annotations

from app.agents.schemas import Agent
from app.auth.principal import Principal
from app.coordination.schemas import (
    AgentResponse,
    MemoryUpdate,
    MemoryUpdateOutcome,
    RejectedMemoryUpdate,
)
from app.errors import SwitchboardError
from app.memories.schemas import MemoryWrite
from app.memories.service import MemoryService
from app.sessions.schemas import Session


async def apply_memory_updates(
    memories: MemoryService, agent: Agent, session: Session, response: AgentResponse
) -> MemoryUpdateOutcome:
    """Store what ``agent`` asked to remember (``MemoryService.remember``: by key when it
    names a category and a key, else as a new memory), for the session's user."""
    if not response.memory_updates:
        return MemoryUpdateOutcome()
    principal = Principal(kind="agent", name=agent.name, roles=frozenset(agent.roles))
    applied = 0
    rejected: list[RejectedMemoryUpdate] = []
    for index, update in enumerate(response.memory_updates):
        try:
            await memories.remember(_write(update, session), principal)
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
