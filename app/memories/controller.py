"""HTTP routes for memories, their categories and types, session context and the audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, post, put
from litestar.di import NamedDependency
from litestar.enums import RequestEncodingType
from litestar.params import (
    BodyKwarg,
    FromPath,
    FromQuery,
    HeaderParameter,
    JSONBody,
    QueryParameter,
)
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.guards import admin_only
from app.auth.principal import Principal
from app.common.jsonbody import decode_json
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.common.preconditions import etag, parse_if_match
from app.common.validation import validate_each, validate_input
from app.erasure.schemas import MemoriesErased
from app.erasure.service import ErasureService
from app.errors import BadRequest, ValidationFailed
from app.memories.repository import MemoryFilter
from app.memories.schemas import (
    IDENTIFIER_PATTERN,
    MAX_BATCH,
    AccessLevel,
    AccessLogPage,
    Category,
    CategoryChange,
    CategoryWrite,
    Memory,
    MemoryBatch,
    MemoryPage,
    MemoryType,
    MemoryTypeWrite,
    MemoryUpsert,
    MemoryWrite,
    SessionContext,
)
from app.memories.service import MemoryService

AnyRequest = Request[Principal, Any, Any]
ShortQuery = Annotated[str | None, QueryParameter(min_length=1, max_length=100)]


def _contains(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        value = decode_json(raw.encode())
    except BadRequest:
        raise BadRequest("contains must be a JSON value.", parameter="contains") from None
    except ValidationFailed as exc:
        errors = [
            {**e, "field": "contains" + ("" if e["field"] == "$" else "." + e["field"])}
            for e in exc.extensions.get("errors", [])
        ]
        raise BadRequest(
            "contains holds a value this service cannot store.",
            parameter="contains",
            errors=errors,
        ) from None
    if not isinstance(value, dict | list):
        raise BadRequest("contains must be a JSON object or array.", parameter="contains")
    return value


class MemoryController(Controller):
    """Write, read, search and delete memories."""

    path = "/v1/memories"
    tags = ["memories"]

    @post("/", status_code=HTTP_201_CREATED, summary="Store a memory or a batch of memories")
    async def write(
        self,
        request: AnyRequest,
        data: Annotated[
            dict[str, Any] | list[dict[str, Any]],
            BodyKwarg(
                media_type=RequestEncodingType.JSON,
                description=(
                    "A MemoryWrite object (user_id, memory_type, content; optional session_id, "
                    "category, key, access_level), or an array of 1 to 500 of them."
                ),
            ),
        ],
        memory_service: NamedDependency[MemoryService],
    ) -> Memory | MemoryBatch:
        """One JSON object stores one memory; an array (up to 500) stores all or none."""
        if isinstance(data, list):
            if not data or len(data) > MAX_BATCH:
                raise ValidationFailed(
                    f"A batch holds 1 to {MAX_BATCH} memories.",
                    errors=[{"field": "$", "message": f"{len(data)} items"}],
                )
            items = validate_each(MemoryWrite, data)
            return MemoryBatch(items=await memory_service.write(items, request.user, batch=True))
        item = validate_input(MemoryWrite, data, what="memory")
        return (await memory_service.write([item], request.user, batch=False))[0]

    @put("/by-key", summary="Create or replace the memory named by (user_id, category, key)")
    async def upsert_by_key(
        self,
        request: AnyRequest,
        data: JSONBody[MemoryUpsert],
        memory_service: NamedDependency[MemoryService],
        if_match: Annotated[str | None, HeaderParameter(name="If-Match", required=False)],
        if_none_match: Annotated[str | None, HeaderParameter(name="If-None-Match", required=False)],
    ) -> Response[Memory]:
        """201 when created, 200 when replaced. ``If-Match: "<version>"`` replaces only
        that version (409 otherwise); ``If-None-Match: *`` only creates."""
        create_only = if_none_match is not None and if_none_match.strip() == "*"
        if if_none_match is not None and not create_only:
            raise BadRequest("If-None-Match accepts only * here.")
        memory, created = await memory_service.upsert_by_key(
            data, parse_if_match(if_match), create_only, request.user
        )
        return Response(
            memory,
            status_code=HTTP_201_CREATED if created else HTTP_200_OK,
            headers={"ETag": etag(memory.version)},
        )

    @get("/{memory_id:uuid}", summary="Read a memory")
    async def get_memory(
        self,
        request: AnyRequest,
        memory_id: FromPath[UUID],
        memory_service: NamedDependency[MemoryService],
    ) -> Response[Memory]:
        """404 if it does not exist, has expired, or is not the caller's to read."""
        memory = await memory_service.get(memory_id, request.user)
        return Response(memory, headers={"ETag": etag(memory.version)})

    @delete("/{memory_id:uuid}", status_code=HTTP_204_NO_CONTENT, summary="Delete a memory")
    async def delete_memory(
        self,
        request: AnyRequest,
        memory_id: FromPath[UUID],
        memory_service: NamedDependency[MemoryService],
    ) -> None:
        """Delete a memory the caller may read (404 otherwise)."""
        await memory_service.delete(memory_id, request.user)

    @get("/", summary="Search memories")
    async def list_memories(
        self,
        request: AnyRequest,
        memory_service: NamedDependency[MemoryService],
        user_id: FromQuery[UUID | None] = None,
        session_id: FromQuery[UUID | None] = None,
        agent_name: ShortQuery = None,
        memory_type: ShortQuery = None,
        category: ShortQuery = None,
        since: FromQuery[datetime | None] = None,
        contains: Annotated[
            str | None,
            QueryParameter(max_length=4096, description="JSON; JSONB containment (@>)."),
        ] = None,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> MemoryPage:
        """Live memories the caller may read, newest first. Name at least one of user_id,
        session_id, agent_name or contains."""
        if since is not None and since.tzinfo is None:
            raise BadRequest("since needs a timezone (e.g. 2026-01-01T00:00:00Z).")
        where = MemoryFilter(
            user_id=user_id,
            session_id=session_id,
            agent_name=agent_name,
            contains=_contains(contains),
            memory_type=memory_type,
            category=category,
            since=since,
        )
        query = {k: v for k, v in request.query_params.items() if k not in ("cursor",)}
        return await memory_service.list_memories(where, limit, cursor, request.user, query)


class SessionContextController(Controller):
    """Everything an agent needs to pick a session up, in one call."""

    path = "/v1/sessions/{session_id:uuid}/context"
    tags = ["memories", "sessions"]

    @get("/", summary="The session and its visible memories, within a budget")
    async def context(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        memory_service: NamedDependency[MemoryService],
        limit: PageLimit = DEFAULT_LIMIT,
        max_bytes: Annotated[
            int | None,
            QueryParameter(ge=1, le=16 * 1024 * 1024, description="Content byte budget."),
        ] = None,
    ) -> SessionContext:
        """Newest memories first, stopping at ``limit`` or when the next would pass
        ``max_bytes``; ``truncated`` says whether anything was left out."""
        return await memory_service.context(session_id, request.user, limit, max_bytes)


class UserMemoriesController(Controller):
    """Erasing a user's memories."""

    path = "/v1/users/{user_id:uuid}/memories"
    tags = ["memories", "users"]

    @delete("/", status_code=HTTP_200_OK, guards=[admin_only], summary="Erase a user's memories")
    async def erase(
        self,
        request: AnyRequest,
        user_id: FromPath[UUID],
        erasure_service: NamedDependency[ErasureService],
    ) -> MemoriesErased:
        """Delete every memory of the user, live and archived, with the copies of them in
        stored webhook responses and audit queries; returns the counts per table."""
        return await erasure_service.erase_memories(user_id, request.user)


class MemoryCategoryController(Controller):
    """Memory categories: retention and default access level."""

    path = "/v1/memory-categories"
    tags = ["memories"]

    @get("/", summary="List memory categories")
    async def list_categories(
        self, memory_service: NamedDependency[MemoryService]
    ) -> list[Category]:
        """Every category with its retention and default access level."""
        return await memory_service.list_categories()

    @get("/{name:str}", summary="Get a memory category")
    async def get_category(
        self, name: FromPath[str], memory_service: NamedDependency[MemoryService]
    ) -> Category:
        """One category."""
        return await memory_service.get_category(name)

    @put("/{name:str}", guards=[admin_only], summary="Create or change a memory category")
    async def put_category(
        self,
        name: FromPath[str],
        data: JSONBody[CategoryWrite],
        memory_service: NamedDependency[MemoryService],
        reapply: Annotated[
            bool,
            QueryParameter(description="Recompute expiry of existing memories now."),
        ] = False,
    ) -> CategoryChange:
        """A new retention applies to memories written afterwards, or to all with ``reapply``."""
        if not IDENTIFIER_PATTERN.fullmatch(name):
            raise BadRequest("A category name is lowercase letters, digits and underscores.")
        return await memory_service.put_category(name, data, reapply)


class MemoryTypeController(Controller):
    """Memory types and the category each lands in by default."""

    path = "/v1/memory-types"
    tags = ["memories"]

    @get("/", summary="List memory types")
    async def list_types(self, memory_service: NamedDependency[MemoryService]) -> list[MemoryType]:
        """Every memory type."""
        return await memory_service.list_memory_types()

    @post("/", status_code=HTTP_201_CREATED, guards=[admin_only], summary="Register a memory type")
    async def add_type(
        self, data: JSONBody[MemoryTypeWrite], memory_service: NamedDependency[MemoryService]
    ) -> MemoryType:
        """Add a type that agents may then write."""
        return await memory_service.add_memory_type(data)


class AccessLevelController(Controller):
    """The access levels and the roles they need."""

    path = "/v1/memory-access-levels"
    tags = ["memories"]

    @get("/", summary="List access levels")
    async def list_levels(
        self, memory_service: NamedDependency[MemoryService]
    ) -> list[AccessLevel]:
        """Every level and the agent role that may read it (none: any agent)."""
        return await memory_service.list_access_levels()


class AuditController(Controller):
    """The memory access audit trail (admin)."""

    path = "/v1/audit/memory"
    tags = ["audit"]
    guards = [admin_only]

    @get("/", summary="Memory access audit log")
    async def audit(
        self,
        memory_service: NamedDependency[MemoryService],
        agent: ShortQuery = None,
        since: FromQuery[datetime | None] = None,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> AccessLogPage:
        """Reads and writes, allowed and denied, newest first."""
        if since is not None and since.tzinfo is None:
            raise BadRequest("since needs a timezone (e.g. 2026-01-01T00:00:00Z).")
        return await memory_service.audit_log(agent, since, limit, cursor)
