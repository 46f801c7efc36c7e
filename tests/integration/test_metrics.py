"""``GET /metrics`` as Prometheus scrapes it: the standard text format, every request
counted (an unknown path too), and with several worker processes sharing
``PROMETHEUS_MULTIPROC_DIR``, any worker's answer sums them all."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bench.serve import spawn
from tests.conftest import ADMIN_KEY


def requests_total(text: str, route: str, status: str = "200") -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "switchboard_http_requests_total" and (
                labels["route"],
                labels["status"],
            ) == (route, status):
                return sample.value
    return 0.0


async def test_the_standard_format_with_every_request_counted(
    client: httpx.AsyncClient, anon: httpx.AsyncClient
) -> None:
    await anon.get("/no/such/route")
    await anon.delete("/health")  # 405: the router refuses it before naming the route
    response = await anon.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    text = response.text
    assert requests_total(text, "unmatched", "404") == 1
    assert requests_total(text, "unmatched", "405") == 1
    assert "process_resident_memory_bytes" in text
    openmetrics = await anon.get(
        "/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert openmetrics.headers["content-type"].startswith("application/openmetrics-text")
    assert openmetrics.text.endswith("# EOF\n")


@pytest.mark.slow
async def test_several_workers_share_their_counts(database_url: str, tmp_path: Path) -> None:
    """Two worker processes of the app (one port each here; behind one port in a real
    deployment) with one multiprocess directory: a scrape of either counts both."""
    shared = tmp_path / "prometheus"
    shared.mkdir()
    env = {
        "PROMETHEUS_MULTIPROC_DIR": str(shared),
        "SWITCHBOARD_DATABASE_URL": database_url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
        "SWITCHBOARD_SCHEDULER_ENABLED": "false",
    }
    spawned = await asyncio.gather(*(asyncio.to_thread(spawn, "switchboard", env) for _ in "ab"))
    workers = [server.process for server in spawned]
    ports = [server.port for server in spawned]
    try:
        async with httpx.AsyncClient() as client:
            for port, count in zip(ports, (3, 2), strict=True):
                for _ in range(count):
                    response = await client.get(f"http://127.0.0.1:{port}/health")
                    assert response.status_code == 200
            for port in ports:
                scraped = await client.get(f"http://127.0.0.1:{port}/metrics")
                assert scraped.status_code == 200
                assert requests_total(scraped.text, "/health") == 5
                # Per-process figures would be one worker's, summed they mean nothing.
                assert "process_resident_memory_bytes" not in scraped.text
                assert 'switchboard_db_pool_connections{state="open"}' in scraped.text
    finally:
        for worker in workers:
            worker.terminate()
        for worker in workers:
            await asyncio.to_thread(worker.wait, 30)
