"""SWITCHBOARD_SESSION_MERGE_DEFAULT=auto: writes based on older versions merge unless a
request asks for strict (Prefer: merge=strict)."""

from __future__ import annotations

import httpx
import pytest

from app.settings import DatabaseSettings, SessionSettings, Settings
from tests.conftest import LOOPBACK_ALLOWED
from tests.integration.helpers import assert_problem, create_session, if_match


@pytest.fixture
def settings() -> Settings:
    """This module's app merges by default (SWITCHBOARD_SESSION_MERGE_DEFAULT=auto)."""
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=5),
        outbound=LOOPBACK_ALLOWED,
        sessions=SessionSettings(merge_default="auto"),
    )


async def test_the_setting_makes_auto_the_default(client: httpx.AsyncClient) -> None:
    session = await create_session(client)
    url = f"/v1/sessions/{session['session_id']}"
    await client.patch(url, json={"progress_percentage": 5}, headers=if_match(1))
    merged = await client.patch(url, json={"priority": "low"}, headers=if_match(1))
    assert merged.status_code == 200, merged.text
    assert merged.headers["Preference-Applied"] == "merge=auto"
    strict = await client.patch(
        url, json={"priority": "high"}, headers={**if_match(1), "Prefer": "merge=strict"}
    )
    assert assert_problem(strict, 409)["type"] == "urn:switchboard:problem:version-conflict"
