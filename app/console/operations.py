"""The console's agent, skill and event-delivery pages: an agent's card, skills, breaker and
recent tasks with "discover card now"; the skill map; events with their deliveries and
"redeliver". Each form calls the service method the API's route calls, behind the same gate
and error pages as ConsoleController (app/console/__init__.py registers both)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode
from uuid import UUID

from litestar import Controller, get, post
from litestar.di import NamedDependency
from litestar.params import FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from app.agents.service import AgentService
from app.common.pagination import DEFAULT_LIMIT
from app.console.gate import require_admin
from app.console.pages import AnyRequest, choice, redirect_done, render_page
from app.console.reads import ConsoleReads
from app.errors import BadGateway, ValidationFailed
from app.events.schemas import EVENT_TYPES
from app.events.service import EventService

DELIVERY_STATES = ("pending", "delivered", "dead")
# What a redirect's ?done= says happened (a fixed word, never a value from the request):
# what went as asked, and what did not (shown as an alert, with the error the agent's row
# recorded).
OPERATIONS_DONE = {
    "discovered": "The card was fetched: its skills and A2A interface now route.",
    "redelivered": "Every delivery of the event is pending again, attempts from zero.",
}
OPERATIONS_PROBLEMS = {
    "card-unreachable": "The card could not be fetched; the agent is marked unreachable.",
    "card-invalid": "The card was fetched but cannot be used; the agent is marked invalid.",
    "no-url": "This agent has no URL to fetch a card from: set its url first.",
}


def _operations_page(request: AnyRequest, template: str, **context: Any) -> Template:
    done = request.query_params.get("done") or ""
    return render_page(
        request,
        template,
        done=OPERATIONS_DONE.get(done),
        problem=OPERATIONS_PROBLEMS.get(done),
        **context,
    )


class OperationsController(Controller):
    """Agent and skill pages, event deliveries, and their actions under /console."""

    path = "/console"
    include_in_schema = False

    # -- agents and skills -------------------------------------------------------------

    @get("/agents/{name:str}")
    async def agent(
        self, request: AnyRequest, name: FromPath[str], console_reads: NamedDependency[ConsoleReads]
    ) -> Template:
        """An agent: its registry entry, its A2A card as stored, its skills, its breaker and
        its recent tasks."""
        page = await console_reads.agent_page(name)
        return _operations_page(
            request,
            "agent.html",
            nav="agents",
            a=page.agent,
            card=page.card,
            breaker=page.breaker,
            tasks=page.tasks,
            tasks_query=urlencode({"agent": name}),
        )

    @post("/agents/{name:str}/discover", status_code=303)
    async def discover(
        self, request: AnyRequest, name: FromPath[str], agent_service: NamedDependency[AgentService]
    ) -> Redirect:
        """Fetch the agent's card now, as POST /v1/agents/{name}/discover does; a card that
        cannot be fetched (502) or used (422) is a message on the agent's page."""
        require_admin(request)
        page = f"/console/agents/{name}"
        try:
            await agent_service.discover(name)
        except BadGateway:
            return redirect_done(page, "card-unreachable")
        except ValidationFailed as exc:
            return redirect_done(
                page, "card-invalid" if "card_status" in exc.extensions else "no-url"
            )
        return redirect_done(page, "discovered")

    @get("/skills")
    async def skills(
        self, request: AnyRequest, agent_service: NamedDependency[AgentService]
    ) -> Template:
        """Every skill of an enabled agent with the agents offering it (GET /v1/skills)."""
        return _operations_page(
            request, "skills.html", nav="skills", skills=await agent_service.skill_map()
        )

    # -- event deliveries --------------------------------------------------------------

    @get("/deliveries")
    async def deliveries(
        self,
        request: AnyRequest,
        events: NamedDependency[EventService],
        delivery_state: Annotated[str | None, QueryParameter(name="state")] = None,
        event_type: Annotated[str | None, QueryParameter(name="type")] = None,
        cursor: FromQuery[str | None] = None,
    ) -> Template:
        """Events and their delivery to each subscriber, newest first, by delivery state
        and event type (GET /v1/events, with its cursors)."""
        state = choice(delivery_state, DELIVERY_STATES, "state")
        chosen_type = choice(event_type, EVENT_TYPES, "type")
        page = await events.deliveries(
            state, DEFAULT_LIMIT, cursor, None if chosen_type is None else [chosen_type]
        )
        query = {"state": state or "", "type": chosen_type or ""}
        return _operations_page(
            request,
            "deliveries.html",
            nav="deliveries",
            page=page,
            query=query,
            states=DELIVERY_STATES,
            types=EVENT_TYPES,
            next_query=urlencode({**query, "cursor": page.next_cursor or ""}),
        )

    @get("/deliveries/{event_id:uuid}")
    async def event(
        self, request: AnyRequest, event_id: FromPath[UUID], events: NamedDependency[EventService]
    ) -> Template:
        """An event: its payload and each delivery's attempts and last error. Admin only,
        as GET /v1/events and the subscriptions are: it names each subscriber's URL, which
        may carry a secret."""
        require_admin(request)
        return _operations_page(
            request, "delivery.html", nav="deliveries", e=await events.event(event_id)
        )

    @post("/deliveries/{event_id:uuid}/redeliver", status_code=303)
    async def redeliver(
        self, request: AnyRequest, event_id: FromPath[UUID], events: NamedDependency[EventService]
    ) -> Redirect:
        """Deliver the event again to every subscriber, as POST /v1/events/{id}/redeliver."""
        require_admin(request)
        await events.redeliver(event_id)
        return redirect_done(f"/console/deliveries/{event_id}", "redelivered")
