"""The memories an agent's answer asks Switchboard to store: written under the agent's own
access rules, each on its own, and those that are refused reported, not raised."""

from __future__ import annotations

from typing import Any

from app.auth.principal import Principal
from app.coordination.schemas import AgentResponse, MemoryUpdateOutcome, RoutingAgent
from app.errors import SwitchboardError
from app.memories.schemas import MemoryUpsert, MemoryWrite
from app.memories.service import MemoryService
from app.sessions.schemas import Session


async def apply_memory_updates(
    memories: MemoryService, agent: RoutingAgent, session: Session, response: AgentResponse
) -> MemoryUpdateOutcome:
    """Store what ``agent`` asked to remember: by key when it names a category and a key,
    else as a new memory; session-level unless it says the fact belongs to the user."""
    if not response.memory_updates:
        return MemoryUpdateOutcome()
    principal = Principal(kind="agent", name=agent.name, roles=frozenset(agent.roles))
    applied = 0
    rejected: list[dict[str, Any]] = []
    for index, update in enumerate(response.memory_updates):
        session_id = session.session_id if update.scope == "session" else None
        try:
            if update.key is not None and update.category is not None:
                await memories.upsert_by_key(
                    MemoryUpsert(
                        user_id=session.user_id,
                        session_id=session_id,
                        category=update.category,
                        key=update.key,
                        memory_type=update.memory_type,
                        content=update.content,
                        access_level=update.access_level,
                    ),
                    None,
                    False,
                    principal,
                )
            else:
                await memories.write(
                    [
                        MemoryWrite(
                            user_id=session.user_id,
                            session_id=session_id,
                            memory_type=update.memory_type,
                            category=update.category,
                            key=update.key,
                            content=update.content,
                            access_level=update.access_level,
                        )
                    ],
                    principal,
                    batch=False,
                )
            applied += 1
        except (SwitchboardError, ValueError) as exc:
            status = exc.status if isinstance(exc, SwitchboardError) else 422
            rejected.append({"index": index, "status": status, "detail": str(exc)})
    return MemoryUpdateOutcome(applied=applied, rejected=rejected)
