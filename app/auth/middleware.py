"""Authentication middleware: runs before routing reaches a handler, so before the body is
read. Accepts ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from litestar.middleware import AbstractAuthenticationMiddleware, AuthenticationResult

from app.auth.keys import hash_key
from app.errors import Unauthorized

if TYPE_CHECKING:
    from litestar.connection import ASGIConnection

    from app.agents.service import AgentService
    from app.auth.ratelimit import RateLimiter

# Paths anyone may call: liveness, readiness, metrics, the OpenAPI document and agent cards.
PUBLIC_PATHS = ["^/health$", "^/ready$", "^/metrics$", "^/schema", "^/.well-known/"]


def presented_key(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    """The API key in the request headers, if any."""
    authorization = connection.headers.get("authorization")
    if authorization:
        scheme, _, credentials = authorization.partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
        return None
    api_key = connection.headers.get("x-api-key")
    return api_key.strip() if api_key and api_key.strip() else None


class ApiKeyAuthMiddleware(AbstractAuthenticationMiddleware):
    """Resolve the caller's key to a :class:`Principal` or answer 401."""

    async def authenticate_request(
        self, connection: ASGIConnection[Any, Any, Any, Any]
    ) -> AuthenticationResult:
        """Look the key up; the admin key is checked first, in constant time."""
        key = presented_key(connection)
        if key is None:
            raise Unauthorized(
                "Send an API key: Authorization: Bearer <key> or X-API-Key: <key>.",
            )
        agents: AgentService = connection.app.state.agent_service
        principal = await agents.authenticate(hash_key(key))
        if principal is None:
            raise Unauthorized("The API key is not valid (unknown, revoked or disabled).")
        limiter: RateLimiter = connection.app.state.rate_limiter
        limiter.take(principal.name)
        return AuthenticationResult(user=principal, auth=None)
