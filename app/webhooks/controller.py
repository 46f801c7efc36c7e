"""The n8n webhook endpoints. Each call: optional signature check, idempotent replay or
run, one flat JSON answer (errors stay problem+json with a 4xx, for n8n's error output)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from litestar import Controller, Request, Response, post
from litestar.connection import ASGIConnection
from litestar.di import NamedDependency
from litestar.handlers import BaseRouteHandler
from litestar.params import JSONBody

from app.auth.guards import integration_key
from app.auth.principal import Principal
from app.clock import Clock
from app.coordination.prefer import parse_prefer
from app.errors import PROBLEM_JSON
from app.settings import WebhookSettings
from app.webhooks.idempotency import ClaimingWrite, IdempotencyService, Seal
from app.webhooks.schemas import CleanupHook, CoordinationHook, MemoryHook
from app.webhooks.service import WebhookService
from app.webhooks.signatures import verify_signature

AnyRequest = Request[Principal, Any, Any]
# One dependency per handler: Litestar resolves two or more independent ones in an anyio
# task group of their own, a task spawned per dependency per request (6 % of a webhook's
# CPU in the profile, docs/benchmarks.md; tests/unit/test_dependencies.py holds every route
# to it); the idempotency service comes with the hooks.
Hooks = NamedDependency[WebhookService]


async def signed(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """A guard: the signature over the raw body holds (or none is needed), checked before
    the body is parsed, so an unsigned or forged call is a 401 whatever its body holds.
    Litestar keeps the body it read here for the handler's parsing."""
    if connection.scope.get("method") == "OPTIONS":
        return
    request = cast("AnyRequest", connection)
    settings: WebhookSettings = request.app.state.settings.webhooks
    clock: Clock = request.app.state.clock
    verify_signature(settings, dict(request.headers), await request.body(), clock.now())


async def _respond(
    request: AnyRequest,
    idempotency: IdempotencyService,
    body_key: str | None,
    handler: Callable[[Seal | None], Awaitable[dict[str, Any]]],
    claiming: ClaimingWrite | None = None,
) -> Response[dict[str, Any]]:
    key = request.headers.get("idempotency-key") or body_key

    async def run(seal: Seal | None) -> tuple[int, dict[str, Any]]:
        return 200, await handler(seal)

    raw = await request.json()
    stored = await idempotency.run(
        request.user.name,
        key,
        request.url.path,
        raw if isinstance(raw, dict) else {},
        run,
        claiming,
    )
    headers = {"Idempotent-Replayed": "true"} if stored.replayed else {}
    return Response(
        stored.body,
        status_code=stored.status,
        media_type=PROBLEM_JSON if stored.problem else "application/json",
        headers=headers,
    )


class N8nWebhookController(Controller):
    """Endpoints shaped for n8n's HTTP Request node."""

    path = "/webhooks/n8n"
    tags = ["n8n"]
    # Outer to the handlers' own guards: who signed (401) before what they may do (403).
    guards = [signed]

    @post("/coordination", status_code=200, summary="A user message from an n8n workflow")
    async def coordination(
        self,
        request: AnyRequest,
        data: JSONBody[CoordinationHook],
        hooks: Hooks,
    ) -> Response[dict[str, Any]]:
        """Continues (or starts) the user's session, runs the coordinator, and answers with
        one flat object: session_id, response, agent, degraded, pending_actions, progress,
        task_id. Waits for the agent up to the wait budget (``Prefer: wait=N`` honoured;
        respond-async is not: the answer is always this object)."""
        return await _respond(
            request,
            hooks.idempotency,
            data.idempotency_key,
            lambda seal: hooks.coordinate(
                request.user,
                user_id=data.user_id,
                user_ref=data.user_ref,
                session_id=data.session_id,
                session_type=data.session_type,
                text=data.text,
                channel=data.channel,
                context_flags=data.context_flags,
                prefer=parse_prefer(request.headers.getall("prefer", [])),
                seal=seal,
            ),
        )

    @post("/memory", status_code=200, summary="Write, read or query memories for an agent")
    async def memory(
        self,
        request: AnyRequest,
        data: JSONBody[MemoryHook],
        hooks: Hooks,
    ) -> Response[dict[str, Any]]:
        """The seed's memory update request (user_id, agent_name, memory_type,
        memory_content) with action write (default), read or query."""
        return await _respond(
            request,
            hooks.idempotency,
            data.idempotency_key,
            lambda seal: hooks.memory(request.user, data, seal),
            hooks.memory_claiming(request.user, data),
        )

    @post(
        "/cleanup",
        status_code=200,
        guards=[integration_key],
        summary="Run a cleanup job (or all) now",
    )
    async def cleanup(
        self,
        request: AnyRequest,
        data: JSONBody[CleanupHook],
        hooks: Hooks,
    ) -> Response[dict[str, Any]]:
        """Per-job counts. If a job did not succeed the answer is a 500 problem
        (``cleanup-failed``) whose ``jobs`` and ``failed`` say which and why: never stored
        under the Idempotency-Key, so a rerun runs the jobs again."""
        return await _respond(
            request,
            hooks.idempotency,
            data.idempotency_key,
            lambda _seal: hooks.cleanup(data.job, data.dry_run),
        )
