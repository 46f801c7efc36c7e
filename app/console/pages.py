"""What every console page shares: rendering a page with the operator and its ?done=
message, reading form and query input (400 on bad input), and the post/redirect/get answer.
Used by app/console/controller.py and app/console/operations.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from litestar import Request
from litestar.params import FromPath
from litestar.response import Redirect, Template

from app.console.gate import operator_of
from app.errors import BadRequest

AnyRequest = Request[Any, Any, Any]
# What a redirect's ?done= says happened (a fixed word, never a value from the request).
DONE_MESSAGES = {
    "rolled-back": "Rolled back: a new version with the old content was written.",
    "preserved": "The session is preserved (kept past its expiry).",
    "unpreserved": "The session is no longer preserved.",
    "restored": "The session was restored from the archive.",
    "resolved": "Resolved: the session is active again and its held tasks run.",
    "breaker-open": "The breaker is open: the agent is isolated on every replica.",
    "breaker-closed": "The breaker is closed: the agent takes calls again.",
    "requeued": "Requeued as a new task.",
    "discarded": "Discarded; the dead letter stays, marked with who and why.",
    "canceled": "Canceled; a running attempt was stopped.",
}


def render_page(request: AnyRequest, template: str, **context: Any) -> Template:
    """The page ``template`` with what every console page shows: the operator, the CSRF
    token for its forms, and what ?done= says happened."""
    operator = operator_of(request)
    done = request.query_params.get("done")
    return Template(
        template_name=template,
        context={
            "operator": operator,
            "csrf_token": operator.session.csrf,
            "done": DONE_MESSAGES.get(done or ""),
            **context,
        },
    )


def form_text(
    form: Any, name: FromPath[str], *, required: bool = True, max_chars: int = 1000
) -> str:
    """A form field's text, stripped; 400 when required and empty, too long or with a NUL."""
    value = form.get(name)
    text = value.strip() if isinstance(value, str) else ""
    if required and not text:
        raise BadRequest(f"The form needs {name}.", parameter=name)
    if len(text) > max_chars or "\x00" in text:
        raise BadRequest(f"{name} is too long or holds a NUL character.", parameter=name)
    return text


def form_int(form: Any, name: FromPath[str]) -> int:
    """A form field holding a whole number of at least 1, else 400."""
    text = form_text(form, name, max_chars=18)
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise BadRequest(f"{name} must be a whole number of at least 1.", parameter=name)
    return int(text)


def choice(value: str | None, allowed: tuple[str, ...], name: FromPath[str]) -> str | None:
    """``value`` when it is one of ``allowed`` (None when empty), else 400 naming them."""
    if not value:
        return None
    if value not in allowed:
        raise BadRequest(f"{name} must be one of {', '.join(allowed)}.", parameter=name)
    return value


def parse_when(value: str | None, name: FromPath[str]) -> datetime | None:
    """A time from a datetime-local field (UTC) or an ISO 8601 time with an offset."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{name} is not a time (2026-11-24T10:00).", parameter=name) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed


def redirect_done(path: str, what: str, **query: str) -> Redirect:
    """303 to ``path`` with ``?done=what`` (post/redirect/get)."""
    return Redirect(f"{path}?{urlencode({**query, 'done': what})}", status_code=303)
