"""Webhook rows in and out of PostgreSQL: idempotency records, continuation, agent roles."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from app.db.pool import Connection
from app.db.queries import QUERIES

Q = QUERIES.webhooks


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """A stored request fingerprint and, once done, its response."""

    endpoint: str
    request_hash: bytes
    status: str
    response_status: int | None
    response_body: Any
    created_at: datetime
    expires_at: datetime
    lease_owner: str | None
    lease_expires_at: datetime


async def claim_key(
    conn: Connection,
    principal: str,
    key: str,
    endpoint: str,
    fingerprint: bytes,
    now: datetime,
    expires_at: datetime,
    owner: str | None,
    lease_expires_at: datetime,
    renewed_before: datetime,
) -> UUID | None:
    """Take the key for this request (new, expired, or its holder gone): the claim's token;
    None if a live request holds it, it was answered, or it was used for another request.
    A claim of a replica without presence is taken over only if it was last renewed no
    later than ``renewed_before``."""
    token: UUID | None = await conn.fetchval(
        Q.claim_idempotency_key,
        principal,
        key,
        endpoint,
        fingerprint,
        now,
        expires_at,
        owner,
        lease_expires_at,
        renewed_before,
    )
    return token


async def get_key(conn: Connection, principal: str, key: str) -> IdempotencyRecord | None:
    """The record under the key, if any."""
    row = await conn.fetchrow(Q.get_idempotency_key, principal, key)
    if row is None:
        return None
    return IdempotencyRecord(
        endpoint=row["endpoint"],
        request_hash=bytes(row["request_hash"]),
        status=row["status"],
        response_status=row["response_status"],
        response_body=row["response_body"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        lease_owner=row["lease_owner"],
        lease_expires_at=row["lease_expires_at"],
    )


async def forget_key(conn: Connection, principal: str, key: str, token: UUID) -> None:
    """Drop this request's claim (after a server-side failure); a claim taken over stays."""
    await conn.execute(Q.forget_idempotency_key, principal, key, token)


async def complete_key(
    conn: Connection, principal: str, key: str, token: UUID, status: int, body: dict[str, Any]
) -> bool:
    """Store the response to replay; False if the key was taken over meanwhile."""
    done = await conn.fetchval(Q.complete_idempotency_key, principal, key, token, status, body)
    return done is not None


async def renew_leases(
    conn: Connection, held: list[tuple[str, str, UUID]], lease_expires_at: datetime, now: datetime
) -> None:
    """Push the leases of these (principal, key, token) claims to ``lease_expires_at``,
    renewed ``now``."""
    await conn.execute(
        Q.renew_idempotency_leases,
        [principal for principal, _, _ in held],
        [key for _, key, _ in held],
        [token for _, _, token in held],
        lease_expires_at,
        now,
    )


async def purge_expired_keys(conn: Connection, now: datetime, limit: int) -> int:
    """One batch of keys whose stored answer expired before ``now`` deleted."""
    return len(await conn.fetch(Q.purge_idempotency_keys, now, limit))


async def count_expired_keys(conn: Connection, now: datetime) -> int:
    """How many keys' stored answers expired before ``now``."""
    return int(await conn.fetchval(Q.count_purgeable_idempotency_keys, now))


async def latest_open_session(
    conn: Connection, user_id: UUID, session_type: str, active_since: datetime, now: datetime
) -> UUID | None:
    """The user's most recently active open session of this type, if recent enough."""
    found: UUID | None = await conn.fetchval(
        Q.latest_open_session, user_id, session_type, active_since, now
    )
    return found


async def agent_roles(conn: Connection, agent_name: str) -> list[str] | None:
    """The roles of an enabled agent; None if there is none by that name."""
    roles = await conn.fetchval(Q.agent_roles, agent_name)
    return None if roles is None else list(roles)
