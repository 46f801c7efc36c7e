"""The operator console at /console: server-rendered pages over the services the API uses.

``console_parts`` builds what ``create_app`` registers: the pages, their static files, the
template engine, the read model and the sign-in check. The console's paths are left out of
the API-key middleware (``CONSOLE_PATHS``): it signs operators in with a cookie of its own
(app/console/session.py) and checks it before every page (app/console/gate.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from litestar import Router
from litestar.datastructures import CacheControlHeader
from litestar.exceptions import HTTPException
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.template.config import TemplateConfig

from app.auth.ratelimit import RateLimiter
from app.clock import Clock
from app.console.controller import ConsoleController
from app.console.gate import ConsoleAuth, add_security_headers, console_gate, error_page
from app.console.operations import OperationsController
from app.console.reads import ConsoleReads
from app.console.session import SessionSigner, derive_secret
from app.db.pool import Database
from app.errors import SwitchboardError
from app.services import Services
from app.settings import Settings

HERE = Path(__file__).resolve().parent
# Left out of the API-key middleware: the console checks its own session cookie.
CONSOLE_PATHS = ["^/console(/|$)"]
# How many client addresses' failed sign-ins are remembered (per replica) at most.
SIGN_IN_ADDRESSES = 10_000


@dataclass(frozen=True, slots=True)
class ConsoleParts:
    """What the app registers for the console."""

    route_handlers: list[Router]
    template_config: TemplateConfig[JinjaTemplateEngine]
    reads: ConsoleReads
    auth: ConsoleAuth


def console_parts(
    settings: Settings, services: Services, database: Database, clock: Clock, admin_key: str
) -> ConsoleParts:
    """The console's routes, templates, read model and sign-in check."""
    static = create_static_files_router(
        path="/console/static",
        directories=[HERE / "static"],
        name="console-static",
        include_in_schema=False,
        cache_control=CacheControlHeader(max_age=3600),
    )
    return ConsoleParts(
        route_handlers=[
            Router(
                path="/",
                route_handlers=[ConsoleController, OperationsController],
                before_request=console_gate,
                after_request=add_security_headers,
                exception_handlers={
                    SwitchboardError: error_page,
                    HTTPException: error_page,
                    Exception: error_page,
                },
                include_in_schema=False,
            ),
            static,
        ],
        template_config=TemplateConfig(directory=HERE / "templates", engine=JinjaTemplateEngine),
        reads=ConsoleReads(
            database,
            clock,
            agents=services.agents,
            breakers=services.breaker_admin,
            jobs=services.jobs,
            sessions=services.sessions,
            branches=services.branches,
            coordinator=services.coordinator,
            tasks=services.tasks,
            memories=services.memories,
        ),
        auth=ConsoleAuth(
            signer=SessionSigner(derive_secret(admin_key, settings.console.secret)),
            agents=services.agents,
            clock=clock,
            session_seconds=settings.console.session_seconds,
            sign_in_failures=RateLimiter(
                settings.console.login_failures_per_minute / 60,
                settings.console.login_failure_burst,
                what="sign-ins from this address",
                max_callers=SIGN_IN_ADDRESSES,
            ),
        ),
    )
