"""Event rows in and out of PostgreSQL: subscriptions, deliveries, the events' retention."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from app.db.pool import Connection
from app.db.queries import QUERIES
from app.events.frames import stream_event
from app.events.schemas import (
    DueDelivery,
    EventDelivery,
    EventDetail,
    NewEvent,
    StreamEvent,
    SubscriberDelivery,
    Subscription,
)

Q = QUERIES.events


async def claim_due_deliveries(
    conn: Connection, now: datetime, limit: int, in_flight_until: datetime
) -> list[DueDelivery]:
    """Take due deliveries (SKIP LOCKED) and mark them in flight."""
    rows = await conn.fetch(Q.claim_due_deliveries, now, limit, in_flight_until)
    return [DueDelivery(**dict(row)) for row in rows]


async def mark_delivered(conn: Connection, delivery: DueDelivery, now: datetime) -> None:
    """A subscriber took the event."""
    await conn.execute(Q.mark_delivered, delivery.event_id, delivery.subscription_id, now)


async def mark_delivery_failed(
    conn: Connection, delivery: DueDelivery, error: str, next_attempt_at: datetime, dead: bool
) -> None:
    """A delivery failed: retry later, or give up."""
    await conn.execute(
        Q.mark_delivery_failed,
        delivery.event_id,
        delivery.subscription_id,
        error,
        next_attempt_at,
        dead,
    )


async def insert_subscription(
    conn: Connection, url: str, event_types: list[str], secret: str, now: datetime
) -> Subscription:
    """A new subscriber (without its secret)."""
    row = await conn.fetchrow(Q.insert_subscription, url, event_types, secret, now)
    if row is None:
        raise RuntimeError("insert_subscription returned no row")
    return Subscription(**dict(row))


async def list_subscriptions(conn: Connection) -> list[Subscription]:
    """Every subscriber (without secrets)."""
    return [Subscription(**dict(row)) for row in await conn.fetch(Q.list_subscriptions)]


async def delete_subscription(conn: Connection, subscription_id: UUID) -> bool:
    """Remove a subscriber; False if there was none."""
    return await conn.fetchval(Q.delete_subscription, subscription_id) is not None


async def list_deliveries(
    conn: Connection,
    status: str | None,
    event_types: list[str] | None,
    before: tuple[datetime, UUID, UUID],
    limit: int,
) -> list[EventDelivery]:
    """Events with their delivery state, newest first, after the (created_at, event_id,
    subscription_id) of the last row seen."""
    rows = await conn.fetch(
        Q.list_deliveries, status, event_types, before[0], before[1], before[2], limit
    )
    return [EventDelivery(**dict(row)) for row in rows]


async def event_detail(conn: Connection, event_id: UUID) -> EventDetail | None:
    """An event and its delivery to each subscriber (None: no such event with deliveries)."""
    rows = await conn.fetch(Q.event_deliveries, event_id)
    if not rows:
        return None
    first = rows[0]
    return EventDetail(
        event_id=first["event_id"],
        event_type=first["event_type"],
        payload=first["payload"],
        created_at=first["created_at"],
        trace_id=first["trace_id"],
        deliveries=[
            SubscriberDelivery(
                subscription_id=row["subscription_id"],
                url=row["url"],
                status=row["status"],
                attempts=row["attempts"],
                last_error=row["last_error"],
                delivered_at=row["delivered_at"],
                next_attempt_at=row["next_attempt_at"],
            )
            for row in rows
        ],
    )


async def redeliver_event(conn: Connection, event_id: UUID, now: datetime) -> int:
    """Reset an event's deliveries to pending; how many."""
    return len(await conn.fetch(Q.redeliver_event, event_id, now))


async def purge_settled_events(conn: Connection, before: datetime, limit: int) -> int:
    """One batch of events created before ``before`` whose deliveries are all over."""
    return len(await conn.fetch(Q.purge_events, before, limit))


async def count_settled_events(conn: Connection, before: datetime) -> int:
    """How many events created before ``before`` have all their deliveries over."""
    return int(await conn.fetchval(Q.count_purgeable_events, before))


async def insert_event(conn: Connection, event: NewEvent, now: datetime) -> UUID:
    """Write one event to the outbox; its id."""
    event_id: UUID = await conn.fetchval(Q.insert_event, event.event_type, event.payload, now)
    return event_id


# -- event streams ---------------------------------------------------------------------


# Where a numbering batch ended: the (created_at, event_id) of the last event it numbered.
NumberingKey = tuple[datetime, UUID]


async def sequence_events(
    conn: Connection, batch: int, after: NumberingKey | None = None
) -> tuple[int, NumberingKey | None]:
    """Number up to ``batch`` committed events that have no position yet, oldest first and
    after ``after`` (None: from the oldest); how many, and the key to pass the next batch of
    the same run (None if there was nothing to number). Call it in a transaction of its own:
    the numbering's turn lasts until that commits."""
    created, event_id = after if after is not None else (None, None)
    row = await conn.fetchrow(Q.sequence_events, batch, created, event_id)
    if row is None:  # a function with OUT parameters returns one row, always
        raise RuntimeError("outbox_sequence_from() returned no row")
    key = None if row["last_event"] is None else (row["last_created"], row["last_event"])
    return int(row["numbered"]), key


async def last_position(conn: Connection) -> int:
    """The newest numbered event's position (0: none yet)."""
    return int(await conn.fetchval(Q.last_position))


async def events_after(conn: Connection, position: int, limit: int) -> list[StreamEvent]:
    """Numbered events after ``position``, oldest first."""
    return [stream_event(dict(row)) for row in await conn.fetch(Q.events_after, position, limit)]


async def events_of_types_after(
    conn: Connection, types: list[str], position: int, limit: int
) -> list[StreamEvent]:
    """Numbered events of ``types`` after ``position``, oldest first."""
    rows = await conn.fetch(Q.events_of_types_after, position, limit, types)
    return [stream_event(dict(row)) for row in rows]


async def session_events_after(
    conn: Connection, session_id: UUID, position: int, limit: int
) -> list[StreamEvent]:
    """Numbered events naming ``session_id`` after ``position``, oldest first."""
    rows = await conn.fetch(Q.session_events_after, position, limit, str(session_id))
    return [stream_event(dict(row)) for row in rows]


async def position_bound(conn: Connection) -> int:
    """The highest position ever given out: a cursor past it was never sent."""
    return int(await conn.fetchval(Q.position_bound))
