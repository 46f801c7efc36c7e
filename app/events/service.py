"""Subscriptions and the delivery of outbox events.

Events are written in the same transaction as the change they describe, by the statement
that makes it (sessions.sql, memories.sql); a trigger on outbox_events gives each one a
delivery per subscriber that wants its type. Delivery is at-least-once: a delivery is
claimed with SKIP LOCKED (so two replicas never post the same one at the same time), posted
signed (app/events/signing.py), and retried with exponential backoff and jitter until it
succeeds or runs out of attempts (then it is ``dead``). Receivers de-duplicate by
``X-Switchboard-Event-Id``.
"""

from __future__ import annotations

import logging
import random
import secrets
from collections.abc import Collection
from datetime import timedelta
from uuid import UUID

import httpx
import orjson

from app.a2a.push_body import push_body, push_headers
from app.clock import Clock
from app.common.pagination import FIRST_PAGE_OF_PAIRS, cut_page, decode_time_id_id_cursor
from app.db.pool import Database
from app.errors import NotFound
from app.events import repository as repo
from app.events.schemas import (
    DueDelivery,
    EventDeliveryPage,
    EventDetail,
    NewEvent,
    Subscription,
    SubscriptionCreate,
    SubscriptionWithSecret,
)
from app.events.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, sign
from app.jobs.sweep import Sweep
from app.outbound.policy import OutboundPolicy, OutboundRefused
from app.settings import SchedulerSettings
from app.tracing import outbound_headers

logger = logging.getLogger("switchboard.events")


class EventService:
    """Subscriptions and delivery of outbox events."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        settings: SchedulerSettings,
        http: httpx.AsyncClient,
        outbound: OutboundPolicy,
    ) -> None:
        self._db = database
        self._clock = clock
        self._settings = settings
        self._http = http  # enforces the outbound policy on every connection
        self._outbound = outbound

    async def subscribe(self, data: SubscriptionCreate) -> SubscriptionWithSecret:
        """Register a subscriber; the secret is returned this once."""
        await self._outbound.require_registrable(str(data.url), "url")
        secret = data.secret or secrets.token_urlsafe(32)
        async with self._db.transaction() as conn:
            subscription = await repo.insert_subscription(
                conn, str(data.url), sorted(set(data.event_types)), secret, self._clock.now()
            )
        return SubscriptionWithSecret(subscription=subscription, secret=secret)

    async def subscriptions(self) -> list[Subscription]:
        """Every subscriber."""
        async with self._db.connection() as conn:
            return await repo.list_subscriptions(conn)

    async def unsubscribe(self, subscription_id: UUID) -> None:
        """Remove a subscriber and its pending deliveries."""
        async with self._db.transaction() as conn:
            if not await repo.delete_subscription(conn, subscription_id):
                raise NotFound(f"No subscription {subscription_id}.")

    async def deliveries(
        self,
        status: str | None,
        limit: int,
        cursor: str | None,
        event_types: Collection[str] | None = None,
    ) -> EventDeliveryPage:
        """Events with their delivery state, newest first (only ``event_types`` if given)."""
        before = decode_time_id_id_cursor(cursor) if cursor else FIRST_PAGE_OF_PAIRS
        async with self._db.connection() as conn:
            items = await repo.list_deliveries(
                conn,
                status,
                None if event_types is None else sorted(event_types),
                before,
                limit + 1,
            )
        # One event has a row per subscriber: the event id alone would skip the rest of
        # an event whose rows a page boundary splits.
        page, next_cursor = cut_page(
            items, limit, lambda e: (e.created_at, e.event_id, e.subscription_id)
        )
        return EventDeliveryPage(items=page, next_cursor=next_cursor)

    async def event(self, event_id: UUID) -> EventDetail:
        """An event with its payload and its delivery to each subscriber (404: none)."""
        async with self._db.connection() as conn:
            detail = await repo.event_detail(conn, event_id)
        if detail is None:
            raise NotFound(f"No deliveries for event {event_id}.")
        return detail

    async def redeliver(self, event_id: UUID) -> int:
        """Send an event again to all its subscribers (resets attempts); how many."""
        async with self._db.transaction() as conn:
            count = await repo.redeliver_event(conn, event_id, self._clock.now())
        if not count:
            raise NotFound(f"No deliveries for event {event_id}.")
        return count

    async def emit(self, event: NewEvent) -> UUID:
        """Write an event to the outbox on its own; an event that describes a row change
        is written by the statement making it instead (same transaction)."""
        async with self._db.transaction() as conn:
            return await repo.insert_event(conn, event, self._clock.now())

    async def purge_settled(self, sweep: Sweep) -> None:
        """Events older than their retention whose deliveries are all over (delivered or
        dead) go, with those deliveries; an event still being retried stays."""
        before = sweep.now - self._settings.event_retention
        await sweep.step(
            "events_purged",
            lambda conn, limit: repo.purge_settled_events(conn, before, limit),
            lambda conn: repo.count_settled_events(conn, before),
        )

    async def deliver_due(self, limit: int = 100) -> int:
        """Post every due delivery once; returns how many were attempted."""
        now = self._clock.now()
        in_flight_until = now + self._settings.delivery_timeout * 2
        async with self._db.transaction() as conn:
            due = await repo.claim_due_deliveries(conn, now, limit, in_flight_until)
        for delivery in due:
            await self._deliver(delivery)
        return len(due)

    async def _deliver(self, row: DueDelivery) -> None:
        # An A2A push config's target gets the event as an A2A StreamResponse, with the
        # config's token and authentication; everything else about delivery is the same.
        envelope = (
            push_body(row.payload, row.created_at)
            if row.push
            else {
                "event_id": str(row.event_id),
                "event_type": row.event_type,
                "created_at": row.created_at.isoformat(),
                "payload": row.payload,
            }
        )
        body = orjson.dumps(envelope)
        timestamp = int(self._clock.now().timestamp())
        headers = outbound_headers(
            {
                "content-type": "application/json",
                "X-Switchboard-Event": row.event_type,
                "X-Switchboard-Event-Id": str(row.event_id),
                TIMESTAMP_HEADER: str(timestamp),
                SIGNATURE_HEADER: sign(row.secret, timestamp, body),
            }
            | (push_headers(row.push_token, row.push_authentication) if row.push else {})
        )
        error: str | None = None
        try:
            reply = await self._http.post(
                row.url,
                content=body,
                headers=headers,
                timeout=self._settings.delivery_timeout.total_seconds(),
            )
            if not 200 <= reply.status_code < 300:
                error = f"HTTP {reply.status_code}"
        except OutboundRefused as refused:
            error = str(refused)  # nothing was sent
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}"
        now = self._clock.now()
        async with self._db.transaction() as conn:
            if error is None:
                await repo.mark_delivered(conn, row, now)
                return
            attempts = int(row.attempts)
            dead = attempts >= self._settings.delivery_max_attempts
            backoff = min(timedelta(hours=1), timedelta(seconds=2**attempts))
            jittered = backoff * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not secrecy
            await repo.mark_delivery_failed(conn, row, error, now + jittered, dead)
            if dead:
                logger.warning("event %s to %s is dead: %s", row.event_id, row.url, error)
