"""``/health`` says the process is up; ``/ready`` says it can reach PostgreSQL."""

from __future__ import annotations

from typing import Any

from litestar import Controller, Response, get
from litestar.di import NamedDependency

from app.db.pool import Database
from app.errors import ServiceUnavailable


class HealthController(Controller):
    """Probes for load balancers and orchestrators; no key needed."""

    path = ""
    tags = ["health"]
    include_in_schema = True

    @get("/health", summary="Liveness")
    async def health(self) -> dict[str, str]:
        """The process is running."""
        return {"status": "ok"}

    @get("/ready", summary="Readiness")
    async def ready(self, database: NamedDependency[Database]) -> Response[dict[str, Any]]:
        """The database answers; 503 otherwise."""
        if not await database.ping():
            raise ServiceUnavailable("The database is not reachable.")
        return Response({"status": "ready", "database": "ok"})
