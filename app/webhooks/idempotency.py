"""Idempotency keys: n8n's "Retry On Fail" re-sends the same request; the first response is
stored and replayed for repeats, and the same key with a different body is refused (422).

Keys are scoped per caller. A request that ends in a client error a retry cannot change
(404, 422, ...) is stored like a success; one whose outcome a retry may change is
forgotten, so the retry runs it again: a conflict (409: a version moved, a key was taken,
a concurrent change), too many requests (429) and any server-side failure (5xx).

A key in progress is held by its request's claim, which dies with the request: the claim
names this replica, whose presence lock PostgreSQL drops the moment the process dies, and
carries a lease this service renews every second while the request runs. A repeat while
the holder lives gets 409 with Retry-After (as Stripe answers concurrent requests); a
repeat after it died takes the key over once the lease has gone unrenewed for
RENEWAL_GRACE (about two seconds after the crash), or within the lease if the holder is
alive but cut off. Requiring both (no presence, no recent renewal) keeps a live holder
whose presence connection alone dropped from being taken over. The claim's token fences
the holder: it completes or forgets only its own claim. An effect that is one database
transaction (a memory write, a coordinator's turn) stores its answer in that transaction
(``Seal``), so it happens exactly once even when the process dies between the two; other
effects are at least once across a crash (docs/design.md).

An effect that is one statement (a new memory from the n8n memory webhook) claims its key
in that statement too (``ClaimingWrite``): the claim, the effect and the answer commit
together, so its claim is never seen in progress. A repeat meanwhile waits on the key's
index entry for that statement to end (a round trip, not an agent call), then is answered
with what it stored, or claims the key itself if the statement rolled back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import orjson

from app.clock import Clock
from app.common.background import stop_loop
from app.db.pool import Connection, Database
from app.db.presence import ReplicaPresence
from app.errors import (
    Conflict,
    RequestInProgress,
    SwitchboardError,
    ValidationFailed,
    problem_body,
)
from app.jobs.sweep import Sweep
from app.webhooks import repository as repo

logger = logging.getLogger("switchboard.idempotency")

# Seconds a repeat is told to wait while the first request still runs.
RETRY_AFTER_SECONDS = 1
# How often running requests renew their leases (at most; a lease under 3 s renews at a
# third of it). A claim of a replica that lost its presence is taken over once it has gone
# unrenewed for RENEWAL_GRACE: two renewals missed and a half, so a live holder whose
# presence connection alone dropped keeps its key, and a retry after a crash runs about
# 2 s later. A constant, not a share of the lease: replicas judge each other's claims.
RENEWAL_INTERVAL = timedelta(seconds=1)
RENEWAL_GRACE = timedelta(seconds=2.5)

# Stores a successful (200) answer on the caller's connection, inside its transaction, so
# the effect and the answer commit together. Raises Conflict if the key was taken over
# meanwhile, which rolls the effect back.
Seal = Callable[[Connection, dict[str, Any]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class KeyClaim:
    """What a write needs to claim its request's key in its own statement, as
    ``claim_idempotency_key`` does (a write that can: ``ClaimingWrite``)."""

    principal: str
    key: str
    endpoint: str
    fingerprint: bytes
    now: datetime
    expires_at: datetime
    owner: str | None
    lease_expires_at: datetime
    renewed_before: datetime


@dataclass(frozen=True, slots=True)
class ClaimedWrite:
    """What a ``ClaimingWrite`` did: claimed the key (``token``) and, if it also made its
    change, stored its 200 ``answer`` in the same commit; no token: the key was not claimed
    (answered, held by a live request, or used for another request)."""

    token: UUID | None
    answer: dict[str, Any] | None


# A write that claims its key, makes its change and stores its answer in one statement
# (one round trip, atomic without a transaction): its outcome, or None when this request
# cannot be written so (it is then claimed and run as any other).
ClaimingWrite = Callable[[KeyClaim], Awaitable[ClaimedWrite | None]]


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


@dataclass(slots=True)
class Claim:
    """This request's hold on its key; every write to the key names the token."""

    principal: str
    key: str
    token: UUID
    sealed: bool = False

    async def seal(self, conn: Connection, body: dict[str, Any]) -> None:
        """Store ``body`` as the 200 answer, on the caller's connection and transaction."""
        if not await repo.complete_key(conn, self.principal, self.key, self.token, 200, body):
            raise Conflict(
                "This request's Idempotency-Key was taken over by a retry while it ran; its "
                "change was not made. Retry to get the answer.",
                retryable=True,
            )
        self.sealed = True


