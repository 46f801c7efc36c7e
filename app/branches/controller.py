"""HTTP routes for branches of a session: /v1/sessions/{id}/branches/{name}. Parses, calls
one service method, sets ETag/Location. ``main`` is the session itself (/v1/sessions/{id})."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, Response, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.params import BodyKwarg, FromPath, JSONBody, PathParameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.principal import Principal
from app.branches.schemas import (
    Branch,
    BranchCreate,
    BranchList,
    BranchVersion,
    BranchVersionPage,
    MergeResolution,
    SessionGraph,
)
from app.branches.service import BranchService
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.common.preconditions import (
    body_base_version,
    etag,
    merge_preference,
    merged_write,
    required_base_versions,
)
from app.sessions.controller import ETAG_HEADER, MERGE_HEADERS, IfMatch, Prefer
from app.sessions.schemas import Session

AnyRequest = Request[Principal, Any, Any]


def _branch(branch: Branch, status_code: int = 200) -> Response[Branch]:
    return Response(branch, status_code=status_code, headers={"ETag": etag(branch.version)})


class BranchController(Controller):
    """Fork a session into branches, work on them, merge them back."""

    path = "/v1/sessions/{session_id:uuid}"
    tags = ["branches"]

    @post(
        "/branches",
        status_code=HTTP_201_CREATED,
        summary="Fork the session into a branch",
        response_headers=ETAG_HEADER,
    )
    async def fork(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        data: JSONBody[BranchCreate],
        branch_service: NamedDependency[BranchService],
    ) -> Response[Branch]:
        """A named branch with the session's content at ``from_version`` (default: now),
        a purpose and an owning agent (default: the caller). Its versions continue from
        that version's number."""
        branch = await branch_service.fork(session_id, data, request.user.name)
        response = _branch(branch, HTTP_201_CREATED)
        response.headers["Location"] = f"/v1/sessions/{session_id}/branches/{branch.name}"
        return response

    @get("/branches", summary="A session's branches")
    async def list_branches(
        self, session_id: FromPath[UUID], branch_service: NamedDependency[BranchService]
    ) -> BranchList:
        """Every branch, oldest first: base, head, purpose, owner, state and last activity,
        with the session's own head version."""
        return await branch_service.list_branches(session_id)

    @get("/branches/{name:str}", summary="Read a branch", response_headers=ETAG_HEADER)
    async def get_branch(
        self,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_service: NamedDependency[BranchService],
    ) -> Response[Branch]:
        """The branch's head and content; the ETag is its version."""
        return _branch(await branch_service.get_branch(session_id, name))

    @patch(
        "/branches/{name:str}",
        summary="Change a branch (JSON merge patch)",
        response_headers=MERGE_HEADERS,
    )
    async def patch_branch(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_service: NamedDependency[BranchService],
        if_match: IfMatch,
        prefer: Prefer,
        data: Annotated[
            dict[str, Any],
            BodyKwarg(
                description=(
                    "RFC 7396 merge patch over session_state, coordination_metadata, "
                    "progress_percentage, priority and current_agent of the branch; "
                    "base_version may stand in for If-Match (a branch version)."
                )
            ),
        ],
    ) -> Response[Branch]:
        """As PATCH of the session, on the branch: If-Match names a branch version, and
        Prefer: merge=auto merges a write based on an older one."""
        bases = required_base_versions(if_match, body_base_version(data.get("base_version")))
        branch = await branch_service.patch_branch(
            session_id, name, data, bases, request.user.name, merge_preference(prefer)
        )
        response = _branch(branch)
        if merged_write(bases, branch.version):
            response.headers["Preference-Applied"] = "merge=auto"
        return response

    @delete("/branches/{name:str}", status_code=HTTP_204_NO_CONTENT, summary="Delete a branch")
    async def delete_branch(
        self,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_service: NamedDependency[BranchService],
    ) -> None:
        """The branch and its versions go; what was merged stays in the session."""
        await branch_service.delete(session_id, name)

    @post(
        "/branches/{name:str}/merge",
        status_code=200,
        summary="Merge a branch into the session",
        response_headers=ETAG_HEADER,
    )
    async def merge(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_service: NamedDependency[BranchService],
        data: JSONBody[MergeResolution | None] = None,
    ) -> Response[Session]:
        """Three-way merge into the session (ours: the branch, theirs: the session). Clean:
        a new session version naming the branch. Conflicts: 409 listing each path; POST
        again with ``choices`` (per path) or a ``document`` to complete the merge."""
        session = await branch_service.merge(session_id, name, data, request.user.name)
        return Response(session, headers={"ETag": etag(session.version)})

    @post(
        "/branches/{name:str}/rebase",
        status_code=200,
        summary="Rebase a branch onto the session's head",
        response_headers=ETAG_HEADER,
    )
    async def rebase(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_service: NamedDependency[BranchService],
        data: JSONBody[MergeResolution | None] = None,
    ) -> Response[Branch]:
        """Replay the branch's changes on the session as it is now (a new branch version
        sitting on the session's head); conflicts as for a merge."""
        return _branch(await branch_service.rebase(session_id, name, data, request.user.name))

    @get("/branches/{name:str}/versions", summary="A branch's history")
    async def list_versions(
        self,
        session_id: FromPath[UUID],
        name: FromPath[str],
        branch_service: NamedDependency[BranchService],
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> BranchVersionPage:
        """Committed versions of the branch, newest first."""
        return await branch_service.list_versions(session_id, name, limit, cursor)

    @get("/branches/{name:str}/versions/{version:int}", summary="One version of a branch")
    async def get_version(
        self,
        session_id: FromPath[UUID],
        name: FromPath[str],
        version: Annotated[int, PathParameter(ge=1)],
        branch_service: NamedDependency[BranchService],
    ) -> BranchVersion:
        """The branch's content as of ``version``."""
        return await branch_service.get_version(session_id, name, version)

    @get("/graph", summary="The version graph of a session and its branches")
    async def graph(
        self, session_id: FromPath[UUID], branch_service: NamedDependency[BranchService]
    ) -> SessionGraph:
        """Every version of the session (``main@N``) and of its branches (``name@N``), each
        naming the versions it came from: the one before, the fork or rebase point, the
        merged branch version."""
        return await branch_service.graph(session_id)
