"""HTTP routes for the memories of a branch of a session (an overlay on main's)."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, put
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.principal import Principal
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.common.preconditions import etag, parse_if_match
from app.errors import BadRequest
from app.memories.branch_service import BranchMemoryService
from app.memories.schemas import (
    IDENTIFIER_PATTERN,
    BranchMemory,
    BranchMemoryPage,
    BranchMemoryWrite,
)

AnyRequest = Request[Principal, Any, Any]
CategoryQuery = Annotated[
    str, QueryParameter(min_length=1, max_length=50, pattern=IDENTIFIER_PATTERN.pattern)
]
KeyQuery = Annotated[str, QueryParameter(min_length=1, max_length=200)]


class BranchMemoryController(Controller):
    """Memories scoped to a branch: visible on the branch only, shadowing main's memory of
    the same (category, key), written into main when the branch merges."""

    path = "/v1/sessions/{session_id:uuid}/branches/{name:str}/memories"
    tags = ["memories", "branches"]

    @put("/by-key", summary="Create or replace a memory on a branch")
    async def put_memory(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        data: JSONBody[BranchMemoryWrite],
        branch_memory_service: NamedDependency[BranchMemoryService],
        if_match: Annotated[str | None, HeaderParameter(name="If-Match", required=False)],
        if_none_match: Annotated[str | None, HeaderParameter(name="If-None-Match", required=False)],
    ) -> Response[BranchMemory]:
        """201 when the branch sees no memory of the key yet, 200 when it replaces one
        (its own, or main's, which it then shadows). ``If-Match`` and ``If-None-Match: *``
        apply to the memory the branch sees."""
        create_only = if_none_match is not None and if_none_match.strip() == "*"
        if if_none_match is not None and not create_only:
            raise BadRequest("If-None-Match accepts only * here.")
        memory, created = await branch_memory_service.put(
            session_id, name, data, parse_if_match(if_match), create_only, request.user
        )
        return Response(
            memory,
            status_code=HTTP_201_CREATED if created else HTTP_200_OK,
            headers={"ETag": etag(memory.version)},
        )

    @get("/by-key", summary="Read a memory as a branch sees it")
    async def get_memory(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        category: CategoryQuery,
        key: KeyQuery,
        branch_memory_service: NamedDependency[BranchMemoryService],
    ) -> Response[BranchMemory]:
        """The branch's own value of the key (``branch``: the branch's name), else main's
        (``branch``: ``main``); 404 if neither is there for the caller."""
        memory = await branch_memory_service.get(session_id, name, category, key, request.user)
        return Response(memory, headers={"ETag": etag(memory.version)})

    @delete("/by-key", status_code=HTTP_204_NO_CONTENT, summary="Drop a branch's memory")
    async def delete_memory(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        category: CategoryQuery,
        key: KeyQuery,
        branch_memory_service: NamedDependency[BranchMemoryService],
    ) -> None:
        """The branch's value of the key goes; main's memory (if any) shows through again.
        Main's memory itself is not touched."""
        await branch_memory_service.delete(session_id, name, category, key, request.user)

    @get("/", summary="The memories a branch sees")
    async def list_memories(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_memory_service: NamedDependency[BranchMemoryService],
        category: Annotated[
            str | None,
            QueryParameter(min_length=1, max_length=50, pattern=IDENTIFIER_PATTERN.pattern),
        ] = None,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> BranchMemoryPage:
        """The session user's live memories the caller may read, as the branch sees them
        (its own rows in place of main's of the same key), newest first."""
        return await branch_memory_service.list_memories(
            session_id, name, category, limit, cursor, request.user
        )
