"""``create_app``: the one place routes, dependencies, middleware and error handlers meet."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware.base import DefineMiddleware

from app.agents.controller import AgentController, SkillController
from app.agents.service import AgentService
from app.auth.middleware import PUBLIC_PATHS, ApiKeyAuthMiddleware
from app.auth.ratelimit import RateLimiter
from app.clock import Clock, SystemClock
from app.common.jsonbody import JsonRequest
from app.common.options import AllowedMethods
from app.common.parameters import ParameterRules
from app.common.validation import StrictRequestModels
from app.coordination.breaker_admin import BreakerAdmin
from app.coordination.breakers import BreakerRegistry
from app.coordination.controller import (
    AgentCardController,
    BreakerController,
    IntentController,
    SessionMessageController,
)
from app.coordination.dispatch import AgentClient
from app.coordination.rules import RulesService
from app.coordination.service import CoordinationService
from app.db.pool import Database
from app.db.presence import ReplicaPresence
from app.erasure.service import ErasureService
from app.errors import EXCEPTION_HANDLERS, UnsupportedMediaType
from app.health.controller import HealthController
from app.linger import LingeringClose
from app.maintenance.controller import (
    EventController,
    JobController,
    RestoreController,
    SubscriptionController,
)
from app.maintenance.events import EventService
from app.maintenance.service import MaintenanceService
from app.memories.controller import (
    AccessLevelController,
    AuditController,
    MemoryCategoryController,
    MemoryController,
    MemoryTypeController,
    SessionContextController,
    UserMemoriesController,
)
from app.memories.service import MemoryService
from app.metrics import Metrics, MetricsController
from app.openapi import openapi_config
from app.outbound.policy import OutboundPolicy, Resolver
from app.outbound.transport import outbound_client
from app.sessions.controller import SessionController, UserSessionsController
from app.sessions.service import SessionService
from app.settings import Settings
from app.tracing import TracedRequests, Tracing
from app.users.controller import UserController
from app.users.service import UserService
from app.webhooks.controller import N8nWebhookController
from app.webhooks.idempotency import IdempotencyService
from app.webhooks.service import WebhookService
from scheduler.runner import Scheduler

__version__ = "0.1.0"

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _is_json_media_type(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


async def before_handler(request: Request[Any, Any, Any]) -> Response[None] | None:
    """What every request passes before its handler's parameters and body are parsed:
    OPTIONS answered from the route map, strict path and query parameters, then a JSON
    media type for a body."""
    if request.method == "OPTIONS":
        allowed: AllowedMethods = request.app.state.allowed_methods
        return allowed.answer(request)
    rules: ParameterRules = request.app.state.parameter_rules
    rules.check(request)
    require_json_body(request)
    return None


def require_json_body(request: Request[Any, Any, Any]) -> None:
    """415 for a body that is not JSON; runs before the body is read or parsed."""
    if request.method not in _BODY_METHODS:
        return
    has_body = request.headers.get("content-length", "0") != "0" or (
        "transfer-encoding" in request.headers
    )
    if has_body and not _is_json_media_type(request.headers.get("content-type", "")):
        raise UnsupportedMediaType(
            "Send the body as JSON (Content-Type: application/json, or "
            "application/merge-patch+json for PATCH)."
        )


def replica_name() -> str:
    """A name for this process in claims and breaker records: host, pid and a random tag."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


