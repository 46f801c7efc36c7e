"""Validate data against a pydantic model, turning failures into a 422 with field paths.

What a client sends is validated as JSON, strictly (``validate_input`` and, for the
handlers' ``data``, ``StrictRequestModels``): no bool for an int or an int for a bool, no
number for a string or a string for a number, exactly as the OpenAPI schema documents.
UUIDs and date-times arrive as strings, which JSON's strict mode takes (Python's would
not), and a date-time must be written as one (``DateTime``), not as a number of seconds.
Content the service already holds (stored sessions) is read with ``validate_as``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

import orjson
from litestar.plugins.pydantic import PydanticInitPlugin
from pydantic import (
    AfterValidator,
    AnyHttpUrl,
    BaseModel,
    BeforeValidator,
    TypeAdapter,
    UrlConstraints,
    ValidationError,
)

from app.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)

# Deeper JSON than this is refused: nobody's real state needs it, and serializers (pydantic,
# orjson) give up somewhere past 250 levels with errors that are not the client's fault.
MAX_JSON_DEPTH = 64


# The url columns (agents.url, subscriptions.url) CHECK at most 2000 characters; pydantic's
# own URL limit is 2083, which would reach the database and fail there as a 500.
MAX_URL_LENGTH = 2000


def _fits_url_column(url: AnyHttpUrl) -> AnyHttpUrl:
    # What is stored is the normalised URL, which can be longer than what was sent
    # (a non-ASCII character becomes up to 12 characters of percent-encoding).
    if len(str(url)) > MAX_URL_LENGTH:
        raise ValueError(f"URL should have at most {MAX_URL_LENGTH} characters once encoded")
    return url


# An http(s) URL that fits the url columns, as sent and as stored.
StoredHttpUrl = Annotated[
    AnyHttpUrl, UrlConstraints(max_length=MAX_URL_LENGTH), AfterValidator(_fits_url_column)
]


def json_depth(value: Any) -> int:
    """Nesting depth of a JSON-like value (scalars are 0), computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        depth += 1
        deepest = max(deepest, depth)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def reject_deep_json(value: Any, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A pydantic validator body: refuse values nested beyond ``max_depth``."""
    if json_depth(value) > max_depth:
        raise ValueError(f"nested more than {max_depth} levels deep")
    return value


# The start of an RFC 3339 date-time; pydantic checks the rest. pydantic would read "0.5",
# even in strict mode, as half a second after 1970.
_DATE_TIME_START = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}")
DATE_TIME_EXAMPLE = "2026-01-01T00:00:00Z"


def is_date_time_text(text: str) -> bool:
    """True if ``text`` starts like an RFC 3339 date-time (a bare number does not)."""
    return _DATE_TIME_START.match(text) is not None


_PARSED_DATE_TIME = TypeAdapter(datetime)


def parse_date_time(text: str) -> datetime | str:
    """``text`` as a date-time, or why it is not one a client may send: RFC 3339 text
    whose instant lies within 0001-01-01 and 9999-12-31 in UTC (a later or earlier one
    cannot be compared with stored times: Python's range ends there)."""
    if not is_date_time_text(text):
        return f"expected an RFC 3339 date-time such as {DATE_TIME_EXAMPLE}"
    try:
        parsed = _PARSED_DATE_TIME.validate_python(text)
        if parsed.tzinfo is not None:
            parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        return (
            "expected an RFC 3339 date-time between 0001-01-01 and 9999-12-31 in UTC, such "
            f"as {DATE_TIME_EXAMPLE}"
        )
    return parsed


def _written_as_a_date_time(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    # Parsed here: after a before-validator pydantic checks the result as a Python value,
    # and strict mode takes only a datetime object there.
    parsed = parse_date_time(value)
    if isinstance(parsed, str):
        raise ValueError(parsed)
    return parsed


# A date-time a client writes: RFC 3339 text, never a number of seconds.
DateTime = Annotated[datetime, BeforeValidator(_written_as_a_date_time)]


def field_errors(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """Pydantic errors as ``[{field, message}]`` with dotted paths."""
    errors = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in error["loc"])
        field = f"{prefix}.{path}" if prefix and path else (prefix or path or "$")
        errors.append({"field": field, "message": error["msg"]})
    return errors


def strictly(model: type[M], data: Any, *, context: dict[str, Any] | None = None) -> M:
    """``data`` (decoded JSON) validated as the JSON it came from, in strict mode
    (``context``: pydantic's validation context, for the models' validators)."""
    try:
        raw = orjson.dumps(data)
    except orjson.JSONEncodeError:
        # orjson stops at 254 levels, far past every model's limit (MAX_JSON_DEPTH):
        # validating as Python names the field whose limit the nesting breaks.
        model.model_validate(data, context=context)
        raise ValidationFailed(
            "The body is nested too deeply.",
            errors=[{"field": "$", "message": f"nested more than {MAX_JSON_DEPTH} levels deep"}],
        ) from None
    return model.model_validate_json(raw, strict=True, context=context)


def validate_each(model: type[M], items: list[Any]) -> list[M]:
    """Validate every item a client sent in a batch, strictly; one 422 lists all bad
    fields as ``<index>.<path>``."""
    valid: list[M] = []
    errors: list[dict[str, str]] = []
    for index, item in enumerate(items):
        try:
            valid.append(strictly(model, item))
        except ValidationError as exc:
            errors += field_errors(exc, prefix=str(index))
    if errors:
        raise ValidationFailed("Some items of the batch are not valid.", errors=errors)
    return valid


def validate_input(model: type[M], data: Any, *, what: str) -> M:
    """What a client sent (decoded JSON) validated strictly, or a 422 naming every bad
    field of ``what``."""
    try:
        return strictly(model, data)
    except ValidationError as exc:
        raise ValidationFailed(f"The {what} is not valid.", errors=field_errors(exc)) from None


def validate_as(model: type[M], data: Any, *, what: str) -> M:
    """Content the service holds, ``model.model_validate(data)``, or a 422 naming every bad
    field of ``what``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(f"The {what} is not valid.", errors=field_errors(exc)) from None


def _decode_request_model(model: type[BaseModel], value: Any) -> BaseModel:
    try:
        return strictly(model, value)
    except ValidationError as exc:
        # Not a ValueError, so msgspec (which calls this) lets it through to the handlers.
        raise ValidationFailed(
            "The request body does not match the expected schema.", errors=field_errors(exc)
        ) from None


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


class StrictRequestModels(PydanticInitPlugin):
    """Litestar's pydantic plugin, validating a handler's ``data`` model strictly as JSON
    (Litestar's own calls ``model_validate(value, strict=False)``, which overrides every
    model's and field's strictness)."""

    @classmethod
    def decoders(
        cls, validate_strict: bool = False
    ) -> list[tuple[Callable[[Any], bool], Callable[[Any, Any], Any]]]:
        """Ours first: Litestar uses the first decoder whose predicate matches."""
        return [(_is_model, _decode_request_model), *super().decoders(validate_strict)]
