"""Switchboard's domain errors as A2A JSON-RPC errors, in one place: the services raise
what they raise for the REST API, and an A2A caller reads the protocol's error codes
(the SDK's dispatcher writes them)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from a2a.utils.errors import (
    A2AError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
)
from pydantic import ValidationError

from app.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    NotFound,
    SwitchboardError,
    ValidationFailed,
)


def _data(error: SwitchboardError) -> dict[str, Any] | None:
    extensions = {k: v for k, v in error.extensions.items() if v is not None}
    return {"status": error.status, **extensions} if extensions else {"status": error.status}


def a2a_error(error: SwitchboardError) -> A2AError:
    """The A2A error an A2A caller gets for a domain error (its HTTP status in ``data``).

    Bad or unknown input (400, 404, 422) is InvalidParams; a state that refuses the
    request (403, 409, 410) is InvalidRequest; the rest is InternalError."""
    if isinstance(error, BadRequest | ValidationFailed | NotFound):
        return InvalidParamsError(message=error.detail, data=_data(error))
    if isinstance(error, Conflict | Forbidden | Gone):
        return InvalidRequestError(message=error.detail, data=_data(error))
    return InternalError(message=error.detail, data=_data(error))


def a2a_error_of_problem(status: int, problem: dict[str, Any]) -> A2AError:
    """The A2A error for a stored problem (an answer replayed for a resent message), by
    the same rule as ``a2a_error``."""
    detail = str(problem.get("detail", ""))
    rfc = {"type", "title", "status", "detail", "instance"}
    data = {
        "status": status,
        **{k: v for k, v in problem.items() if k not in rfc and v is not None},
    }
    if status in (400, 404, 422):
        return InvalidParamsError(message=detail, data=data)
    if status in (403, 409, 410):
        return InvalidRequestError(message=detail, data=data)
    return InternalError(message=detail, data=data)


@contextmanager
def as_a2a_errors() -> Iterator[None]:
    """Raise domain and validation errors of the block as A2A errors."""
    try:
        yield
    except SwitchboardError as error:
        raise a2a_error(error) from error
    except ValidationError as error:
        problems = [
            {"field": ".".join(str(p) for p in e["loc"]), "message": e["msg"]}
            for e in error.errors(include_url=False, include_input=False)
        ]
        raise InvalidParamsError(
            message="The message is not valid.", data={"errors": problems}
        ) from error
