"""Route guards: which principals may call a handler.

Litestar runs a handler's guards before it resolves the handler's arguments, so before the
body is read or parsed: every permission that depends only on the caller and the path is a
guard, and a caller without it gets 403 whatever its body holds (never 400 or 422 that
would tell it how to shape a request it may not make).
"""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from app.auth.principal import Principal
from app.errors import Forbidden


def _caller(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal | None:
    """The principal, or None for a pre-flight (answered with Allow, unauthenticated, like
    every other route)."""
    if connection.scope.get("method") == "OPTIONS":
        return None
    principal: Principal = connection.user
    return principal


def admin_only(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Allow the admin key only (403 for agents)."""
    principal = _caller(connection)
    if principal is not None and not principal.is_admin:
        raise Forbidden("Only the admin key may do this.")


def admin_or_named_agent(
    connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler
) -> None:
    """Allow the admin key, or the agent the ``{name}`` path parameter names."""
    principal = _caller(connection)
    if principal is None or principal.is_admin:
        return
    if principal.name != connection.path_params.get("name"):
        raise Forbidden("An agent may do this only for itself; this needs the admin key.")


def integration_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Allow the admin key or an agent key with the coordination_manager role."""
    principal = _caller(connection)
    if principal is not None and not principal.may_delegate:
        raise Forbidden("This needs the admin key or a coordination_manager agent key.")
