"""HTTP routes for the jobs: schedule, runs, manual runs (admin)."""

from __future__ import annotations

from typing import Annotated

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, QueryParameter
from litestar.status_codes import HTTP_200_OK

from app.auth.guards import admin_only
from app.common.pagination import DEFAULT_LIMIT, PageCursor, PageLimit
from app.jobs.schemas import JobInfo, JobRun, JobRunPage
from app.jobs.service import JobService

Jobs = NamedDependency[JobService]


class JobController(Controller):
    """The maintenance jobs: schedule, runs, manual runs (admin)."""

    path = "/v1/jobs"
    tags = ["jobs"]
    guards = [admin_only]

    @get("/", summary="Jobs, their schedule, last run and next run")
    async def jobs(self, job_service: Jobs) -> list[JobInfo]:
        """Every maintenance job."""
        return await job_service.jobs()

    @get("/{name:str}/runs", summary="A job's runs")
    async def runs(
        self,
        name: FromPath[str],
        job_service: Jobs,
        limit: PageLimit = DEFAULT_LIMIT,
        cursor: PageCursor = None,
    ) -> JobRunPage:
        """Runs newest first, with rows affected, status and errors."""
        return await job_service.runs(name, limit, cursor)

    @post("/{name:str}/run", status_code=HTTP_200_OK, summary="Run a job now")
    async def run(
        self,
        name: FromPath[str],
        job_service: Jobs,
        dry_run: Annotated[bool, QueryParameter(description="Count, change nothing.")] = False,
    ) -> JobRun:
        """Runs through the same claim as scheduled runs; returns the run record."""
        return await job_service.run_now(name, dry_run)
