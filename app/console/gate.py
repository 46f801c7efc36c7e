"""Who may see a console page and send a console form: the sign-in check, the CSRF check and
the role check, run before every console handler; and error pages in place of problem+json.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException
from litestar.response import Redirect, Template

from app.agents.service import AgentService
from app.auth.principal import INTEGRATION_ROLE, Principal
from app.auth.ratelimit import RateLimiter
from app.clock import Clock
from app.common.options import AllowedMethods
from app.common.parameters import ParameterRules
from app.console.session import COOKIE_NAME, ConsoleSession, SessionSigner, same_token
from app.errors import Forbidden, RateLimited, SwitchboardError, Unauthorized

logger = logging.getLogger("switchboard.console")

# Pages anyone may load: the sign-in form (and its answer).
OPEN_PATHS = frozenset({"/console/login"})
# Headers on every console answer: no caching of operator data, no framing, no referrer,
# scripts and styles from the console only.
SECURITY_HEADERS = {
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ),
}


class SessionExpired(Unauthorized):
    """The console session ended (expired); sign in again."""

    title, slug = "Console session expired", "console-session-expired"


@dataclass(frozen=True, slots=True)
class Operator:
    """The signed-in operator: the principal of the key, and the console session."""

    principal: Principal
    session: ConsoleSession

    @property
    def may_change(self) -> bool:
        """Only the admin key acts; a coordination_manager key reads (and runs dry)."""
        return self.principal.is_admin


@dataclass(frozen=True, slots=True)
class ConsoleAuth:
    """What the gate needs: the signer, the key check, the clock and the cookie's life;
    and the sign-in form's limit on failed attempts per client address."""

    signer: SessionSigner
    agents: AgentService
    clock: Clock
    session_seconds: int
    sign_in_failures: RateLimiter

    async def operator_for(self, session: ConsoleSession) -> Principal | None:
        """The principal of the session's key if it may still use the console."""
        principal = await self.agents.authenticate(session.key_digest)
        if principal is None:
            return None
        return principal if may_use_console(principal) else None


def client_address(request: Request[Any, Any, Any]) -> str:
    """The address the request came from: the peer's, or behind a proxy named in
    SWITCHBOARD_TRUSTED_PROXIES the client it forwards for (uvicorn's proxy headers)."""
    return request.client.host if request.client is not None else "unknown"


def may_use_console(principal: Principal) -> bool:
    """The admin key, or an agent key with the coordination_manager role."""
    return principal.is_admin or INTEGRATION_ROLE in principal.roles


def secure_request(request: Request[Any, Any, Any]) -> bool:
    """True when the page was asked for over HTTPS: the cookie is then Secure."""
    return request.url.scheme == "https"


def operator_of(request: Request[Any, Any, Any]) -> Operator:
    """The operator the gate let in."""
    operator: Operator = request.state.console_operator
    return operator


def require_admin(request: Request[Any, Any, Any]) -> Operator:
    """403 unless the operator signed in with the admin key."""
    operator = operator_of(request)
    if not operator.may_change:
        raise Forbidden(
            "This console action needs the admin key; a coordination_manager key may look "
            "and run jobs dry."
        )
    return operator


async def console_gate(request: Request[Any, Any, Any]) -> Response[Any] | None:
    """Before every console handler: OPTIONS answered, strict parameters, then a valid
    session (a GET without one goes to the sign-in page), then the CSRF token of a POST."""
    if request.method == "OPTIONS":  # answered from the route map, as on every API route
        allowed: AllowedMethods = request.app.state.allowed_methods
        return allowed.answer(request)
    rules: ParameterRules = request.app.state.parameter_rules
    rules.check(request)
    if request.url.path in OPEN_PATHS:
        return None
    auth: ConsoleAuth = request.app.state.console_auth
    session, expired = auth.signer.read(request.cookies.get(COOKIE_NAME), auth.clock.now())
    principal = await auth.operator_for(session) if session is not None else None
    if session is None or principal is None:
        if request.method == "GET":
            return Redirect(
                "/console/login?expired=1" if expired else "/console/login", status_code=303
            )
        if expired:
            raise SessionExpired("Your console session has expired; sign in again.")
        raise Unauthorized("Sign in to the console first.")
    if request.method == "POST":
        form = await request.form()
        if not same_token(form.get("csrf_token"), session.csrf):
            logger.warning(
                "console: refused a %s %s without a valid CSRF token",
                request.method,
                request.url.path,
            )
            raise Forbidden("The form's CSRF token is missing or wrong; reload the page.")
    request.state.console_operator = Operator(principal, session)
    return None


def add_security_headers(response: Response[Any]) -> Response[Any]:
    """After every console handler: the headers of ``SECURITY_HEADERS``."""
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def error_page(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """A domain or HTTP error as an HTML page with its status (not problem+json)."""
    if isinstance(exc, SwitchboardError):
        status, title, detail = exc.status, exc.title, exc.detail
    elif isinstance(exc, HTTPException):
        status, title, detail = exc.status_code, "Request refused", str(exc.detail)
    else:
        logger.exception(
            "console: unhandled error on %s %s", request.method, request.url.path, exc_info=exc
        )
        status, title = 500, "Internal error"
        detail = "The console failed to handle this request; it has been logged."
    operator = getattr(request.state, "console_operator", None)
    headers = dict(SECURITY_HEADERS)
    if isinstance(exc, RateLimited):
        headers["Retry-After"] = str(exc.retry_after)
    return Template(
        template_name="error.html",
        context={
            "title": title,
            "detail": detail,
            "status": status,
            "operator": operator,
            # Not signed in (a 401, or the sign-in form's own refusals): offer the form.
            "signed_out": status == 401 or operator is None,
        },
        status_code=status,
        headers=headers,
    )
