"""Scheduler rules for branches: an open branch with no write for branch_idle_ttl goes
with the expiry cleanup; a preserved session keeps its branches; a merged one stays."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import httpx
import pytest

from app.clock import Clock, FrozenClock
from app.settings import SessionSettings
from tests.integration.helpers import create_session, if_match


@pytest.fixture
def clock(frozen_clock: FrozenClock) -> Clock:
    return frozen_clock


async def names(client: httpx.AsyncClient, sid: str) -> list[str]:
    listing = (await client.get(f"/v1/sessions/{sid}/branches")).json()
    return [branch["name"] for branch in listing["items"]]


async def run_cleanup(client: httpx.AsyncClient, dry_run: bool = False) -> dict[str, Any]:
    response = await client.post(
        "/v1/jobs/expiry_cleanup/run", params={"dry_run": str(dry_run).lower()}
    )
    assert response.status_code == 200, response.text
    run: dict[str, Any] = response.json()
    assert run["status"] == "succeeded", run
    return run


async def test_idle_branches_expire_unless_preserved_or_merged(
    client: httpx.AsyncClient, frozen_clock: FrozenClock
) -> None:
    ttl = SessionSettings().branch_idle_ttl
    plain = (await create_session(client, ttl_seconds=30 * 86400))["session_id"]
    kept = (await create_session(client, preserve=True))["session_id"]
    for sid, name in ((plain, "idle"), (plain, "busy"), (plain, "done"), (kept, "idle")):
        response = await client.post(
            f"/v1/sessions/{sid}/branches", json={"name": name, "purpose": "analysis"}
        )
        assert response.status_code == 201, response.text
    assert (await client.post(f"/v1/sessions/{plain}/branches/done/merge")).status_code == 200

    frozen_clock.advance(ttl - timedelta(hours=1))
    touched = await client.patch(
        f"/v1/sessions/{plain}/branches/busy", json={"priority": "high"}, headers=if_match(1)
    )
    assert touched.status_code == 200, touched.text
    frozen_clock.advance(timedelta(hours=2))  # idle for ttl + 1 h; busy for 2 h

    dry = await run_cleanup(client, dry_run=True)
    assert dry["details"]["branches_expired"] == 1
    assert sorted(await names(client, plain)) == ["busy", "done", "idle"]

    run = await run_cleanup(client)
    assert run["details"]["branches_expired"] == 1
    assert sorted(await names(client, plain)) == ["busy", "done"]
    assert await names(client, kept) == ["idle"]  # a preserved session keeps its branches
