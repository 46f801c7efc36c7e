"""The domain error tree and its one mapping to RFC 9457 problem details.

Services raise these; controllers never build error responses themselves. Framework
exceptions (validation, routing, body size) are translated here too, so every error a
client sees has the same ``application/problem+json`` shape.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.types import ExceptionHandlersMap

from app.tracing import current_trace_id

logger = logging.getLogger("switchboard.errors")

PROBLEM_JSON = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:switchboard:problem:"


class SwitchboardError(Exception):
    """Base of every error a service may raise; carries its HTTP status and problem type."""

    status: ClassVar[int] = 500
    title: ClassVar[str] = "Internal error"
    slug: ClassVar[str] = "internal-error"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extensions = extensions


class BadRequest(SwitchboardError):
    """The request is malformed (syntax, header, parameter)."""

    status, title, slug = 400, "Bad request", "bad-request"


class MalformedJson(BadRequest):
    """The body is not JSON: a syntax error, or bytes that are not UTF-8."""

    title, slug = "Malformed JSON", "malformed-json"


class TooDeeplyNested(BadRequest):
    """The body nests deeper than the decoder follows (far past the 64 levels allowed)."""

    title, slug = "Malformed JSON", "too-deeply-nested"


class InvalidParameter(BadRequest):
    """A path or query parameter is not what the route declares; ``errors`` names each."""

    slug = "invalid-parameter"
    detail_text: ClassVar[str] = "A path, query or header parameter is invalid."


class Unauthorized(SwitchboardError):
    """No valid API key was presented."""

    status, title, slug = 401, "Unauthorized", "unauthorized"


class Forbidden(SwitchboardError):
    """The key is valid but may not do this."""

    status, title, slug = 403, "Forbidden", "forbidden"


class NotFound(SwitchboardError):
    """The resource does not exist (or the caller may not know that it does)."""

    status, title, slug = 404, "Not found", "not-found"


class Conflict(SwitchboardError):
    """The request conflicts with the current state of the resource."""

    status, title, slug = 409, "Conflict", "conflict"


class RequestInProgress(Conflict):
    """A request with the same Idempotency-Key is running now; retry after ``retry_after``."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, retryable=True)
        self.retry_after = retry_after


class VersionConflict(Conflict):
    """An optimistic write was based on a version that is no longer current."""

    title, slug = "Version conflict", "version-conflict"


class MergeConflicted(VersionConflict):
    """A three-way merge (an auto-merged write, a branch merge or rebase) found paths both
    sides changed differently; ``conflicts`` lists each with base, current and proposed."""

    title, slug = "Merge conflict", "merge-conflict"


class Gone(SwitchboardError):
    """The resource existed but is gone for good."""

    status, title, slug = 410, "Gone", "gone"


class PayloadTooLarge(SwitchboardError):
    """The body (or a part of it) is over the configured limit."""

    status, title, slug = 413, "Payload too large", "payload-too-large"


class UnsupportedMediaType(SwitchboardError):
    """The body is not in a media type the endpoint accepts."""

    status, title, slug = 415, "Unsupported media type", "unsupported-media-type"


class ValidationFailed(SwitchboardError):
    """The body parsed but its content breaks the rules; ``errors`` names each field."""

    status, title, slug = 422, "Validation failed", "validation-failed"


class PreconditionRequired(SwitchboardError):
    """A write that needs ``If-Match`` (or ``base_version``) arrived without it."""

    status, title, slug = 428, "Precondition required", "precondition-required"


class RateLimited(SwitchboardError):
    """The key sent more requests than its rate allows; ``retry_after`` says when to retry."""

    status, title, slug = 429, "Too many requests", "rate-limited"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail, retry_after=retry_after)
        self.retry_after = retry_after


class BadGateway(SwitchboardError):
    """A remote party Switchboard had to ask (an agent's card URL) gave no usable answer."""

    status, title, slug = 502, "Bad gateway", "bad-gateway"


class TooManyStreams(RateLimited):
    """The key already holds as many open event streams as it may (per replica)."""

    title, slug = "Too many streams", "too-many-streams"


class ServiceUnavailable(SwitchboardError):
    """A dependency (usually PostgreSQL) cannot be reached right now; retry later."""

    status, title, slug = 503, "Service unavailable", "service-unavailable"


class CleanupFailed(SwitchboardError):
    """A cleanup run on request had a job that did not succeed; the extensions carry every
    job's result. A 5xx, so a caller's retry runs it again and no replay ever reports it."""

    status, title, slug = 500, "Cleanup failed", "cleanup-failed"


_STATUS_HEADERS = {
    401: {"WWW-Authenticate": 'Bearer realm="switchboard"'},
    503: {"Retry-After": "1"},
}


