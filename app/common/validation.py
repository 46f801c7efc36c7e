"""Validate data against a pydantic model, turning failures into a 422 with field paths."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, AnyHttpUrl, BaseModel, UrlConstraints, ValidationError

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


def field_errors(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """Pydantic errors as ``[{field, message}]`` with dotted paths."""
    errors = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in error["loc"])
        field = f"{prefix}.{path}" if prefix and path else (prefix or path or "$")
        errors.append({"field": field, "message": error["msg"]})
    return errors


def validate_each(model: type[M], items: list[Any]) -> list[M]:
    """Validate every item of a batch; one 422 lists all bad fields as ``<index>.<path>``."""
    valid: list[M] = []
    errors: list[dict[str, str]] = []
    for index, item in enumerate(items):
        try:
            valid.append(model.model_validate(item))
        except ValidationError as exc:
            errors += field_errors(exc, prefix=str(index))
    if errors:
        raise ValidationFailed("Some items of the batch are not valid.", errors=errors)
    return valid


def validate_as(model: type[M], data: Any, *, what: str) -> M:
    """``model.model_validate(data)`` or a 422 naming every bad field of ``what``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(f"The {what} is not valid.", errors=field_errors(exc)) from None
