"""Liveness and readiness."""

from __future__ import annotations

import httpx

from app.asgi import create_app
from app.settings import Settings
from tests import dbutil
from tests.conftest import ADMIN_KEY, app_client, lifespan_of


async def test_health_needs_no_key(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_ready_when_database_answers(anon: httpx.AsyncClient) -> None:
    response = await anon.get("/ready")
    assert response.status_code == 200
    assert response.json()["database"] == "ok"


async def test_ready_is_503_problem_when_database_is_unreachable(
    settings: Settings, server_url: str
) -> None:
    missing = dbutil.with_database(server_url, "sbtest_does_not_exist")
    settings.database.pool_min_size = 0
    app = create_app(settings, database_url=missing, admin_key=ADMIN_KEY, run_scheduler=False)
    async with lifespan_of(app), app_client(app) as client:
        response = await client.get("/ready")
    assert response.status_code == 503
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["retry-after"] == "1"
    assert response.json()["status"] == 503
