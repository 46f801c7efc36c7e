"""HTTP routes for subscriptions and events (admin)."""

from __future__ import annotations

from typing import Annotated, Any
from uuid import UUID

from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, HeaderParameter, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.guards import admin_only
from app.auth.principal import Principal
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.events.schemas import (
    EventDeliveryPage,
    Subscription,
    SubscriptionCreate,
    SubscriptionWithSecret,
)
from app.events.service import EventService
from app.events.streams import EventStreamResponse, EventStreams, parse_cursor, parse_types

Events = NamedDependency[EventService]
Streams = NamedDependency[EventStreams]
AnyRequest = Request[Principal, Any, Any]
LastEventId = Annotated[
    str | None,
    HeaderParameter(
        name="Last-Event-ID",
        required=False,
        description="Resume after this event (its id); EventSource sends it when it reconnects.",
    ),
]
After = Annotated[
    str | None,
    QueryParameter(
        description="Resume after this event id (for clients that cannot set Last-Event-ID); "
        "the header wins when both are sent. Without either, the stream starts with the "
        "events after the newest one.",
        max_length=40,
    ),
]

EventTypes = Annotated[
    str | None,
    QueryParameter(description="Only these event types, separated by commas.", max_length=1000),
]


class SubscriptionController(Controller):
    """Who receives events (admin)."""

    path = "/v1/subscriptions"
    tags = ["events"]
    guards = [admin_only]

    @post("/", status_code=HTTP_201_CREATED, summary="Subscribe a URL to events")
    async def subscribe(
        self, data: JSONBody[SubscriptionCreate], events: Events
    ) -> SubscriptionWithSecret:
        """The signing secret is returned once."""
        return await events.subscribe(data)

    @get("/", summary="List subscriptions")
    async def subscriptions(self, events: Events) -> list[Subscription]:
        """Every subscriber (without secrets)."""
        return await events.subscriptions()

    @delete("/{subscription_id:uuid}", status_code=HTTP_204_NO_CONTENT, summary="Unsubscribe")
    async def unsubscribe(self, subscription_id: FromPath[UUID], events: Events) -> None:
        """Remove a subscriber and its pending deliveries."""
        await events.unsubscribe(subscription_id)


class EventController(Controller):
    """The event outbox (admin)."""

    path = "/v1/events"
    tags = ["events"]
    guards = [admin_only]

    @get("/", summary="Events and their delivery state")
    async def events(
        self,
        events: Events,
        status: Annotated[str | None, QueryParameter(pattern="^(pending|delivered|dead)$")] = None,
        types: EventTypes = None,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> EventDeliveryPage:
        """Newest first; ``status`` filters deliveries, ``types`` the events' types."""
        return await events.deliveries(status, limit, cursor, parse_types(types))

    @post("/{event_id:uuid}/redeliver", status_code=HTTP_200_OK, summary="Deliver an event again")
    async def redeliver(self, event_id: FromPath[UUID], events: Events) -> dict[str, int]:
        """Resets the event's deliveries to pending (attempts from zero)."""
        return {"deliveries": await events.redeliver(event_id)}

    @get(
        "/stream",
        summary="Stream events (Server-Sent Events)",
        media_type="text/event-stream",
    )
    async def stream(
        self,
        request: AnyRequest,
        streams: Streams,
        last_event_id: LastEventId,
        after: After = None,
        types: EventTypes = None,
    ) -> EventStreamResponse:
        """Every event as it is committed, on any replica; ``id`` is the resumable cursor."""
        cursor = parse_cursor(last_event_id, after)
        stream = await streams.stream(request.user.name, parse_types(types), cursor)
        return EventStreamResponse(stream)


class SessionEventController(Controller):
    """A session's events as Server-Sent Events (any key that may read the session)."""

    path = "/v1/sessions/{session_id:uuid}/events"
    tags = ["events"]

    @get(
        "/",
        summary="Stream a session's events (Server-Sent Events)",
        media_type="text/event-stream",
    )
    async def session_events(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        streams: Streams,
        last_event_id: LastEventId,
        after: After = None,
    ) -> EventStreamResponse:
        """The session's versions, handoffs, expiry warnings and its tasks' transitions."""
        cursor = parse_cursor(last_event_id, after)
        stream = await streams.session_stream(session_id, request.user.name, cursor)
        return EventStreamResponse(stream)
