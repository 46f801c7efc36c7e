"""``OPTIONS`` answers list every method their path serves.

Litestar 2 makes a path's OPTIONS handler when the first handler of the path is registered
and keeps that one when a controller adds more handlers to the same path, so its ``Allow``
listed only the first handler's methods (``OPTIONS /v1/agents`` said ``OPTIONS, POST``
while GET is served too; litestar#4169, fixed in Litestar 3). The methods are read here
from the finished route map, once, and every generated OPTIONS handler answers from it.
"""

from __future__ import annotations

from typing import Any

from litestar import Litestar, Request, Response
from litestar.enums import MediaType
from litestar.routes import HTTPRoute
from litestar.status_codes import HTTP_204_NO_CONTENT

# The name Litestar gives the OPTIONS handlers it generates.
_GENERATED = "options_handler"


class AllowedMethods:
    """The ``Allow`` value of every generated OPTIONS handler of an app."""

    def __init__(self, app: Litestar) -> None:
        self._allow: dict[int, str] = {}
        for route in app.routes:
            if not isinstance(route, HTTPRoute) or "OPTIONS" not in route.route_handler_map:
                continue
            handler, _ = route.route_handler_map["OPTIONS"]
            if handler.handler_name == _GENERATED:
                self._allow[id(handler)] = ", ".join(sorted(route.methods))

    def answer(self, request: Request[Any, Any, Any]) -> Response[None] | None:
        """The answer to an OPTIONS request on a path with a generated handler, else None."""
        allow = self._allow.get(id(request.route_handler))
        if allow is None:
            return None
        return Response(
            None,
            status_code=HTTP_204_NO_CONTENT,
            headers={"Allow": allow},
            media_type=MediaType.TEXT,
        )
