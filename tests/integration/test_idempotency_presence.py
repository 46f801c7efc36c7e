"""Presence and renewals together decide when a claim's holder is gone (default lease):
a dead replica's claim goes within seconds, a live one that only lost its presence
connection keeps it."""

from __future__ import annotations

from datetime import timedelta

import asyncpg
import httpx

from app.webhooks.idempotency import RENEWAL_GRACE
from tests.integration.helpers import assert_problem
from tests.integration.test_idempotency_holders import insert_claim

CLEANUP = "/webhooks/n8n/cleanup"


async def test_a_claim_whose_replica_is_gone_and_stopped_renewing_is_taken_over_at_once(
    client: httpx.AsyncClient, database_url: str
) -> None:
    body = {"dry_run": True}
    headers = {"Idempotency-Key": "held-by-other"}
    holder = await asyncpg.connect(database_url)  # the other replica's presence connection
    try:
        assert await holder.fetchval(
            "SELECT pg_try_advisory_lock(replica_lock_space(), hashtext('replica-b'))"
        )
        # Last renewed 5 s ago (a 15 s lease with 10 s left).
        await insert_claim(holder, "held-by-other", body, "replica-b", timedelta(seconds=10))
        repeat = await client.post("/webhooks/n8n/cleanup", json=body, headers=headers)
        assert_problem(repeat, 409)
    finally:
        await holder.close()  # replica-b's process ends
    retry = await client.post("/webhooks/n8n/cleanup", json=body, headers=headers)
    assert retry.status_code == 200, retry.text
    assert retry.json()["dry_run"] is True


async def test_a_live_replica_that_lost_only_its_presence_connection_keeps_its_key(
    client: httpx.AsyncClient, database_url: str
) -> None:
    """A network blip or a terminated backend drops the presence lock while the request
    runs on: its lease, renewed every second, keeps a retry from running it twice."""
    body = {"dry_run": True}
    headers = {"Idempotency-Key": "blip"}
    conn = await asyncpg.connect(database_url)
    try:
        # No presence lock for replica-c, but a lease renewed a moment ago (15 s left).
        await insert_claim(conn, "blip", body, "replica-c", timedelta(seconds=15))
        assert_problem(await client.post("/webhooks/n8n/cleanup", json=body, headers=headers), 409)
        # Had it stopped renewing (a dead process), the grace would end the wait.
        await conn.execute(
            "UPDATE idempotency_keys SET lease_renewed_at = lease_renewed_at - $1::interval"
            " WHERE key = 'blip'",
            RENEWAL_GRACE + timedelta(seconds=1),
        )
        retry = await client.post("/webhooks/n8n/cleanup", json=body, headers=headers)
        assert retry.status_code == 200, retry.text
    finally:
        await conn.close()
