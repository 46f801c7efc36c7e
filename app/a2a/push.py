"""A2A push notification configs (issue 19): stored per task in PostgreSQL and delivered
by the event outbox.

A caller sets configs on the tasks it may see (GetTask's rules); it reads and deletes its
own (the admin: every one). Each config is written with a delivery target in
``subscriptions`` that the outbox fan-out gives only its task's ``task.transition``
events; the outbox delivery loop (app/events/service.py) posts them with its retries,
backoff, signature and redelivery, as A2A ``StreamResponse`` bodies (push_body.py).

The signature (``X-Switchboard-Signature``) is keyed with the config's token when it has
at least 16 characters, so the receiver can check it; otherwise with a random secret
nobody is told, and the token (or the authentication) is what the receiver checks.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any
from uuid import UUID

from a2a.types import (
    AuthenticationInfo,
    ListTaskPushNotificationConfigsResponse,
    TaskPushNotificationConfig,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError

from app.auth.principal import Principal
from app.clock import Clock
from app.db.pool import Database
from app.db.queries import QUERIES
from app.errors import NotFound
from app.outbound.policy import OutboundPolicy
from app.tasks.service import TaskService

Q = QUERIES.a2a_push

MIN_SIGNING_TOKEN = 16


class PushConfigs:
    """Create, read, list and delete a task's push configs."""

    def __init__(
        self, database: Database, clock: Clock, tasks: TaskService, outbound: OutboundPolicy
    ) -> None:
        self._db = database
        self._clock = clock
        self._tasks = tasks
        self._outbound = outbound

    async def create(
        self, config: TaskPushNotificationConfig, principal: Principal
    ) -> TaskPushNotificationConfig:
        """Store ``config`` on its task (InvalidParams for a URL the outbound policy
        refuses, or an id the task already has a config under)."""
        task_id = await self._visible(config.task_id, principal)
        if not config.url:
            raise InvalidParamsError(message="A push config needs a url.")
        if len(config.url) > 2000 or len(config.token) > 2000 or len(config.id) > 200:
            raise InvalidParamsError(
                message="A push config's url and token are at most 2000 characters, "
                "its id at most 200."
            )
        why = await self._outbound.registration_refusal(config.url)
        if why is None and not config.url.startswith(("http://", "https://")):
            why = "only http and https URLs"
        if why is None and any(c.isspace() for c in config.url):
            why = "a URL has no whitespace"
        if why is not None:
            raise InvalidParamsError(
                message=f"Switchboard may not send push notifications to this URL: {why}."
            )
        config_id = config.id or str(uuid.uuid4())
        authentication: dict[str, Any] | None = None
        if config.HasField("authentication"):
            authentication = {
                "scheme": config.authentication.scheme,
                "credentials": config.authentication.credentials,
            }
        token = config.token or None
        secret = token if token and len(token) >= MIN_SIGNING_TOKEN else secrets.token_urlsafe(32)
        async with self._db.transaction() as conn:
            row = await conn.fetchrow(
                Q.insert_push_config,
                task_id,
                config_id,
                config.url,
                token,
                authentication,
                principal.name,
                secret,
                self._clock.now(),
            )
        if row is None:
            raise InvalidParamsError(
                message=f"Task {task_id} already has a push config {config_id!r}; "
                "delete it first to replace it."
            )
        return _config(dict(row))

    async def get(
        self, task_id: str, config_id: str, principal: Principal
    ) -> TaskPushNotificationConfig:
        """One of the caller's configs of the task."""
        for config in await self._list(task_id, principal):
            if config.id == config_id:
                return config
        raise InvalidParamsError(message=f"Task {task_id} has no push config {config_id!r}.")

    async def list_configs(
        self, task_id: str, principal: Principal
    ) -> ListTaskPushNotificationConfigsResponse:
        """The caller's configs of the task (all of them: a task has few)."""
        return ListTaskPushNotificationConfigsResponse(configs=await self._list(task_id, principal))

    async def delete(self, task_id: str, config_id: str, principal: Principal) -> None:
        """Delete one of the caller's configs; its pending deliveries go with it."""
        visible = await self._visible(task_id, principal)
        async with self._db.transaction() as conn:
            deleted = await conn.fetchval(
                Q.delete_push_config, visible, config_id, _owner(principal)
            )
        if deleted is None:
            raise InvalidParamsError(message=f"Task {task_id} has no push config {config_id!r}.")

    async def _list(self, task_id: str, principal: Principal) -> list[TaskPushNotificationConfig]:
        visible = await self._visible(task_id, principal)
        async with self._db.connection() as conn:
            rows = await conn.fetch(Q.push_configs_of_task, visible, _owner(principal))
        return [_config(dict(row)) for row in rows]

    async def _visible(self, task_id: str, principal: Principal) -> UUID:
        """The task's id if ``principal`` may see it (GetTask's rules)."""
        try:
            parsed = UUID(task_id)
            await self._tasks.detail(parsed, principal)
        except (ValueError, NotFound):
            raise TaskNotFoundError from None
        return parsed


def _owner(principal: Principal) -> str | None:
    """Whose configs a caller reads: its own; the admin's, everyone's."""
    return None if principal.is_admin else principal.name


def _config(row: dict[str, Any]) -> TaskPushNotificationConfig:
    config = TaskPushNotificationConfig(
        id=row["config_id"], task_id=str(row["task_id"]), url=row["url"], token=row["token"] or ""
    )
    if row["authentication"]:
        config.authentication.CopyFrom(AuthenticationInfo(**row["authentication"]))
    return config
