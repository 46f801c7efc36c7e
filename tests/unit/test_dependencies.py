"""No route has Litestar resolve its dependencies in an anyio task group.

Litestar resolves a handler's dependencies batch by batch; a batch of two or more
independent ones is resolved in a task group of its own, one task spawned per dependency
per request (``KwargsModel.resolve_dependencies``; 6 % of a webhook's CPU in the profile,
docs/benchmarks.md). The services are process singletons, so each handler asks for one
object: its feature's service, or the object that gathers what a page needs (the console's
``ConsoleReads``, ``Metrics``, ``WebhookService``)."""

from __future__ import annotations

from typing import Any

import pytest
from litestar._kwargs import kwargs_model
from litestar.routes import HTTPRoute

from app.asgi import create_app
from app.settings import Settings


async def test_no_route_opens_a_task_group_for_its_dependencies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every route of the app, the console's and ``/metrics`` included, through Litestar's
    own resolution of its dependencies (what each request runs before its handler)."""
    settings = Settings()
    settings.console.enabled = True
    settings.server.metrics_enabled = True
    app = create_app(
        settings,
        database_url="postgresql://unused@127.0.0.1/unused",
        admin_key="k" * 40,
        run_scheduler=False,
        run_worker=False,
    )
    opened: list[object] = []
    original = kwargs_model.create_task_group

    def counted() -> Any:
        opened.append(object())
        return original()

    monkeypatch.setattr(kwargs_model, "create_task_group", counted)
    routes = [
        (f"{method} {route.path}", model)
        for route in app.routes
        if isinstance(route, HTTPRoute)
        for method, (_, model) in route.route_handler_map.items()
    ]
    assert len(routes) > 200
    spawned = []
    for name, model in routes:
        before = len(opened)
        # None of the app's dependencies reads the connection (each is a process singleton).
        await model.resolve_dependencies(None, {})  # type: ignore[arg-type]
        if len(opened) > before:
            spawned.append(name)
    assert spawned == []
