"""HTTP routes for subscriptions and events (admin)."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.guards import admin_only
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.events.schemas import (
    EventDeliveryPage,
    Subscription,
    SubscriptionCreate,
    SubscriptionWithSecret,
)
from app.events.service import EventService

Events = NamedDependency[EventService]


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
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> EventDeliveryPage:
        """Newest first; ``status`` filters deliveries."""
        return await events.deliveries(status, limit, cursor)

    @post("/{event_id:uuid}/redeliver", status_code=HTTP_200_OK, summary="Deliver an event again")
    async def redeliver(self, event_id: FromPath[UUID], events: Events) -> dict[str, int]:
        """Resets the event's deliveries to pending (attempts from zero)."""
        return {"deliveries": await events.redeliver(event_id)}
