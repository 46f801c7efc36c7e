"""Route guards: which principals may call a handler."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from app.auth.principal import Principal
from app.errors import Forbidden


def admin_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Allow the admin key only (403 for agents)."""
    if connection.scope.get("method") == "OPTIONS":
        return  # pre-flight: answered with Allow, unauthenticated, like every other route
    principal: Principal = connection.user
    if not principal.is_admin:
        raise Forbidden("Only the admin key may do this.")