def problem_body(
    status: int,
    title: str,
    slug: str,
    detail: str,
    instance: str,
    extensions: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The RFC 9457 members of a problem, then its extensions."""
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_PREFIX + slug,
        "title": title,
        "status": status,
        "detail": detail,
        "instance": instance,
    }
    for key, value in (extensions or {}).items():
        body.setdefault(key, value)
    return body


def problem_response(
    status: int,
    title: str,
    slug: str,
    detail: str,
    instance: str,
    extensions: dict[str, Any] | None = None,
) -> Response[dict[str, Any]]:
    """Build one problem+json response; extensions never override the standard members.
    ``trace_id`` names the request's trace (its log lines carry it), for a user to quote."""
    body = problem_body(status, title, slug, detail, instance, extensions)
    trace_id = current_trace_id()
    if trace_id is not None:
        body.setdefault("trace_id", trace_id)
    headers = _STATUS_HEADERS.get(status)
    return Response(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def handle_domain_error(request: Request[Any, Any, Any], exc: SwitchboardError) -> Response[Any]:
    """Map a domain error to its problem response."""
    response = problem_response(
        exc.status, exc.title, exc.slug, exc.detail, request.url.path, exc.extensions
    )
    if isinstance(exc, RateLimited | RequestInProgress):
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


def handle_validation_error(
    request: Request[Any, Any, Any], exc: ValidationException
) -> Response[Any]:
    """Turn Litestar's parameter/body validation errors into a 400 or 422 with field paths."""
    errors = []
    in_body = False
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if not isinstance(item, dict):
            continue
        source = item.get("source", "body")
        in_body = in_body or source == "body"
        field = str(item.get("key") or "")
        if source == "body" and field in ("", "data"):
            field = "$"
        errors.append({"field": field, "source": source, "message": str(item.get("message"))})
    if in_body or not errors:
        return problem_response(
            422,
            ValidationFailed.title,
            ValidationFailed.slug,
            "The request body does not match the expected schema.",
            request.url.path,
            {"errors": errors},
        )
    return problem_response(
        InvalidParameter.status,
        InvalidParameter.title,
        InvalidParameter.slug,
        InvalidParameter.detail_text,
        request.url.path,
        {"errors": errors},
    )


# What Litestar's InternalServerException says when the client disconnects mid-body.
_CLIENT_GONE = "client disconnected prematurely"

_HTTP_SLUGS = {
    400: ("Bad request", "bad-request"),
    401: ("Unauthorized", "unauthorized"),
    403: ("Forbidden", "forbidden"),
    404: ("Not found", "not-found"),
    405: ("Method not allowed", "method-not-allowed"),
    413: ("Payload too large", "payload-too-large"),
    415: ("Unsupported media type", "unsupported-media-type"),
    429: ("Too many requests", "rate-limited"),
}


def handle_http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    """Give framework HTTP errors (routing, body limit, malformed JSON) the problem shape."""
    status = exc.status_code
    if status >= 500 and exc.detail == _CLIENT_GONE:
        # The client closed the connection while sending its body (a load generator
        # stopping, a timed-out caller): nothing went wrong here and nobody reads the answer.
        logger.info("client disconnected mid-body on %s %s", request.method, request.url.path)
        return problem_response(
            400,
            "Bad request",
            "client-disconnected",
            "The request body was cut off.",
            request.url.path,
        )
    if status >= 500:
        return handle_unexpected_error(request, exc)
    title, slug = _HTTP_SLUGS.get(status, ("Client error", "client-error"))
    detail = exc.detail or title
    if status == 400 and "JSON" in detail:
        slug, title = "malformed-json", "Malformed JSON"
    if status == 413:
        detail = "The request body is larger than this server accepts."
    response = problem_response(status, title, slug, detail, request.url.path)
    if exc.headers:
        response.headers.update(exc.headers)
    return response


def handle_recursion_error(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    """The JSON decoder gives up on very deep nesting by recursing too far: bad input."""
    logger.warning("rejected too deeply nested body on %s %s", request.method, request.url.path)
    return problem_response(
        400,
        "Malformed JSON",
        "too-deeply-nested",
        "The JSON body is nested too deeply.",
        request.url.path,
    )


def handle_unexpected_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Log the bug and answer 500 without leaking internals."""
    logger.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(
        HTTP_500_INTERNAL_SERVER_ERROR,
        "Internal error",
        "internal-error",
        "The server failed to handle this request; it has been logged.",
        request.url.path,
    )


EXCEPTION_HANDLERS: ExceptionHandlersMap = {
    SwitchboardError: handle_domain_error,
    ValidationException: handle_validation_error,
    HTTPException: handle_http_error,
    RecursionError: handle_recursion_error,
    Exception: handle_unexpected_error,
}
