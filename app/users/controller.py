"""HTTP routes for users."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_201_CREATED

from app.auth.guards import admin_only
from app.auth.principal import Principal
from app.erasure.schemas import UserErased
from app.erasure.service import ErasureService
from app.users.schemas import User, UserCreate
from app.users.service import UserService


class UserController(Controller):
    """Create, look up and erase users."""

    path = "/v1/users"
    tags = ["users"]

    @post("/", status_code=HTTP_201_CREATED, summary="Create a user")
    async def create_user(
        self, data: JSONBody[UserCreate], user_service: NamedDependency[UserService]
    ) -> User:
        """Create a user; ``external_ref`` (your own id for them) must be unique if given."""
        return await user_service.create_user(data.external_ref)

    @get("/", summary="Find a user by external reference")
    async def find_user(
        self,
        user_service: NamedDependency[UserService],
        external_ref: Annotated[str, QueryParameter(min_length=1, max_length=256)],
    ) -> User:
        """The user whose ``external_ref`` matches exactly."""
        return await user_service.find_by_external_ref(external_ref)

    @get("/{user_id:uuid}", summary="Get a user")
    async def get_user(
        self, user_id: FromPath[UUID], user_service: NamedDependency[UserService]
    ) -> User:
        """One user by id."""
        return await user_service.get_user(user_id)

    @delete(
        "/{user_id:uuid}",
        status_code=200,
        guards=[admin_only],
        summary="Erase a user and everything about them",
    )
    async def erase_user(
        self,
        request: Request[Principal, Any, Any],
        user_id: FromPath[UUID],
        erasure_service: NamedDependency[ErasureService],
    ) -> UserErased:
        """Hard delete (right to be forgotten): the user, their sessions with history and
        decisions, memories and archives go; stored webhook responses and events about them
        go; audit rows and job records that name them are redacted. Counts per table."""
        return await erasure_service.erase_user(user_id, request.user)
