"""HTTP routes for sessions. Parses, calls one service method, sets ETag/Location."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, get, patch, post
from litestar.datastructures import ResponseHeader
from litestar.di import NamedDependency
from litestar.params import (
    BodyKwarg,
    FromPath,
    FromQuery,
    HeaderParameter,
    JSONBody,
    PathParameter,
)
from litestar.status_codes import HTTP_201_CREATED, HTTP_304_NOT_MODIFIED

from app.auth.principal import Principal
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.common.preconditions import (
    body_base_version,
    etag,
    merge_preference,
    merged_write,
    required_base_versions,
)
from app.common.responses import LeanResponse
from app.sessions.lifecycle import SessionLifecycle
from app.sessions.schemas import (
    Completion,
    Handoff,
    Rollback,
    Session,
    SessionCreate,
    SessionPage,
    SessionStatus,
    SessionVersion,
    SessionVersionPage,
)
from app.sessions.service import SessionService

IfMatch = Annotated[
    str | None,
    HeaderParameter(
        name="If-Match",
        required=False,
        description='The version this write is based on, as an ETag: "3".',
    ),
]
Prefer = Annotated[
    str | None,
    HeaderParameter(
        name="Prefer",
        required=False,
        description=(
            "merge=auto: a write based on an older version is merged with the changes since "
            "when they touch different paths (409 listing the conflicts otherwise); "
            "merge=strict: it is refused (409). Without it, SWITCHBOARD_SESSION_MERGE_DEFAULT."
        ),
    ),
]
ETAG_HEADER = [
    ResponseHeader(name="ETag", description="The session version.", documentation_only=True)
]
MERGE_HEADERS = [
    *ETAG_HEADER,
    ResponseHeader(
        name="Preference-Applied",
        description="merge=auto when the write was merged with changes made since its base.",
        documentation_only=True,
        required=False,
    ),
]

AnyRequest = Request[Principal, Any, Any]


def _with_etag(session: Session, status_code: int = 200) -> LeanResponse[Session]:
    """The session with its version as the ETag; callers may add headers before returning."""
    return LeanResponse(session, status_code=status_code, headers={"ETag": etag(session.version)})


def _written(session: Session, bases: set[int] | None) -> LeanResponse[Session]:
    """The written session; says ``Preference-Applied: merge=auto`` if it was merged."""
    response = _with_etag(session)
    if merged_write(bases, session.version):
        response.headers["Preference-Applied"] = "merge=auto"
    return response


class SessionController(Controller):
    """Create, read and change sessions with optimistic concurrency."""

    path = "/v1/sessions"
    tags = ["sessions"]

    @post("/", status_code=HTTP_201_CREATED, summary="Open a session", response_headers=ETAG_HEADER)
    async def create_session(
        self,
        request: AnyRequest,
        data: JSONBody[SessionCreate],
        session_service: NamedDependency[SessionService],
    ) -> Response[Session]:
        """Create a session at version 1 for an existing user."""
        session = await session_service.create_session(data, actor=request.user.name)
        response = _with_etag(session, HTTP_201_CREATED)
        response.headers["Location"] = f"/v1/sessions/{session.session_id}"
        return response

    @get("/{session_id:uuid}", summary="Read a session", response_headers=ETAG_HEADER)
    async def get_session(
        self,
        session_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
        if_none_match: Annotated[str | None, HeaderParameter(name="If-None-Match", required=False)],
    ) -> Response[Session]:
        """The current session; ``If-None-Match`` with the current ETag answers 304."""
        session = await session_service.get_session(session_id)
        if if_none_match is not None and etag(session.version) in {
            tag.strip() for tag in if_none_match.split(",")
        }:
            return Response(
                None,  # type: ignore[arg-type]
                status_code=HTTP_304_NOT_MODIFIED,
                headers={"ETag": etag(session.version)},
            )
        return _with_etag(session)

    @patch(
        "/{session_id:uuid}",
        summary="Change a session (JSON merge patch)",
        response_headers=MERGE_HEADERS,
    )
    async def patch_session(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
        if_match: IfMatch,
        prefer: Prefer,
        data: Annotated[
            dict[str, Any],
            BodyKwarg(
                description=(
                    "RFC 7396 merge patch over session_state, coordination_metadata, "
                    "progress_percentage, priority, current_agent, preserve and status; "
                    "base_version may stand in for If-Match."
                )
            ),
        ],
    ) -> Response[Session]:
        """Apply a merge patch if the session is still at the version you read."""
        bases = required_base_versions(if_match, body_base_version(data.get("base_version")))
        session = await session_service.patch_session(
            session_id, data, bases, request.user.name, merge_preference(prefer)
        )
        return _written(session, bases)

    @post(
        "/{session_id:uuid}/handoff",
        status_code=200,
        summary="Hand the session to another agent",
        response_headers=MERGE_HEADERS,
    )
    async def handoff(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        data: JSONBody[Handoff],
        session_service: NamedDependency[SessionService],
        if_match: IfMatch,
        prefer: Prefer,
    ) -> Response[Session]:
        """Close the current agent's step and start the next agent's."""
        bases = required_base_versions(if_match, data.base_version)
        session = await session_service.handoff(
            session_id, data, bases, request.user.name, merge_preference(prefer)
        )
        return _written(session, bases)

    @post("/{session_id:uuid}/complete", status_code=200, summary="Complete a session")
    async def complete(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
        if_match: IfMatch,
        data: JSONBody[Completion | None] = None,
    ) -> Response[Session]:
        """Mark the session completed; it takes no further content changes."""
        body = data or Completion()
        bases = required_base_versions(if_match, body.base_version)
        return _with_etag(
            await session_service.complete(session_id, body, bases, request.user.name)
        )

    @post("/{session_id:uuid}/touch", status_code=200, summary="Heartbeat")
    async def touch(
        self, session_id: FromPath[UUID], session_service: NamedDependency[SessionService]
    ) -> Response[Session]:
        """Record activity; with an active process, extend expiry by the configured period."""
        return _with_etag(await session_service.touch(session_id))

    @post("/{session_id:uuid}/rollback", status_code=200, summary="Restore an earlier version")
    async def rollback(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        data: JSONBody[Rollback],
        session_service: NamedDependency[SessionService],
        if_match: IfMatch,
    ) -> Response[Session]:
        """Write a new version equal to ``to_version``; history is kept whole."""
        bases = required_base_versions(if_match, data.base_version)
        return _with_etag(
            await session_service.rollback(session_id, data, bases, request.user.name)
        )

    @post(
        "/{session_id:uuid}/restore",
        status_code=200,
        summary="Restore an expired or archived session",
    )
    async def restore(
        self, session_id: FromPath[UUID], session_lifecycle: NamedDependency[SessionLifecycle]
    ) -> Session:
        """Within the recovery window: the session and its history come back; after it,
        404 (gone for good)."""
        return await session_lifecycle.restore(session_id)

    @get("/{session_id:uuid}/versions", summary="A session's history")
    async def list_versions(
        self,
        session_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> SessionVersionPage:
        """Committed versions, newest first."""
        return await session_service.list_versions(session_id, limit, cursor)

    @get("/{session_id:uuid}/versions/{version:int}", summary="One version of a session")
    async def get_version(
        self,
        session_id: FromPath[UUID],
        version: Annotated[int, PathParameter(ge=1)],
        session_service: NamedDependency[SessionService],
    ) -> SessionVersion:
        """The content of the session as of ``version``."""
        return await session_service.get_version(session_id, version)


class UserSessionsController(Controller):
    """A user's sessions."""

    path = "/v1/users/{user_id:uuid}/sessions"
    tags = ["sessions"]

    @get("/", summary="List a user's sessions")
    async def list_user_sessions(
        self,
        user_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
        status: FromQuery[SessionStatus | None] = None,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> SessionPage:
        """Newest first, keyset-paginated; ``status`` filters."""
        return await session_service.list_user_sessions(user_id, status, limit, cursor)
