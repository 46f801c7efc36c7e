"""Validate data against a pydantic model, turning failures into a 422 with field paths."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.errors import ValidationFailed

M = TypeVar("M", bound=BaseModel)


def field_errors(exc: ValidationError, prefix: str = "") -> list[dict[str, str]]:
    """Pydantic errors as ``[{field, message}]`` with dotted paths."""
    errors = []
    for error in exc.errors(include_url=False, include_input=False):
        path = ".".join(str(part) for part in error["loc"])
        field = f"{prefix}.{path}" if prefix and path else (prefix or path or "$")
        errors.append({"field": field, "message": error["msg"]})
    return errors


def validate_as(model: type[M], data: Any, *, what: str) -> M:
    """``model.model_validate(data)`` or a 422 naming every bad field of ``what``."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed(f"The resulting {what} is not valid.", errors=field_errors(exc))
