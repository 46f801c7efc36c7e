"""``LeanResponse``: Litestar's ``Response``, made into its ASGI answer with less work in the
common case (every JSON answer of the API: no cookies, no background task, a status with a
body).

Litestar's ``ASGIResponse`` keeps its headers in a ``MutableScopeHeaders`` and sets the
content type and length through its generic ``MutableMapping.setdefault`` (a scan of the
headers for each, a ``KeyError`` raised and caught for each): about 5 % of a session read's
CPU in the profile (docs/benchmarks.md, "Per-request machinery"). Here the raw header list
is built once, in the same order and encoding, and handed over as is. Anything else
(cookies, background tasks, HEAD, 1xx/204/304, a handler that sets its own content type or
length) goes through Litestar's own path unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from litestar import Response
from litestar.datastructures.headers import MutableScopeHeaders
from litestar.enums import MediaType
from litestar.response.base import ASGIResponse
from litestar.serialization import get_serializer
from litestar.utils.helpers import get_enum_string_value

if TYPE_CHECKING:
    from collections.abc import Iterable

    from litestar import Litestar, Request
    from litestar.background_tasks import BackgroundTask, BackgroundTasks
    from litestar.datastructures import Cookie
    from litestar.types import TypeEncodersMap

T = TypeVar("T")

# Headers Litestar sets itself from the body; a handler that sets one takes Litestar's path.
_DERIVED = frozenset({"content-type", "content-length"})


class _Answer(ASGIResponse):
    """An ``ASGIResponse`` built from headers already encoded."""

    __slots__ = ()

    def __init__(self, body: bytes, status_code: int, raw_headers: list[tuple[bytes, bytes]]):
        self.headers = MutableScopeHeaders({"headers": raw_headers})
        self.background = None
        self.body = body
        self.content_length = len(body)
        self._encoded_cookies = ()
        self.encoding = "utf-8"
        self.is_head_response = False
        self.status_code = status_code


class LeanResponse(Response[T]):
    """The app's response class: as Litestar's, turned into its ASGI answer directly when
    nothing but a body, a status and plain headers is asked for."""

    def to_asgi_response(
        self,
        app: Litestar | None,
        request: Request[Any, Any, Any],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: MediaType | str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        """The ASGI answer; Litestar's own unless only body, status and headers matter."""
        status = self.status_code or status_code or 200
        raw: list[tuple[bytes, bytes]] | None = None
        if not (
            app is not None
            or encoded_headers is not None
            or is_head_response
            or self.cookies
            or cookies
            or self.background
            or background
            or status < 200
            or status in (204, 304)
            or self.encoding != "utf-8"
        ):
            raw = []
            for name, value in ({**headers, **self.headers} if headers else self.headers).items():
                lowered = name.lower()
                if lowered in _DERIVED:
                    raw = None
                    break
                raw.append((lowered.encode("latin-1"), value.encode("latin-1")))
        if raw is None:
            return super().to_asgi_response(
                app,
                request,
                background=background,
                cookies=cookies,
                encoded_headers=encoded_headers,
                headers=headers,
                is_head_response=is_head_response,
                media_type=media_type,
                status_code=status_code,
                type_encoders=type_encoders,
            )
        media = get_enum_string_value(self.media_type or media_type or MediaType.JSON)
        encoders = (
            {**type_encoders, **(self.response_type_encoders or {})}
            if type_encoders
            else self.response_type_encoders
        )
        body = self.render(self.content, media, get_serializer(encoders))
        raw.append(
            (
                b"content-type",
                (f"{media}; charset=utf-8" if media.startswith("text/") else media).encode(
                    "latin-1"
                ),
            )
        )
        raw.append((b"content-length", str(len(body)).encode("latin-1")))
        return _Answer(body, status, raw)
