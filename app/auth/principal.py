"""Who is calling: the admin, or a registered agent with roles."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID

ADMIN_NAME = "admin"
# The role of an n8n integration key (it may act for other agents); the webhooks check it.
INTEGRATION_ROLE = "coordination_manager"
# Roles the code gives meaning to itself; every other role is known through the access
# level that requires it (memory_access_levels.required_role).
ROLES_CHECKED_IN_CODE = (INTEGRATION_ROLE,)


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller of a request."""

    kind: Literal["admin", "agent"]
    name: str
    roles: frozenset[str] = field(default_factory=frozenset)
    agent_id: UUID | None = None
    # Set when a key owner acts for this agent (an n8n integration key, say): who that was.
    delegated_by: str | None = None

    @property
    def is_admin(self) -> bool:
        """True for the admin key."""
        return self.kind == "admin"

    def has_role(self, role: str) -> bool:
        """True if the caller holds ``role`` (the admin holds every role)."""
        return self.is_admin or role in self.roles

    @property
    def may_delegate(self) -> bool:
        """True for an n8n integration key: the admin, or an agent with the
        coordination_manager role. It may act for other agents and run cleanup."""
        return self.is_admin or INTEGRATION_ROLE in self.roles


ADMIN = Principal(kind="admin", name=ADMIN_NAME)