def create_app(
    settings: Settings,
    *,
    database_url: str,
    admin_key: str,
    clock: Clock | None = None,
    run_scheduler: bool | None = None,
    resolver: Resolver | None = None,
    tracing: Tracing | None = None,
) -> Litestar:
    """Build the application. Resolving the URL and admin key is the caller's job.

    The maintenance scheduler runs in-process when ``run_scheduler`` (default: the
    ``SWITCHBOARD_SCHEDULER_ENABLED`` setting) is true. ``resolver`` turns host names into
    addresses for the outbound policy (default: the system resolver). ``tracing`` is
    built from ``settings.tracing`` unless given (tests pass one that collects spans)."""
    clock = clock or SystemClock()
    replica = replica_name()
    tracing = tracing or Tracing(settings.tracing)
    database = Database(database_url, settings.database)
    outbound = OutboundPolicy(settings.outbound, resolver)
    agent_service = AgentService(
        database,
        clock,
        admin_key,
        outbound=outbound,
        key_cache_seconds=settings.auth.key_cache_seconds,
    )
    user_service = UserService(database, clock)
    session_service = SessionService(database, clock, settings.sessions)
    memory_service = MemoryService(database, clock, settings.memories)
    erasure_service = ErasureService(database, clock, settings.database.erasure_timeout)
    breakers = BreakerRegistry(
        database,
        clock,
        sync_interval=settings.coordination.breaker_sync_seconds,
        replica_id=replica,
    )
    # One HTTP client for every agent call and event delivery: connection reuse, no per-call
    # set-up, the outbound policy on every connection. Deadlines are enforced per call
    # (timeout_ms) by the dispatcher, not by httpx.
    http = outbound_client(outbound, tracing=tracing)
    rules = RulesService(database, clock, settings.coordination.rules_cache_seconds)
    coordinator = CoordinationService(
        database,
        clock,
        settings.coordination,
        session_service,
        memory_service,
        rules,
        breakers,
        AgentClient(
            http,
            # An agent may answer as much as a client may send; its broken JSON is
            # repaired up to the repair bound.
            max_answer_bytes=settings.max_body_bytes,
            repair_max_bytes=settings.coordination.repair_max_bytes,
        ),
    )
    maintenance = MaintenanceService(
        database, clock, settings.scheduler, settings.sessions, replica_id=replica
    )
    events = EventService(database, clock, settings.scheduler, http, outbound)
    webhooks = WebhookService(
        database,
        clock,
        settings.webhooks.continuation_window,
        user_service,
        session_service,
        coordinator,
        memory_service,
        maintenance,
    )
    lease = settings.webhooks.idempotency_lease
    # One connection per replica, outside the pool: its lock says this process is alive.
    presence = ReplicaPresence(
        database_url,
        replica,
        check_interval=lease.total_seconds() / 3,
        connect_timeout=settings.database.acquire_timeout,
    )
    idempotency = IdempotencyService(
        database, clock, settings.webhooks.idempotency_ttl, lease, presence
    )
    metrics = Metrics(database, breakers)
    scheduler = (
        Scheduler(maintenance, events, tracing)
        if (settings.scheduler.enabled if run_scheduler is None else run_scheduler)
        else None
    )

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        await database.open()
        try:
            # Each part is stopped (in reverse order) once it has started, also when a
            # later one fails to start: no background task outlives a failed start-up.
            async with contextlib.AsyncExitStack() as started:
                tracing.start()
                # Exporting what is buffered blocks (up to the exporter's timeout): not on
                # the event loop.
                started.push_async_callback(asyncio.to_thread, tracing.shutdown)
                started.push_async_callback(http.aclose)
                await presence.start()
                started.push_async_callback(presence.stop)
                await idempotency.start()
                started.push_async_callback(idempotency.stop)
                await breakers.start()
                started.push_async_callback(breakers.stop)
                if scheduler is not None:
                    scheduler.start()
                    started.callback(scheduler.shutdown)
                if settings.server.gc_freeze:
                    gc.collect()  # what is garbage now should not be frozen with the rest
                    gc.freeze()
                yield
        finally:
            await database.close()

    def provide(value: object) -> Provide:
        return Provide(lambda: value, sync_to_thread=False, use_cache=True)

    app = Litestar(
        route_handlers=[
            HealthController,
            AgentController,
            SkillController,
            UserController,
            SessionController,
            UserSessionsController,
            MemoryController,
            SessionContextController,
            UserMemoriesController,
            MemoryCategoryController,
            MemoryTypeController,
            AccessLevelController,
            AuditController,
            IntentController,
            SessionMessageController,
            BreakerController,
            AgentCardController,
            JobController,
            RestoreController,
            SubscriptionController,
            EventController,
            N8nWebhookController,
            *([MetricsController] if settings.server.metrics_enabled else []),
        ],
        dependencies={
            "database": provide(database),
            "agent_service": provide(agent_service),
            "user_service": provide(user_service),
            "session_service": provide(session_service),
            "memory_service": provide(memory_service),
            "erasure_service": provide(erasure_service),
            "coordinator": provide(coordinator),
            "rules": provide(rules),
            "breaker_admin": provide(BreakerAdmin(agent_service, breakers)),
            "maintenance": provide(maintenance),
            "events": provide(events),
            "hooks": provide(webhooks),
            "metrics": provide(metrics),
            "breakers": provide(breakers),
            "idempotency": provide(idempotency),
        },
        middleware=[DefineMiddleware(ApiKeyAuthMiddleware, exclude=PUBLIC_PATHS)],
        before_request=before_handler,
        request_class=JsonRequest,
        plugins=[StrictRequestModels()],
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_body_bytes,
        lifespan=[lifespan],
        state=State(
            {
                "agent_service": agent_service,
                "settings": settings,
                "clock": clock,
                "rate_limiter": RateLimiter(
                    settings.server.rate_limit_per_second, settings.server.rate_limit_burst
                ),
            }
        ),
        openapi_config=openapi_config(__version__),
        debug=False,
        # Logging is set up once per process by its entry point (app/logs.py); Litestar's
        # own set-up would replace it (and format records on a queue thread, where the
        # request's trace id is not known).
        logging_config=None,
    )
    app.state.parameter_rules = ParameterRules(app)
    app.state.allowed_methods = AllowedMethods(app)
    # Outermost, around routing and Litestar's own exception handling: middleware given to
    # Litestar runs only for matched routes, and a 404 or 405 is an early answer too.
    # Every request is traced, counted and logged, the unmatched ones included.
    traced = TracedRequests(
        app.asgi_handler,
        tracing=tracing,
        observer=metrics if settings.server.metrics_enabled else None,
        access_log=settings.logging.access,
    )
    app.asgi_handler = LingeringClose(
        traced,
        max_bytes=settings.server.linger_max_bytes,
        seconds=settings.server.linger_seconds,
    )
    return app
