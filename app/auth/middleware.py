"""Authentication middleware: runs before routing reaches a handler, so before the body is
read. Accepts ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``.

A plain ASGI middleware rather than Litestar's ``AbstractAuthenticationMiddleware``, with
the same rules (HTTP and WebSocket scopes, pre-flights and the ``exclude`` paths skipped,
a handler may opt out with ``exclude_from_auth``): that class builds a connection object
and decodes every header into a multidict to read two of them, on every request; this one
reads them from the scope's raw header list (docs/benchmarks.md, "Per-request machinery").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from litestar.enums import ScopeType

from app.auth.keys import hash_key
from app.errors import Unauthorized

if TYPE_CHECKING:
    from litestar.types import ASGIApp, Receive, Scope, Send

    from app.agents.service import AgentService
    from app.auth.principal import Principal
    from app.auth.ratelimit import RateLimiter

# Paths anyone may call: liveness, readiness, metrics, the OpenAPI document and agent cards.
PUBLIC_PATHS = ["^/health$", "^/ready$", "^/metrics$", "^/schema", "^/.well-known/"]

_AUTHENTICATED_SCOPES = frozenset({ScopeType.HTTP, ScopeType.WEBSOCKET})
# A route handler with this key true in its ``opt`` needs no key (Litestar's convention).
EXCLUDE_FROM_AUTH = "exclude_from_auth"


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """The API key in the request's raw (ASGI, lower-case names) headers, if any: a
    non-empty first ``Authorization`` header decides, else the first ``X-API-Key``."""
    authorization = api_key = None
    for raw_name, value in headers:
        # ASGI servers send lower-case names (uvicorn does); a lower() costs little here.
        name = raw_name.lower()
        if name == b"authorization":
            if authorization is None:
                authorization = value
        elif name == b"x-api-key" and api_key is None:
            api_key = value
    if authorization:
        scheme, _, credentials = authorization.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer" and credentials.strip():
            return credentials.strip()
        return None
    if api_key is None:
        return None
    key = api_key.decode("latin-1").strip()
    return key or None


def _matched_path(scope: Scope) -> str:
    """The path the exclusions are matched against: as Litestar's own middleware does, a
    mounted app's requests by their raw path (Litestar rewrites ``path`` for a mount, so
    ``/mounted/health`` must not pass for ``/health``)."""
    if getattr(scope.get("route_handler"), "is_mount", False):
        return str(scope["raw_path"].decode())
    return str(scope["path"])


class ApiKeyAuthMiddleware:
    """Resolve the caller's key to a :class:`Principal` (``scope["user"]``) or answer 401."""

    def __init__(self, app: ASGIApp, exclude: Sequence[str] = ()) -> None:
        self.app = app
        self._exclude = re.compile("|".join(exclude)) if exclude else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Authenticate, unless the request is one that needs no key."""
        handler = scope.get("route_handler")
        if (
            scope["type"] in _AUTHENTICATED_SCOPES
            and scope.get("method") != "OPTIONS"
            and not (handler is not None and handler.opt.get(EXCLUDE_FROM_AUTH))
            and (self._exclude is None or self._exclude.search(_matched_path(scope)) is None)
        ):
            scope["user"] = await self.authenticate(scope)
            scope["auth"] = None
        await self.app(scope, receive, send)

    async def authenticate(self, scope: Scope) -> Principal:
        """Look the key up (the admin key is checked first, in constant time) and spend
        one of the caller's rate-limit tokens."""
        key = presented_key(scope["headers"])
        if key is None:
            raise Unauthorized(
                "Send an API key: Authorization: Bearer <key> or X-API-Key: <key>.",
            )
        state = scope["litestar_app"].state
        agents: AgentService = state.agent_service
        principal = await agents.authenticate(hash_key(key))
        if principal is None:
            raise Unauthorized("The API key is not valid (unknown, revoked or disabled).")
        limiter: RateLimiter = state.rate_limiter
        limiter.take(principal.name)
        return principal
