"""``LeanResponse`` answers exactly as Litestar's ``Response`` would (app/common/responses.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from litestar import Response
from litestar.background_tasks import BackgroundTask
from litestar.datastructures import Cookie

from app.common.responses import LeanResponse


def _noop() -> None:
    pass


CASES: list[tuple[Any, dict[str, Any], dict[str, Any]]] = [
    ({"a": 1, "b": [True, None, "é"]}, {}, {}),
    ({"a": 1}, {"headers": {"ETag": '"3"', "X-Other": "v"}}, {"headers": {"Location": "/x"}}),
    ({"a": 1}, {"status_code": 201, "headers": {"ETag": '"1"'}}, {}),
    ("plain text", {"media_type": "text/plain"}, {}),
    (b"raw", {"media_type": "application/octet-stream"}, {}),
    ({"type": "x"}, {"media_type": "application/problem+json", "status_code": 404}, {}),
    ({"a": 1}, {"headers": {"Content-Type": "application/json"}}, {}),  # its own type
    (None, {"status_code": 204}, {}),
    (None, {"status_code": 304, "headers": {"ETag": '"2"'}}, {}),
    ({"a": 1}, {"cookies": [Cookie(key="k", value="v")]}, {}),
    ({"a": 1}, {"background": BackgroundTask(_noop)}, {}),
    (None, {}, {"is_head_response": True}),
    ({"a": 1}, {}, {"type_encoders": {complex: str}}),
]


def _messages(response: Response[Any], **options: Any) -> list[Any]:
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def receive() -> Any:
        return {"type": "http.disconnect"}

    answer = response.to_asgi_response(None, None, **options)  # type: ignore[arg-type]
    asyncio.run(answer({"type": "http"}, receive, send))  # type: ignore[arg-type]
    return sent


@pytest.mark.parametrize(("content", "made", "given"), CASES)
def test_the_same_messages_as_litestars_response(
    content: Any, made: dict[str, Any], given: dict[str, Any]
) -> None:
    """Status, headers (names, values, order) and body are byte for byte Litestar's."""
    expected = _messages(Response(content, **made), **given)
    assert _messages(LeanResponse(content, **made), **given) == expected
