"""Idempotency keys: n8n's "Retry On Fail" re-sends the same request; the first response is
stored and replayed for repeats, and the same key with a different body is refused (422).

Keys are scoped per caller. A request that ends in a client error a retry cannot change
(404, 422, ...) is stored like a success; one whose outcome a retry may change is
forgotten, so the retry runs it again: a conflict (409: a version moved, a key was taken,
a concurrent change), too many requests (429) and any server-side failure (5xx).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import orjson

from app.agents.schemas import MAX_AGENT_TIMEOUT_MS
from app.clock import Clock
from app.db.pool import Database
from app.errors import Conflict, SwitchboardError, ValidationFailed, problem_body
from app.webhooks import repository as repo

# A request still "in progress" after this long died with its process; a retry may run.
# It must outlast the slowest request that is still alive, or a retry would run alongside
# it and do everything twice. A message may call two agents one after the other (the AI
# classifier, then the chosen agent), each for up to the largest timeout_ms an agent may
# have, retries included; the database work around them gets two more minutes. (A cleanup
# run over a huge backlog may take longer still; running a job twice is harmless.)
AGENT_CALLS_PER_REQUEST = 2
DATABASE_ALLOWANCE = timedelta(minutes=2)
IN_PROGRESS_TIMEOUT = (
    AGENT_CALLS_PER_REQUEST * timedelta(milliseconds=MAX_AGENT_TIMEOUT_MS) + DATABASE_ALLOWANCE
)


def worth_retrying(status: int) -> bool:
    """True for outcomes a retry of the same request may change: never replay those."""
    return status == 409 or status == 429 or status >= 500


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A response to send (fresh or replayed)."""

    status: int
    body: dict[str, Any]
    replayed: bool
    problem: bool


def request_hash(endpoint: str, body: dict[str, Any]) -> bytes:
    """The fingerprint a repeat must match: endpoint plus canonical body (key field dropped)."""
    canonical = {k: v for k, v in body.items() if k != "idempotency_key"}
    return hashlib.sha256(
        endpoint.encode() + b"\n" + orjson.dumps(canonical, option=orjson.OPT_SORT_KEYS)
    ).digest()


class IdempotencyService:
    """Runs a handler at most once per (caller, key) within the TTL."""

    def __init__(self, database: Database, clock: Clock, ttl: timedelta) -> None:
        self._db = database
        self._clock = clock
        self._ttl = ttl

    async def run(
        self,
        principal: str,
        key: str | None,
        endpoint: str,
        body: dict[str, Any],
        handler: Callable[[], Awaitable[tuple[int, dict[str, Any]]]],
    ) -> StoredResponse:
        """Run ``handler`` (or replay its stored response) under ``key``."""
        if key is None:
            status, payload = await handler()
            return StoredResponse(status, payload, replayed=False, problem=False)
        if not 1 <= len(key) <= 255:
            raise ValidationFailed(
                "An idempotency key is 1 to 255 characters.",
                errors=[{"field": "idempotency_key", "message": "1 to 255 characters"}],
            )
        fingerprint = request_hash(endpoint, body)
        stored = await self._claim(principal, key, endpoint, fingerprint)
        if stored is not None:
            return stored
        try:
            status, payload = await handler()
            problem = False
        except SwitchboardError as error:
            if worth_retrying(error.status):
                await self._forget(principal, key)
                raise
            payload = problem_body(
                error.status, error.title, error.slug, error.detail, endpoint, error.extensions
            )
            status, problem = error.status, True
        except BaseException:
            await self._forget(principal, key)
            raise
        # One statement: it commits on its own, no BEGIN/COMMIT round trips needed.
        async with self._db.connection() as conn:
            await repo.complete_key(conn, principal, key, status, payload)
        return StoredResponse(status, payload, replayed=False, problem=problem)

    async def _claim(
        self, principal: str, key: str, endpoint: str, fingerprint: bytes
    ) -> StoredResponse | None:
        now = self._clock.now()
        # The common case, a key never seen: one INSERT ... ON CONFLICT DO NOTHING, atomic on
        # its own. Only a key already present needs the read-decide-write below, in a
        # transaction.
        async with self._db.connection() as conn:
            if await repo.claim_key(
                conn, principal, key, endpoint, fingerprint, now, now + self._ttl
            ):
                return None
        async with self._db.transaction() as conn:
            for _ in range(2):
                # The claim above just failed, so look first; claim only once the key is free.
                existing = await repo.get_key(conn, principal, key)
                if existing is None:
                    if await repo.claim_key(
                        conn, principal, key, endpoint, fingerprint, now, now + self._ttl
                    ):
                        return None
                    continue  # taken again between the two statements: look again
                abandoned = (
                    existing.status != "completed"
                    and existing.created_at < now - IN_PROGRESS_TIMEOUT
                )
                if existing.expires_at <= now or abandoned:
                    # Expired, or its first request died mid-way: the key is free again.
                    await repo.forget_key(conn, principal, key)
                    continue
                if existing.endpoint != endpoint or existing.request_hash != fingerprint:
                    raise ValidationFailed(
                        "This Idempotency-Key was used for a different request; use a new key "
                        "for a new request.",
                        errors=[
                            {"field": "idempotency_key", "message": "reused with another body"}
                        ],
                    )
                if existing.status != "completed" or existing.response_status is None:
                    raise Conflict(
                        "A request with this Idempotency-Key is still being processed; retry "
                        "shortly.",
                        retryable=True,
                    )
                status = existing.response_status
                return StoredResponse(
                    status, existing.response_body, replayed=True, problem=status >= 400
                )
        raise Conflict("Could not claim the Idempotency-Key; retry.", retryable=True)

    async def _forget(self, principal: str, key: str) -> None:
        async with self._db.transaction() as conn:
            await repo.forget_key(conn, principal, key)
