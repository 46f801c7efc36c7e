"""Strict path and query parameters, for every route, before Litestar parses them.

Litestar converts parameters with msgspec in lax mode, which reads ``since=0.5`` as half a
second after 1970, ``limit=1e1`` as 10 and ``dry_run=1`` as true. Here, from the types the
handlers declare (read once from the app's route map, so a new route is covered by being
registered): an integer is decimal digits, within the signed 64-bit range of the bigint
columns; a boolean is ``true`` or ``false``; a date-time is written as one
(``2026-01-01T00:00:00Z``), not as a number; no value holds a NUL character, which
PostgreSQL cannot store; a required query parameter is there. Anything else is a 400 naming
the parameter; what passes is then parsed by Litestar as before, declared bounds
(``ge``/``le``) included.
"""

from __future__ import annotations

import re
import types
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin

from litestar import Litestar, Request
from litestar.routes import HTTPRoute

from app.common.jsonbody import INT64_MAX, INT64_MIN, fits_int64
from app.common.validation import parse_date_time
from app.errors import InvalidParameter

if TYPE_CHECKING:
    # Litestar's own record of where each parameter comes from (query or path), read from
    # its kwargs model: a 2.x internal, which tests/integration/test_strict_input.py pins.
    from litestar._kwargs.parameter_definition import ParameterDefinition

Kind = Literal["integer", "boolean", "date-time", "text"]
Source = Literal["query", "path"]

# [0-9], not \d: \d also matches other scripts' digits.
_INTEGER = re.compile(r"-?[0-9]+")


@dataclass(frozen=True, slots=True)
class _Parameter:
    name: str  # as sent (the alias)
    source: Source
    kind: Kind
    required: bool = False


def _kind(annotation: Any) -> Kind:
    """What a declared type asks of the text: optional and constrained types unwrapped."""
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [arg for arg in get_args(annotation) if arg is not type(None)]
        annotation = inner[0] if len(inner) == 1 else annotation
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    if annotation is datetime:
        return "date-time"
    return "text"


class ParameterRules:
    """The typed parameters of every handler of an app, and the check each request gets."""

    def __init__(self, app: Litestar) -> None:
        self._by_handler: dict[int, tuple[_Parameter, ...]] = {}
        for route in app.routes:
            if not isinstance(route, HTTPRoute):
                continue
            for handler, kwargs_model in route.route_handler_map.values():
                fields = handler.parsed_fn_signature.parameters
                sources: tuple[tuple[Source, set[ParameterDefinition]], ...] = (
                    ("query", kwargs_model.expected_query_params),
                    ("path", kwargs_model.expected_path_params),
                )
                self._by_handler[id(handler)] = tuple(
                    _Parameter(
                        definition.field_alias,
                        source,
                        _kind(fields[name].annotation),
                        definition.is_required,
                    )
                    for source, definitions in sources
                    for definition in definitions
                    if (name := definition.field_name) in fields
                )

    def check(self, request: Request[Any, Any, Any]) -> None:
        """Raise ``InvalidParameter`` (400) naming every parameter that breaks the rules."""
        errors: list[dict[str, str]] = []
        for parameter in self._by_handler.get(id(request.route_handler), ()):
            if parameter.source == "query":
                values: list[Any] = request.query_params.getall(parameter.name, [])
                if not values and parameter.required:
                    # Litestar's own refusal names no field (and would read as a body error).
                    errors.append(
                        {"field": parameter.name, "source": "query", "message": "required"}
                    )
            else:
                values = [request.path_params.get(parameter.name)]
            for value in values:
                message = _problem(parameter.kind, value)
                if message is not None:
                    errors.append(
                        {"field": parameter.name, "source": parameter.source, "message": message}
                    )
        if errors:
            raise InvalidParameter(InvalidParameter.detail_text, errors=errors)


def _problem(kind: Kind, value: Any) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):  # a path parameter, parsed
        value = str(value)
    if not isinstance(value, str):
        return None
    if "\x00" in value:
        return "holds the NUL character, which PostgreSQL cannot store"
    if kind == "integer":
        if not _INTEGER.fullmatch(value):
            return "expected an integer written in decimal digits"
        if not fits_int64(value):
            return f"expected an integer between {INT64_MIN} and {INT64_MAX} (signed 64-bit)"
    elif kind == "boolean" and value not in ("true", "false"):
        return "expected true or false"
    elif kind == "date-time" and isinstance(problem := parse_date_time(value), str):
        return problem
    return None
