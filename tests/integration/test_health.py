"""Liveness and readiness."""

from __future__ import annotations

import gc
from typing import Any

import httpx

from app.asgi import create_app
from app.settings import ServerSettings, Settings
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


async def test_metrics_count_requests_and_show_breakers_and_jobs(
    client: httpx.AsyncClient, anon: httpx.AsyncClient
) -> None:
    await client.get("/v1/agents")
    await anon.get("/v1/agents")  # 401
    await client.post("/v1/agents/Educate_Customer_Agent/breaker", json={"state": "open"})
    await client.post("/v1/jobs/archival/run")
    response = await anon.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert 'switchboard_http_requests_total{method="GET",route="/v1/agents",status="200"} 1' in text
    assert 'switchboard_http_requests_total{method="GET",route="/v1/agents",status="401"} 1' in text
    assert 'switchboard_http_request_seconds_count{method="GET",route="/v1/agents"} 2' in text
    assert 'switchboard_breaker_state{agent="Educate_Customer_Agent",state="forced_open"} 1' in text
    assert 'switchboard_job_last_run_succeeded{job="archival"} 1' in text
    assert 'switchboard_db_pool_connections{state="open"}' in text


async def test_metrics_can_be_turned_off(server_url: str, database_url: str) -> None:
    from app.settings import ServerSettings

    settings = Settings(server=ServerSettings(metrics_enabled=False))
    app = create_app(settings, database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False)
    async with lifespan_of(app), app_client(app) as client:
        assert (await client.get("/metrics")).status_code == 404


async def test_start_up_freezes_what_is_alive_only_when_asked(database_url: str) -> None:
    def app(freeze: bool) -> Any:
        return create_app(
            Settings(server=ServerSettings(gc_freeze=freeze)),
            database_url=database_url,
            admin_key=ADMIN_KEY,
            run_scheduler=False,
        )

    gc.unfreeze()
    try:
        async with lifespan_of(app(False)):
            assert gc.get_freeze_count() == 0
        async with lifespan_of(app(True)):
            assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # the rest of the test process must stay collectable
