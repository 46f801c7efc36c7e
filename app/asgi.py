"""``create_app``: the one place routes, dependencies, middleware and error handlers meet."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from litestar import Litestar, Request, Response
from litestar.datastructures import State
from litestar.di import Provide
from litestar.middleware.base import DefineMiddleware

from app.a2a.controller import AgentCardController
from app.a2a.handler import SwitchboardRequestHandler
from app.a2a.route import BODY_LIMIT_STATE, DISPATCHER_STATE, a2a_dispatcher, a2a_endpoint
from app.a2a.store import AgentTaskStore
from app.agents.controller import AgentController, SkillController
from app.auth.middleware import PUBLIC_PATHS, ApiKeyAuthMiddleware
from app.auth.ratelimit import Buckets, RateLimiter
from app.branches.controller import BranchController
from app.clock import Clock, SystemClock
from app.common.jsonbody import JsonRequest
from app.common.options import AllowedMethods
from app.common.parameters import ParameterRules
from app.common.responses import LeanResponse
from app.common.validation import StrictRequestModels
from app.console import CONSOLE_PATHS, console_parts
from app.coordination.controller import (
    BreakerController,
    IntentController,
    SessionMessageController,
)
from app.db.pool import Database
from app.errors import EXCEPTION_HANDLERS, UnsupportedMediaType
from app.events.controller import (
    EventController,
    SessionEventController,
    SubscriptionController,
)
from app.health.controller import HealthController
from app.jobs.controller import JobController
from app.jobs.scheduler import Scheduler
from app.linger import LingeringClose
from app.memories.branch_controller import BranchMemoryController
from app.memories.controller import (
    AccessLevelController,
    AuditController,
    MemoryCategoryController,
    MemoryController,
    MemoryTypeController,
    SessionContextController,
    UserMemoriesController,
)
from app.metrics import Metrics, MetricsController
from app.openapi import openapi_config
from app.outbound.policy import Resolver
from app.services import build_services
from app.sessions.controller import SessionController, UserSessionsController
from app.settings import Settings
from app.tasks.controller import DeadLetterController, SessionTasksController, TaskController
from app.tasks.worker import TaskWorker
from app.tracing import TracedRequests, Tracing
from app.users.controller import UserController
from app.webhooks.controller import N8nWebhookController

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


def create_app(
    settings: Settings,
    *,
    database_url: str,
    admin_key: str,
    clock: Clock | None = None,
    run_scheduler: bool | None = None,
    run_worker: bool | None = None,
    resolver: Resolver | None = None,
    tracing: Tracing | None = None,
    rate_buckets: Buckets | None = None,
) -> Litestar:
    """Build the application. Resolving the URL and admin key is the caller's job.

    The maintenance scheduler runs in-process when ``run_scheduler`` (default: the
    ``SWITCHBOARD_SCHEDULER_ENABLED`` setting) is true; the task worker when ``run_worker``
    (default: ``SWITCHBOARD_TASKS_ENABLED``) is. ``resolver`` turns host names into
    addresses for the outbound policy (default: the system resolver). ``tracing`` is
    built from ``settings.tracing`` unless given (tests pass one that collects spans).
    ``rate_buckets`` keeps the keys' rate-limit buckets (default: this process's own;
    ``serve --workers`` passes the host's)."""
    clock = clock or SystemClock()
    database = Database(database_url, settings.database)
    services = build_services(
        settings, database, clock, admin_key=admin_key, resolver=resolver, tracing=tracing
    )
    metrics = Metrics(database, services.breakers, services.jobs.jobs)
    console = (
        console_parts(settings, services, database, clock, admin_key)
        if settings.console.enabled
        else None
    )
    scheduler = (
        Scheduler(services.jobs, services.events, services.event_hub, services.tracing)
        if (settings.scheduler.enabled if run_scheduler is None else run_scheduler)
        else None
    )
    worker = (
        TaskWorker(database, services.tasks)
        if (settings.tasks.enabled if run_worker is None else run_worker)
        else None
    )

    @asynccontextmanager
    async def lifespan(_: Litestar) -> AsyncIterator[None]:
        await database.open()
        try:
            # Each part is stopped (in reverse order) once it has started, also when a
            # later one fails to start: no background task outlives a failed start-up.
            async with contextlib.AsyncExitStack() as started:
                services.tracing.start()
                started.push_async_callback(services.aclose)
                await services.presence.start()
                started.push_async_callback(services.presence.stop)
                await services.idempotency.start()
                started.push_async_callback(services.idempotency.stop)
                await services.breakers.start()
                started.push_async_callback(services.breakers.stop)
                await services.agent_directory.start()
                started.push_async_callback(services.agent_directory.stop)
                await services.tasks.start()
                started.push_async_callback(services.tasks.stop)
                # Started by the first stream; stopped (if it was) before the pool closes.
                started.push_async_callback(services.event_hub.stop)
                if worker is not None:
                    await worker.start()
                    started.push_async_callback(worker.stop)
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
            BranchController,
            BranchMemoryController,
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
            a2a_endpoint,
            JobController,
            SubscriptionController,
            EventController,
            SessionEventController,
            N8nWebhookController,
            TaskController,
            SessionTasksController,
            DeadLetterController,
            *([MetricsController] if settings.server.metrics_enabled else []),
            *(console.route_handlers if console is not None else []),
        ],
        dependencies={
            "database": provide(database),
            "agent_service": provide(services.agents),
            "user_service": provide(services.users),
            "session_service": provide(services.sessions),
            "branch_service": provide(services.branches),
            "session_lifecycle": provide(services.session_lifecycle),
            "memory_service": provide(services.memories),
            "branch_memory_service": provide(services.branch_memories),
            "erasure_service": provide(services.erasure),
            "coordinator": provide(services.coordinator),
            "rules": provide(services.rules),
            "escalation": provide(services.escalation),
            "breaker_admin": provide(services.breaker_admin),
            "job_service": provide(services.jobs),
            "events": provide(services.events),
            "streams": provide(services.event_streams),
            "hooks": provide(services.webhooks),
            "metrics": provide(metrics),
            "breakers": provide(services.breakers),
            "tasks": provide(services.tasks),
            **({"console_reads": provide(console.reads)} if console is not None else {}),
        },
        middleware=[
            DefineMiddleware(ApiKeyAuthMiddleware, exclude=[*PUBLIC_PATHS, *CONSOLE_PATHS])
        ],
        before_request=before_handler,
        request_class=JsonRequest,
        response_class=LeanResponse,
        plugins=[StrictRequestModels()],
        exception_handlers=EXCEPTION_HANDLERS,
        request_max_body_size=settings.max_body_bytes,
        lifespan=[lifespan],
        state=State(
            {
                "agent_service": services.agents,
                # The process's event hub: its open streams, per key (metrics, tests).
                "event_hub": services.event_hub,
                "settings": settings,
                "clock": clock,
                "console_auth": console.auth if console is not None else None,
                DISPATCHER_STATE: a2a_dispatcher(
                    SwitchboardRequestHandler(
                        services.coordinator,
                        services.tasks,
                        services.webhooks,
                        AgentTaskStore(services.tasks),
                        services.push_configs,
                        services.a2a_messages,
                    )
                ),
                BODY_LIMIT_STATE: settings.max_body_bytes,
                "rate_limiter": RateLimiter(
                    settings.server.rate_limit_per_second,
                    settings.server.rate_limit_burst,
                    buckets=rate_buckets,
                ),
            }
        ),
        openapi_config=openapi_config(__version__),
        template_config=console.template_config if console is not None else None,
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
        tracing=services.tracing,
        observer=metrics if settings.server.metrics_enabled else None,
        access_log=settings.logging.access,
    )
    app.asgi_handler = LingeringClose(
        traced,
        max_bytes=settings.server.linger_max_bytes,
        seconds=settings.server.linger_seconds,
    )
    return app
