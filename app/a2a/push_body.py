"""The body and headers of an A2A push notification, built from a task.transition event
for the outbox's delivery loop (app/events/service.py). Only a2a-sdk types here: the
delivery loop imports it, and the rest of app/a2a imports the coordinator.

A push notification is an A2A ``StreamResponse`` (what a stream would have carried): here
a ``statusUpdate`` with the task's new state, its contextId (the session, else the task)
and the time of the transition. The config's token goes in ``X-A2A-Notification-Token``
and its authentication, when it has one, in ``Authorization`` (``<scheme> <credentials>``),
as the SDK's own sender does.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from a2a.types import StreamResponse, TaskState, TaskStatus, TaskStatusUpdateEvent
from google.protobuf.json_format import MessageToDict
from google.protobuf.timestamp_pb2 import Timestamp

TOKEN_HEADER = "X-A2A-Notification-Token"  # noqa: S105 - a header name


def push_body(payload: dict[str, Any], at: datetime) -> dict[str, Any]:
    """The StreamResponse (JSON) for a task.transition event's payload."""
    task_id = str(payload["task_id"])
    state = TaskState.Value("TASK_STATE_" + str(payload["to_status"]).upper().replace("-", "_"))
    stamp = Timestamp()
    stamp.FromDatetime(at)
    update = TaskStatusUpdateEvent(
        task_id=task_id,
        context_id=str(payload.get("session_id") or task_id),
        status=TaskStatus(state=state, timestamp=stamp),
    )
    body: dict[str, Any] = MessageToDict(StreamResponse(status_update=update))
    return body


def push_headers(token: str | None, authentication: dict[str, Any] | None) -> dict[str, str]:
    """The config's token and authentication as headers."""
    headers: dict[str, str] = {}
    if token:
        headers[TOKEN_HEADER] = token
    if authentication and authentication.get("scheme") and authentication.get("credentials"):
        headers["Authorization"] = f"{authentication['scheme']} {authentication['credentials']}"
    return headers