class IdempotencyService:
    """Runs a handler at most once per (caller, key) within the TTL."""

    def __init__(
        self,
        database: Database,
        clock: Clock,
        ttl: timedelta,
        lease: timedelta,
        presence: ReplicaPresence | None = None,
    ) -> None:
        self._db = database
        self._clock = clock
        self._ttl = ttl
        self._lease = lease
        self.renew_every = min(RENEWAL_INTERVAL, lease / 3)
        self._presence = presence
        self._held: dict[UUID, Claim] = {}
        self._renewer: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        """Renew the leases of running requests every lease/3, in the background."""
        self._stopping.clear()
        self._renewer = asyncio.create_task(self._keep_leases(), name="idempotency-leases")

    async def stop(self) -> None:
        """Stop renewing (requests still running lose their lease after it runs out)."""
        if self._renewer is not None:
            await stop_loop(self._renewer, self._stopping)
            self._renewer = None

    async def purge_expired(self, sweep: Sweep) -> None:
        """Stored answers past their TTL are purged (a job's sweep)."""
        now = sweep.now
        await sweep.step(
            "idempotency_keys_purged",
            lambda conn, limit: repo.purge_expired_keys(conn, now, limit),
            lambda conn: repo.count_expired_keys(conn, now),
        )

    async def run(
        self,
        principal: str,
        key: str | None,
        endpoint: str,
        body: dict[str, Any],
        handler: Callable[[Seal | None], Awaitable[tuple[int, dict[str, Any]]]],
        claiming: ClaimingWrite | None = None,
    ) -> StoredResponse:
        """Run ``handler`` (or replay its stored response) under ``key``. The handler gets
        a ``Seal`` (None without a key) to store its answer with its effect. ``claiming``,
        if given, is tried first: the claim, the change and its answer in one statement; the
        handler then runs only if that claimed the key without writing."""
        if key is None:
            status, payload = await handler(None)
            return StoredResponse(status, payload, replayed=False, problem=False)
        if not 1 <= len(key) <= 255:
            raise ValidationFailed(
                "An idempotency key is 1 to 255 characters.",
                errors=[{"field": "idempotency_key", "message": "1 to 255 characters"}],
            )
        fingerprint = request_hash(endpoint, body)
        claimed: Claim | StoredResponse | None = None
        if claiming is not None:
            claimed = await self._write_claiming(principal, key, endpoint, fingerprint, claiming)
        if claimed is None:
            claimed = await self._claim(principal, key, endpoint, fingerprint)
        if isinstance(claimed, StoredResponse):
            return claimed
        claim = claimed
        self._held[claim.token] = claim
        try:
            return await self._run_claimed(claim, endpoint, handler)
        finally:
            self._held.pop(claim.token, None)

    async def _run_claimed(
        self,
        claim: Claim,
        endpoint: str,
        handler: Callable[[Seal | None], Awaitable[tuple[int, dict[str, Any]]]],
    ) -> StoredResponse:
        try:
            status, payload = await handler(claim.seal)
            problem = False
        except SwitchboardError as error:
            if worth_retrying(error.status):
                await self._forget(claim)
                raise
            payload = problem_body(
                error.status, error.title, error.slug, error.detail, endpoint, error.extensions
            )
            status, problem = error.status, True
        except BaseException:
            await self._forget(claim)
            raise
        if claim.sealed and not problem:
            return StoredResponse(status, payload, replayed=False, problem=False)
        # A refusal after the seal may have come before its commit (the COMMIT itself
        # refused): the seal then rolled back and the key is still this request's, so the
        # refusal is stored in its place; if the seal committed, the 200 stands (no row is
        # in progress under this token any more, and nothing is written).
        # One statement: it commits on its own, no BEGIN/COMMIT round trips needed.
        async with self._db.connection() as conn:
            stored = await repo.complete_key(
                conn, claim.principal, claim.key, claim.token, status, payload
            )
        if not stored and not claim.sealed:
            logger.warning(
                "Idempotency-Key %r of %s was taken over while its request ran (its "
                "lease ran out); the retry's answer is the one stored",
                claim.key,
                claim.principal,
            )
        return StoredResponse(status, payload, replayed=False, problem=problem)

    def _key_claim(self, principal: str, key: str, endpoint: str, fingerprint: bytes) -> KeyClaim:
        """The claim this request makes on its key, now."""
        now = self._clock.now()
        return KeyClaim(
            principal=principal,
            key=key,
            endpoint=endpoint,
            fingerprint=fingerprint,
            now=now,
            expires_at=now + self._ttl,
            owner=self._presence.owner if self._presence is not None else None,
            lease_expires_at=now + self._lease,
            renewed_before=now - RENEWAL_GRACE,
        )

    async def _claim(
        self, principal: str, key: str, endpoint: str, fingerprint: bytes
    ) -> Claim | StoredResponse:
        for _ in range(3):
            wanted = self._key_claim(principal, key, endpoint, fingerprint)
            # The common cases are one statement: a key never seen, an expired one, one whose
            # holder is gone. Only a refusal needs a look at what holds the key.
            async with self._db.connection() as conn:
                token = await repo.claim_key(
                    conn,
                    principal,
                    key,
                    endpoint,
                    fingerprint,
                    wanted.now,
                    wanted.expires_at,
                    wanted.owner,
                    wanted.lease_expires_at,
                    wanted.renewed_before,
                )
                if token is not None:
                    return Claim(principal, key, token)
                existing = await self._held_by_another(conn, principal, key, endpoint, fingerprint)
            if existing is not None:
                return existing
        raise Conflict("Could not claim the Idempotency-Key; retry.", retryable=True)

    async def _write_claiming(
        self,
        principal: str,
        key: str,
        endpoint: str,
        fingerprint: bytes,
        claiming: ClaimingWrite,
    ) -> Claim | StoredResponse | None:
        """The claim, the change and its answer in one statement: the answer when it wrote;
        the claim when it claimed without writing (the handler runs under it); a stored
        answer or a refusal when another request has the key; None when this request cannot
        be written so."""
        for _ in range(3):
            outcome = await claiming(self._key_claim(principal, key, endpoint, fingerprint))
            if outcome is None:
                return None
            if outcome.answer is not None:
                return StoredResponse(200, outcome.answer, replayed=False, problem=False)
            if outcome.token is not None:
                return Claim(principal, key, outcome.token)
            async with self._db.connection() as conn:
                existing = await self._held_by_another(conn, principal, key, endpoint, fingerprint)
            if existing is not None:
                return existing
        raise Conflict("Could not claim the Idempotency-Key; retry.", retryable=True)

    async def _held_by_another(
        self, conn: Connection, principal: str, key: str, endpoint: str, fingerprint: bytes
    ) -> StoredResponse | None:
        """Why the key could not be claimed: its stored answer (replayed), or a refusal (422:
        another request's key; 409: still in progress). None: it was forgotten meanwhile, so
        the claim may be tried again."""
        existing = await repo.get_key(conn, principal, key)
        if existing is None:
            return None
        if existing.endpoint != endpoint or existing.request_hash != fingerprint:
            raise ValidationFailed(
                "This Idempotency-Key was used for a different request; use a new key "
                "for a new request.",
                errors=[{"field": "idempotency_key", "message": "reused with another body"}],
            )
        if existing.status == "completed" and existing.response_status is not None:
            status = existing.response_status
            return StoredResponse(
                status, existing.response_body, replayed=True, problem=status >= 400
            )
        raise RequestInProgress(
            "A request with this Idempotency-Key is still being processed; retry shortly.",
            retry_after=RETRY_AFTER_SECONDS,
        )

    async def _forget(self, claim: Claim) -> None:
        async with self._db.connection() as conn:
            await repo.forget_key(conn, claim.principal, claim.key, claim.token)

    async def _keep_leases(self) -> None:
        interval = self.renew_every.total_seconds()
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=interval)
            held = [(c.principal, c.key, c.token) for c in self._held.values()]
            if not held or self._stopping.is_set():
                continue
            try:
                async with self._db.connection() as conn:
                    now = self._clock.now()
                    await repo.renew_leases(conn, held, now + self._lease, now)
            except Exception:
                # The next round tries again; a lease that runs out meanwhile lets a retry
                # take the key over (the token keeps this request from storing over it).
                logger.warning("could not renew idempotency leases", exc_info=True)
