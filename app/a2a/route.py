"""The A2A JSON-RPC endpoint (``POST /a2a``) in the Litestar app: an ASGI route that hands
the request to the a2a-sdk's ``JsonRpcDispatcher`` (JSON-RPC parsing and error codes, the
``A2A-Version`` header, the protocol's JSON and its SSE streams), which calls
``SwitchboardRequestHandler``.

It runs behind the app's middleware like every route: the API key is checked (401
problem+json without one, as everywhere) and the key's rate limit spent before the body is
read. The body is read up to the app's body limit; a larger one is the SDK's "Payload too
large" error. A2A 0.3 clients (``message/send``, ``tasks/get``...) are served on the same
endpoint by the SDK's 0.3 adapter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a2a.auth.user import User
from a2a.extensions.common import HTTP_EXTENSION_HEADER, get_requested_extensions
from a2a.server.context import ServerCallContext
from a2a.server.routes.common import ServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from litestar import asgi
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from app.a2a.card import A2A_PATH
from app.a2a.handler import SwitchboardRequestHandler
from app.a2a.store import PRINCIPAL_KEY
from app.auth.principal import Principal

if TYPE_CHECKING:
    from litestar.types import Receive, ReceiveMessage, Scope, Send

# Where create_app keeps the dispatcher and the body limit.
DISPATCHER_STATE = "a2a_dispatcher"
BODY_LIMIT_STATE = "a2a_max_body_bytes"


class PrincipalUser(User):
    """A Switchboard principal as the SDK's user."""

    def __init__(self, principal: Principal) -> None:
        self._principal = principal

    @property
    def is_authenticated(self) -> bool:
        """Always: the route is behind the API key middleware."""
        return True

    @property
    def user_name(self) -> str:
        """The key's name (an agent's name, or admin)."""
        return self._principal.name


class PrincipalContextBuilder(ServerCallContextBuilder):
    """The call context: the authenticated principal, the headers (the SDK reads
    ``A2A-Version`` from them) and the requested extensions."""

    def build(self, request: Request) -> ServerCallContext:
        """A context carrying the principal the auth middleware put in the scope."""
        principal = request.scope.get("user")
        if not isinstance(principal, Principal):
            raise RuntimeError("The A2A route ran without an authenticated principal.")
        return ServerCallContext(
            user=PrincipalUser(principal),
            state={PRINCIPAL_KEY: principal, "headers": dict(request.headers)},
            requested_extensions=get_requested_extensions(
                request.headers.getlist(HTTP_EXTENSION_HEADER)
            ),
        )


def a2a_dispatcher(handler: SwitchboardRequestHandler) -> JsonRpcDispatcher:
    """The SDK's dispatcher over Switchboard's handler, with 0.3 clients accepted."""
    return JsonRpcDispatcher(
        request_handler=handler,
        context_builder=PrincipalContextBuilder(),
        enable_v0_3_compat=True,
    )


def _limited(receive: Receive, max_bytes: int) -> Receive:
    """``receive`` that refuses a body over ``max_bytes`` (413, which the SDK answers with
    its JSON-RPC error) instead of reading it whole into memory."""
    seen = 0

    async def limited() -> ReceiveMessage:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > max_bytes:
                raise HTTPException(status_code=413)
        return message

    return limited


@asgi(A2A_PATH, is_mount=False, copy_scope=False, tags=["a2a"])
async def a2a_endpoint(scope: Scope, receive: Receive, send: Send) -> None:
    """A2A 1.0 JSON-RPC: SendMessage, SendStreamingMessage (SSE), GetTask, ListTasks,
    CancelTask, SubscribeToTask (SSE), the push notification config methods and
    GetExtendedAgentCard. docs/a2a.md."""
    if scope.get("method") != "POST":
        await Response(status_code=405, headers={"Allow": "POST"})(scope, receive, send)  # type: ignore[arg-type]
        return
    state = scope["litestar_app"].state
    dispatcher: JsonRpcDispatcher = state[DISPATCHER_STATE]
    request = Request(scope, _limited(receive, state[BODY_LIMIT_STATE]))  # type: ignore[arg-type]
    response = await dispatcher.handle_requests(request)
    await response(scope, receive, send)  # type: ignore[arg-type]
