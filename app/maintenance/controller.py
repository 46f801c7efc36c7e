"""HTTP routes for jobs, session restore, subscriptions and events."""

from __future__ import annotations

from typing import Annotated
from uuid import UUID

from litestar import Controller, delete, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED, HTTP_204_NO_CONTENT

from app.auth.guards import admin_only
from app.common.pagination import DEFAULT_LIMIT, MAX_LIMIT
from app.maintenance.events import (
    EventDeliveryPage,
    EventService,
    SubscriptionCreate,
    SubscriptionWithSecret,
)
from app.maintenance.schemas import JobInfo, JobRun, JobRunPage, Subscription
from app.maintenance.service import MaintenanceService
from app.sessions.schemas import Session

Limit = Annotated[int, QueryParameter(ge=1, le=MAX_LIMIT)]
Cursor = Annotated[str | None, QueryParameter(max_length=512)]
Maintenance = NamedDependency[MaintenanceService]
Events = NamedDependency[EventService]


class JobController(Controller):
    """The maintenance jobs: schedule, runs, manual runs (admin)."""

    path = "/v1/jobs"
    tags = ["jobs"]
    guards = [admin_only]

    @get("/", summary="Jobs, their schedule, last run and next run")
    async def jobs(self, maintenance: Maintenance) -> list[JobInfo]:
        """Every maintenance job."""
        return await maintenance.jobs()

    @get("/{name:str}/runs", summary="A job's runs")
    async def runs(
        self,
        name: FromPath[str],
        maintenance: Maintenance,
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
    ) -> JobRunPage:
        """Runs newest first, with rows affected, status and errors."""
        return await maintenance.runs(name, limit, cursor)

    @post("/{name:str}/run", status_code=HTTP_200_OK, summary="Run a job now")
    async def run(
        self,
        name: FromPath[str],
        maintenance: Maintenance,
        dry_run: Annotated[bool, QueryParameter(description="Count, change nothing.")] = False,
    ) -> JobRun:
        """Runs through the same claim as scheduled runs; returns the run record."""
        return await maintenance.run_now(name, dry_run)


class RestoreController(Controller):
    """Bringing sessions back from the archive."""

    path = "/v1/sessions/{session_id:uuid}/restore"
    tags = ["sessions"]

    @post("/", status_code=HTTP_200_OK, summary="Restore an expired or archived session")
    async def restore(self, session_id: FromPath[UUID], maintenance: Maintenance) -> Session:
        """Within the recovery window: the session and its history come back; after it,
        404 (gone for good)."""
        return await maintenance.restore(session_id)


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
        limit: Limit = DEFAULT_LIMIT,
        cursor: Cursor = None,
    ) -> EventDeliveryPage:
        """Newest first; ``status`` filters deliveries."""
        return await events.deliveries(status, limit, cursor)

    @post("/{event_id:uuid}/redeliver", status_code=HTTP_200_OK, summary="Deliver an event again")
    async def redeliver(self, event_id: FromPath[UUID], events: Events) -> dict[str, int]:
        """Resets the event's deliveries to pending (attempts from zero)."""
        return {"deliveries": await events.redeliver(event_id)}
