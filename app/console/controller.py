"""The console's pages and forms. Each handler reads its input, calls the service the API
calls for the same thing (a page that shows several services' answers calls ConsoleReads,
which calls them), and renders a template or redirects (post/redirect/get)."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, get_args
from urllib.parse import urlencode
from uuid import UUID

from litestar import Controller, get, post
from litestar.datastructures import Cookie
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, HeaderParameter, QueryParameter
from litestar.response import Redirect, Template

from app.agents.service import AgentService
from app.auth.keys import hash_key
from app.common.pagination import DEFAULT_LIMIT
from app.console.charts import overview_charts
from app.console.gate import (
    ConsoleAuth,
    Operator,
    client_address,
    logger,
    may_use_console,
    operator_of,
    require_admin,
    secure_request,
)
from app.console.pages import (
    AnyRequest,
    choice,
    form_int,
    form_text,
    parse_when,
    redirect_done,
    render_page,
)
from app.console.reads import DEFAULT_WINDOW, PAGE_ROWS, WINDOWS, ConsoleReads
from app.console.repository import SessionFilter
from app.console.session import COOKIE_NAME, COOKIE_PATH, LOGIN_COOKIE_NAME, same_token
from app.coordination.breaker_admin import BreakerAdmin
from app.coordination.escalation import EscalationService
from app.errors import BadRequest, Forbidden
from app.events.schemas import EVENT_TYPES
from app.events.streams import EventStreamResponse, EventStreams, parse_cursor, parse_types
from app.jobs.service import JobService
from app.sessions.lifecycle import SessionLifecycle
from app.sessions.schemas import Rollback, SessionStatus
from app.sessions.service import SessionService
from app.tasks.schemas import TERMINAL_STATUSES, TaskStatus
from app.tasks.service import TaskService

SESSION_STATUSES: tuple[str, ...] = get_args(SessionStatus)
TASK_STATUSES: tuple[str, ...] = get_args(TaskStatus)
# What the overview's live refresh listens for: every event that changes a count or chart
# it shows (a memory purge changes none). The other live pages ask /console/events for a
# subset of these (``?types=``); a session page follows its session's own stream.
LIVE_TYPES = frozenset(EVENT_TYPES) - {"memory.purged"}
# The events that change a task or a dead letter (the tasks, task and dead-letter pages).
TASK_LIVE_TYPES = "task.completed,task.dead_lettered,task.failed,task.transition"
# Every type a session's stream carries that changes what its page shows.
SESSION_LIVE_TYPES = ",".join(sorted(LIVE_TYPES - {"breaker.changed"}))
DEAD_LETTER_STATES = ("open", "requeued", "discarded", "all")
BREAKER_STATES = ("open", "closed")
# Where a task's cancel form sends the operator back to: its own page or the tasks list.
CANCEL_RETURNS = ("task", "tasks")


# A session action: given the operator and the form, call the service; the word for ?done=.
SessionAction = Callable[[Operator, Any], Awaitable[str]]


async def _on_session(
    request: AnyRequest, session_id: UUID, act: SessionAction, *, admin: bool = True
) -> Redirect:
    """The shape every session form shares: the role check (the admin key unless
    ``admin`` is false), the form, the service call, back to the session page."""
    operator = require_admin(request) if admin else operator_of(request)
    what = await act(operator, await request.form())
    return redirect_done(f"/console/sessions/{session_id}", what)


class ConsoleController(Controller):
    """Every console page under /console."""

    path = "/console"
    include_in_schema = False

    # -- signing in and out ------------------------------------------------------------

    @get("/login")
    async def login_form(
        self, request: AnyRequest, expired: FromQuery[str | None] = None
    ) -> Template:
        """The sign-in form, with a fresh double-submit token in a cookie of its own."""
        token = secrets.token_urlsafe(32)
        return Template(
            template_name="login.html",
            context={"login_token": token, "expired": expired == "1", "error": None},
            cookies=[self._login_cookie(request, token)],
        )

    @post("/login", status_code=303)
    async def login(self, request: AnyRequest) -> Template | Redirect:
        """Check the key as the API does and start a session; the key goes no further."""
        auth: ConsoleAuth = request.app.state.console_auth
        # A token is spent before the key is looked at (a 429 only for wrong keys would
        # confirm a right one) and before any await (attempts sent at once would all pass a
        # check made first); a key that signs in gets it back.
        address = client_address(request)
        auth.sign_in_failures.take(address)
        form = await request.form()
        if not same_token(form.get("login_token"), request.cookies.get(LOGIN_COOKIE_NAME, "")):
            raise Forbidden("The sign-in form's token is missing or wrong; reload the page.")
        sent = form.get("api_key")
        key = sent.strip() if isinstance(sent, str) else ""
        principal = await auth.agents.authenticate(hash_key(key)) if key else None
        if principal is None or not may_use_console(principal):
            logger.warning(
                "console: refused a sign-in from %s (unknown key, or not a console key)", address
            )
            token = secrets.token_urlsafe(32)
            return Template(
                template_name="login.html",
                context={
                    "login_token": token,
                    "expired": False,
                    "error": "That key cannot sign in here: it is unknown or revoked, or "
                    "neither the admin key nor a coordination_manager agent key.",
                },
                cookies=[self._login_cookie(request, token)],
                status_code=401,
            )
        auth.sign_in_failures.give_back(address)
        value, _ = auth.signer.issue(hash_key(key), auth.clock.now(), auth.session_seconds)
        return Redirect(
            "/console/",
            status_code=303,
            cookies=[
                Cookie(
                    key=COOKIE_NAME,
                    value=value,
                    path=COOKIE_PATH,
                    max_age=auth.session_seconds,
                    httponly=True,
                    secure=secure_request(request),
                    samesite="strict",
                ),
                Cookie(key=LOGIN_COOKIE_NAME, value="", path=COOKIE_PATH, max_age=0),
            ],
        )

    @post("/logout", status_code=303)
    async def logout(self, request: AnyRequest) -> Redirect:
        """End the session in this browser (the cookie is deleted)."""
        return Redirect(
            "/console/login",
            status_code=303,
            cookies=[
                Cookie(
                    key=COOKIE_NAME,
                    value="",
                    path=COOKIE_PATH,
                    max_age=0,
                    httponly=True,
                    secure=secure_request(request),
                    samesite="strict",
                )
            ],
        )

    @staticmethod
    def _login_cookie(request: AnyRequest, token: str) -> Cookie:
        return Cookie(
            key=LOGIN_COOKIE_NAME,
            value=token,
            path=COOKIE_PATH,
            max_age=3600,
            httponly=True,
            secure=secure_request(request),
            samesite="strict",
        )

    # -- overview ----------------------------------------------------------------------

    @get("/")
    async def overview(
        self,
        request: AnyRequest,
        console_reads: NamedDependency[ConsoleReads],
        window: FromQuery[str | None] = None,
    ) -> Template:
        """Agents and breakers, sessions, tasks, dead letters, jobs, undelivered events, and
        charts of the last hour (or 24 hours, ``?window=24h``)."""
        chosen = choice(window, tuple(WINDOWS), "window") or DEFAULT_WINDOW
        overview = await console_reads.overview(chosen)
        return render_page(
            request,
            "overview.html",
            nav="overview",
            o=overview,
            charts=overview_charts(overview),
            live_types=",".join(sorted(LIVE_TYPES)),
        )

    # No media_type here: the gate's redirect and the error pages answer from this route too,
    # in HTML; the stream sets text/event-stream itself.
    @get("/events")
    async def events(
        self,
        request: AnyRequest,
        streams: NamedDependency[EventStreams],
        last_event_id: Annotated[
            str | None, HeaderParameter(name="Last-Event-ID", required=False)
        ] = None,
        types: FromQuery[str | None] = None,
    ) -> EventStreamResponse:
        """The live refresh of the overview and the task pages: the events that change what
        they show (``?types=``: some of them), as Server-Sent Events, through the same hub
        and streams as GET /v1/events/stream (its limits per key count the operator's key
        under its own name: ``console:<name>``)."""
        operator = operator_of(request)
        cursor = parse_cursor(last_event_id, None)
        wanted = parse_types(types) or LIVE_TYPES
        if not wanted <= LIVE_TYPES:
            raise BadRequest(f"types may list only {', '.join(sorted(LIVE_TYPES))}.")
        stream = await streams.stream(f"console:{operator.principal.name}", wanted, cursor)
        return EventStreamResponse(stream)

    # -- sessions ----------------------------------------------------------------------

    @get("/sessions")
    async def sessions(
        self,
        request: AnyRequest,
        console_reads: NamedDependency[ConsoleReads],
        user: FromQuery[str | None] = None,
        status: FromQuery[str | None] = None,
        agent: FromQuery[str | None] = None,
        created_from: FromQuery[str | None] = None,
        created_until: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
        archived_cursor: FromQuery[str | None] = None,
    ) -> Template:
        """Search sessions of every user; the archive below, with restore."""
        where = SessionFilter(
            user=(user or "").strip() or None,
            status=choice(status, SESSION_STATUSES, "status"),
            agent=(agent or "").strip() or None,
            created_from=parse_when(created_from, "created_from"),
            created_until=parse_when(created_until, "created_until"),
        )
        found = await console_reads.search_sessions(where, DEFAULT_LIMIT, cursor)
        archived = await console_reads.archived_sessions(PAGE_ROWS, archived_cursor)
        query = {
            "user": user or "",
            "status": status or "",
            "agent": agent or "",
            "created_from": created_from or "",
            "created_until": created_until or "",
        }
        return render_page(
            request,
            "sessions.html",
            nav="sessions",
            found=found,
            archived=archived,
            query=query,
            statuses=SESSION_STATUSES,
            next_query=urlencode({**query, "cursor": found.next_cursor or ""}),
            archived_next_query=urlencode(
                {**query, "cursor": cursor or "", "archived_cursor": archived.next_cursor or ""}
            ),
        )

    @get("/sessions/{session_id:uuid}")
    async def session(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        console_reads: NamedDependency[ConsoleReads],
        old: Annotated[int | None, QueryParameter(ge=1)] = None,
        new: Annotated[int | None, QueryParameter(ge=1)] = None,
        versions_cursor: FromQuery[str | None] = None,
        memories_cursor: FromQuery[str | None] = None,
    ) -> Template:
        """A session: state, timeline, decisions, versions with a diff, branches, tasks, and
        the memories the operator's key sees for it (what the context endpoint gives)."""
        page = await console_reads.session_page(
            session_id,
            operator_of(request).principal,
            old,
            new,
            versions_cursor,
            memories_cursor,
        )
        return render_page(
            request,
            "session.html",
            nav="sessions",
            s=page.session,
            versions=page.versions,
            diff=page.diff,
            old=page.old,
            new=page.new,
            decisions=page.decisions,
            branches=page.branches,
            tasks=page.tasks,
            memories=page.memories,
            retention=page.retention,
            memories_cursor=memories_cursor,
            live_types=SESSION_LIVE_TYPES,
        )

    @get("/sessions/{session_id:uuid}/events")
    async def session_events(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        streams: NamedDependency[EventStreams],
        last_event_id: Annotated[
            str | None, HeaderParameter(name="Last-Event-ID", required=False)
        ] = None,
    ) -> EventStreamResponse:
        """A session page's live refresh: that session's events only (the stream of
        GET /v1/sessions/{id}/events, filtered on the server), under the operator's key."""
        operator = operator_of(request)
        cursor = parse_cursor(last_event_id, None)
        stream = await streams.session_stream(
            session_id, f"console:{operator.principal.name}", cursor
        )
        return EventStreamResponse(stream)

    @post("/sessions/{session_id:uuid}/rollback", status_code=303)
    async def rollback(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
    ) -> Redirect:
        """Write a new version equal to an older one, based on the version the page showed."""

        async def act(operator: Operator, form: Any) -> str:
            base = form_int(form, "base_version")
            rollback = Rollback(to_version=form_int(form, "to_version"), base_version=base)
            await session_service.rollback(session_id, rollback, {base}, operator.principal.name)
            return "rolled-back"

        return await _on_session(request, session_id, act)

    @post("/sessions/{session_id:uuid}/preserve", status_code=303)
    async def preserve(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        session_service: NamedDependency[SessionService],
    ) -> Redirect:
        """Keep a session past its expiry (or stop keeping it): the API's PATCH preserve."""

        async def act(operator: Operator, form: Any) -> str:
            keep = choice(form_text(form, "preserve"), ("true", "false"), "preserve") == "true"
            await session_service.patch_session(
                session_id,
                {"preserve": keep},
                {form_int(form, "base_version")},
                operator.principal.name,
            )
            return "preserved" if keep else "unpreserved"

        return await _on_session(request, session_id, act)

    @post("/sessions/{session_id:uuid}/resolve", status_code=303)
    async def resolve(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        escalation: NamedDependency[EscalationService],
    ) -> Redirect:
        """Resolve an escalated session with a note, as the API's resolve does (recorded,
        announced, its held tasks run): the admin key or a coordination_manager key."""

        async def act(operator: Operator, form: Any) -> str:
            note = form_text(form, "note", max_chars=2000)
            await escalation.resolve(session_id, note, operator.principal)
            return "resolved"

        return await _on_session(request, session_id, act, admin=False)

    @post("/sessions/{session_id:uuid}/restore", status_code=303)
    async def restore(
        self,
        request: AnyRequest,
        session_id: FromPath[UUID],
        session_lifecycle: NamedDependency[SessionLifecycle],
    ) -> Redirect:
        """Bring an archived session back while its recovery window is open."""

        async def act(_operator: Operator, _form: Any) -> str:
            await session_lifecycle.restore(session_id)
            return "restored"

        return await _on_session(request, session_id, act)

    # -- agents ------------------------------------------------------------------------

    @get("/agents")
    async def agents(
        self, request: AnyRequest, console_reads: NamedDependency[ConsoleReads]
    ) -> Template:
        """The registry with each agent's breaker."""
        return render_page(
            request, "agents.html", nav="agents", agents=await console_reads.agents()
        )

    @post("/agents/{name:str}/breaker", status_code=303)
    async def set_breaker(
        self, request: AnyRequest, name: FromPath[str], breaker_admin: NamedDependency[BreakerAdmin]
    ) -> Redirect:
        """Isolate an agent (open) or bring it back (closed) on every replica."""
        require_admin(request)
        form = await request.form()
        state = choice(form_text(form, "state"), BREAKER_STATES, "state")
        assert state is not None  # form_text refused an empty one
        await breaker_admin.set_breaker(name, state)
        return redirect_done("/console/agents", f"breaker-{state}")

    @post("/agents/{name:str}/rotate-key")
    async def rotate_key(
        self, request: AnyRequest, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> Template:
        """A new key for the agent, shown on this page once (the old one stops working)."""
        require_admin(request)
        rotated = await agent_service.rotate_key(name)
        return render_page(
            request, "rotated.html", nav="agents", agent=rotated.agent, api_key=rotated.api_key
        )

    # -- tasks and dead letters --------------------------------------------------------

    @get("/dead-letters")
    async def dead_letters(
        self,
        request: AnyRequest,
        tasks: NamedDependency[TaskService],
        letter_state: Annotated[str | None, QueryParameter(name="state")] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        """Dead letters by state, newest first."""
        chosen = choice(letter_state, DEAD_LETTER_STATES, "state") or "open"
        page = await tasks.dead_letters(chosen, DEFAULT_LIMIT, cursor)
        return render_page(
            request,
            "dead_letters.html",
            nav="dead-letters",
            page=page,
            state=chosen,
            states=DEAD_LETTER_STATES,
            live_types=TASK_LIVE_TYPES,
            next_query=urlencode({"state": chosen, "cursor": page.next_cursor or ""}),
        )

    @post("/dead-letters/{dead_letter_id:uuid}/requeue", status_code=303)
    async def requeue(
        self,
        request: AnyRequest,
        dead_letter_id: FromPath[UUID],
        tasks: NamedDependency[TaskService],
    ) -> Redirect:
        """Retry the failed task as a new one."""
        operator = require_admin(request)
        await tasks.requeue(dead_letter_id, operator.principal)
        return redirect_done("/console/dead-letters", "requeued")

    @post("/dead-letters/{dead_letter_id:uuid}/discard", status_code=303)
    async def discard(
        self,
        request: AnyRequest,
        dead_letter_id: FromPath[UUID],
        tasks: NamedDependency[TaskService],
    ) -> Redirect:
        """Give the dead letter up, with a reason (kept as the audit)."""
        operator = require_admin(request)
        form = await request.form()
        reason = form_text(form, "reason", required=False) or None
        await tasks.discard(dead_letter_id, operator.principal, reason)
        return redirect_done("/console/dead-letters", "discarded")

    @get("/tasks")
    async def tasks_list(
        self,
        request: AnyRequest,
        console_reads: NamedDependency[ConsoleReads],
        status: FromQuery[str | None] = None,
        agent: FromQuery[str | None] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        """Every task, filtered by status and agent, newest first."""
        chosen = choice(status, TASK_STATUSES, "status")
        name = (agent or "").strip() or None
        page = await console_reads.tasks(chosen, name, DEFAULT_LIMIT, cursor)
        query = {"status": chosen or "", "agent": name or ""}
        return render_page(
            request,
            "tasks.html",
            nav="tasks",
            page=page,
            query=query,
            statuses=TASK_STATUSES,
            over=TERMINAL_STATUSES,
            live_types=TASK_LIVE_TYPES,
            next_query=urlencode({**query, "cursor": page.next_cursor or ""}),
        )

    @get("/tasks/{task_id:uuid}")
    async def task(
        self, request: AnyRequest, task_id: FromPath[UUID], tasks: NamedDependency[TaskService]
    ) -> Template:
        """One task: input, result, error, trace id and its transitions."""
        detail = await tasks.detail(task_id, operator_of(request).principal)
        return render_page(
            request,
            "task.html",
            nav="tasks",
            d=detail,
            over=TERMINAL_STATUSES,
            live_types=TASK_LIVE_TYPES,
        )

    @post("/tasks/{task_id:uuid}/cancel", status_code=303)
    async def cancel_task(
        self, request: AnyRequest, task_id: FromPath[UUID], tasks: NamedDependency[TaskService]
    ) -> Redirect:
        """Cancel a task that is not over, as POST /v1/tasks/{id}/cancel does (its running
        attempt stops; the transition records who and why); 409 page once it is over."""
        operator = require_admin(request)
        form = await request.form()
        reason = form_text(form, "reason", required=False) or None
        back = choice(form_text(form, "back", required=False), CANCEL_RETURNS, "back")
        # Every field is read before the task is touched: a bad one changes nothing.
        status = choice(form_text(form, "status", required=False), TASK_STATUSES, "status")
        agent = form_text(form, "agent", required=False, max_chars=200)
        await tasks.cancel(task_id, operator.principal, reason)
        if back == "tasks":
            return redirect_done("/console/tasks", "canceled", status=status or "", agent=agent)
        return redirect_done(f"/console/tasks/{task_id}", "canceled")

    # -- jobs --------------------------------------------------------------------------

    @get("/jobs")
    async def jobs(self, request: AnyRequest, job_service: NamedDependency[JobService]) -> Template:
        """Every job with its last run and next slot."""
        return render_page(request, "jobs.html", nav="jobs", jobs=await job_service.jobs())

    @get("/jobs/{name:str}")
    async def job_runs(
        self,
        request: AnyRequest,
        name: FromPath[str],
        job_service: NamedDependency[JobService],
        cursor: FromQuery[str | None] = None,
        run: FromQuery[str | None] = None,
    ) -> Template:
        """A job's runs with their counts and errors, newest first (``run``: the one just
        started from the console, highlighted)."""
        job = job_service.job(name)
        runs = await job_service.runs(name, DEFAULT_LIMIT, cursor)
        return render_page(
            request,
            "job.html",
            nav="jobs",
            job=job,
            runs=runs,
            request_run=run,
            next_query=urlencode({"cursor": runs.next_cursor or ""}),
        )

    @post("/jobs/{name:str}/run", status_code=303)
    async def run_job(
        self, request: AnyRequest, name: FromPath[str], job_service: NamedDependency[JobService]
    ) -> Redirect:
        """Run a job now; a dry run counts what it would do and changes nothing (a
        coordination_manager key may run dry only)."""
        form = await request.form()
        dry_run = choice(form_text(form, "dry_run"), ("true", "false"), "dry_run") == "true"
        if not dry_run:
            require_admin(request)
        job_service.job(name)
        run = await job_service.run_now(name, dry_run)
        return Redirect(
            f"/console/jobs/{name}?{urlencode({'run': str(run.run_id)})}", status_code=303
        )
