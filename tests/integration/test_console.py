"""The operator console over plain HTTP: sign-in, the cookie, CSRF, expiry, roles, and the
pages and actions against the real services (tests/integration/test_console_browser.py
drives the same console in a real Chromium)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest
from litestar import Litestar

from app.clock import Clock, FrozenClock
from app.console import repository as repo
from app.console.reads import window_bounds
from app.db.pool import Database
from app.events.service import EventService
from app.outbound.policy import OutboundPolicy
from app.outbound.transport import outbound_client
from app.settings import (
    ConsoleSettings,
    DatabaseSettings,
    SchedulerSettings,
    ServerSettings,
    Settings,
)
from tests.a2a_agent import A2AAgent
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, LOOPBACK_ALLOWED, same_app_client
from tests.integration.helpers import create_session, create_user, if_match, served

SESSION_SECONDS = 600


@pytest.fixture
def clock(frozen_clock: FrozenClock) -> Clock:
    return frozen_clock


@pytest.fixture
def settings() -> Settings:
    return Settings(outbound=LOOPBACK_ALLOWED, console=ConsoleSettings(session_seconds=600))


def _token(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]+)"', html)
    assert found, f"no {name} in the page"
    return found.group(1)


async def sign_in(browser: httpx.AsyncClient, key: str) -> httpx.Response:
    """Load the sign-in form and send it with ``key``, as a browser would."""
    form = await browser.get("/console/login")
    assert form.status_code == 200
    return await browser.post(
        "/console/login",
        data={"login_token": _token(form.text, "login_token"), "api_key": key},
    )


@pytest.fixture
async def browser(app: Litestar, client: httpx.AsyncClient) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client that sends no API key (the console ignores one anyway)."""
    async with same_app_client(app) as anonymous:
        yield anonymous


@pytest.fixture
async def admin(browser: httpx.AsyncClient) -> httpx.AsyncClient:
    """``browser`` signed in with the admin key."""
    answer = await sign_in(browser, ADMIN_KEY)
    assert answer.status_code == 303, answer.text
    return browser


async def csrf_of(browser: httpx.AsyncClient, page: str = "/console/") -> str:
    answer = await browser.get(page)
    assert answer.status_code == 200, answer.text
    return _token(answer.text, "csrf_token")


async def make_agent(client: httpx.AsyncClient, name: str, roles: list[str]) -> str:
    answer = await client.post("/v1/agents", json={"name": name, "roles": roles})
    assert answer.status_code == 201, answer.text
    key: str = answer.json()["api_key"]
    return key


# -- signing in ----------------------------------------------------------------------------


async def test_pages_send_a_visitor_without_a_session_to_the_sign_in_form(
    browser: httpx.AsyncClient,
) -> None:
    for page in ("/console/", "/console/sessions", "/console/agents", "/console/jobs"):
        answer = await browser.get(page)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/console/login"


async def test_every_console_route_needs_a_session(
    running_app: Litestar, browser: httpx.AsyncClient
) -> None:
    """Enumerates the app's routes, so a new console page cannot forget the sign-in check."""
    samples = {"uuid": "00000000-0000-7000-8000-000000000000", "int": "1", "str": "sample"}
    checked = 0
    for route in running_app.routes:
        if not route.path.startswith("/console") or route.path.startswith(
            ("/console/login", "/console/static")
        ):
            continue
        path = re.sub(r"\{\w+:(\w+)\}", lambda m: samples[m.group(1)], route.path)
        for method in sorted(getattr(route, "methods", set()) - {"OPTIONS", "HEAD"}):
            answer = await browser.request(method, path, data={"csrf_token": "x"})
            if method == "GET":
                assert answer.status_code == 303, (method, route.path)
                assert answer.headers["location"] == "/console/login"
            else:
                assert answer.status_code == 401, (method, route.path, answer.status_code)
            checked += 1
    assert checked >= 15


async def test_an_api_key_header_does_not_open_the_console(browser: httpx.AsyncClient) -> None:
    answer = await browser.get("/console/", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"


async def test_signing_in_sets_a_strict_http_only_expiring_cookie(
    browser: httpx.AsyncClient,
) -> None:
    answer = await sign_in(browser, ADMIN_KEY)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/"
    cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("sb_console="))
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/console", f"max-age={SESSION_SECONDS}"} <= (
        attributes
    )
    assert "secure" not in attributes  # plain http here; see the https test
    assert ADMIN_KEY not in cookie
    page = await browser.get("/console/")
    assert page.status_code == 200
    assert "Signed in as <strong>admin</strong>" in page.text
    assert ADMIN_KEY not in page.text
    assert page.headers["cache-control"] == "no-store"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]


async def test_the_cookie_is_secure_over_https(app: Litestar, client: httpx.AsyncClient) -> None:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://console.example"
    ) as secure:
        answer = await sign_in(secure, ADMIN_KEY)
    cookie = next(c for c in answer.headers.get_list("set-cookie") if c.startswith("sb_console="))
    assert "secure" in {part.strip().lower() for part in cookie.split(";")}


async def test_a_wrong_key_is_refused_without_echoing_it(browser: httpx.AsyncClient) -> None:
    answer = await sign_in(browser, "sb_not-a-key-of-this-server-123")
    assert answer.status_code == 401
    assert "sb_not-a-key-of-this-server-123" not in answer.text
    assert not any(c.startswith("sb_console=") for c in answer.headers.get_list("set-cookie"))
    assert (await browser.get("/console/")).status_code == 303


async def test_the_sign_in_form_needs_its_own_token(browser: httpx.AsyncClient) -> None:
    await browser.get("/console/login")
    for token in (None, "forged"):
        data = {"api_key": ADMIN_KEY} | ({"login_token": token} if token else {})
        answer = await browser.post("/console/login", data=data)
        assert answer.status_code == 403
        assert "token" in answer.text
        assert answer.headers["content-type"].startswith("text/html")


async def test_an_agent_key_without_the_role_cannot_sign_in(
    browser: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    key = await make_agent(client, "plain-agent", [])
    assert (await sign_in(browser, key)).status_code == 401


async def test_a_coordination_manager_reads_and_runs_dry_but_changes_nothing(
    browser: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    key = await make_agent(client, "n8n-ops", ["coordination_manager"])
    assert (await sign_in(browser, key)).status_code == 303
    page = await browser.get("/console/agents")
    assert page.status_code == 200
    assert "(read-mostly)" in page.text
    assert "Open breaker" not in page.text  # no buttons it may not press
    csrf = _token(page.text, "csrf_token")
    refused = await browser.post(
        "/console/agents/n8n-ops/breaker", data={"csrf_token": csrf, "state": "open"}
    )
    assert refused.status_code == 403
    assert (await client.get("/v1/agents/n8n-ops/breaker")).json()["state"] == "closed"
    real_run = await browser.post(
        "/console/jobs/housekeeping/run", data={"csrf_token": csrf, "dry_run": "false"}
    )
    assert real_run.status_code == 403
    dry = await browser.post(
        "/console/jobs/housekeeping/run", data={"csrf_token": csrf, "dry_run": "true"}
    )
    assert dry.status_code == 303
    runs = (await client.get("/v1/jobs/housekeeping/runs")).json()["items"]
    assert [run["dry_run"] for run in runs] == [True]


async def test_a_rotated_key_ends_its_console_session(
    browser: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    key = await make_agent(client, "n8n-ops", ["coordination_manager"])
    assert (await sign_in(browser, key)).status_code == 303
    assert (await browser.get("/console/")).status_code == 200
    assert (await client.post("/v1/agents/n8n-ops/key")).status_code == 201
    answer = await browser.get("/console/")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"


async def test_a_tampered_cookie_is_no_session(admin: httpx.AsyncClient) -> None:
    value = admin.cookies["sb_console"]
    body, mac = value.split(".")
    admin.cookies.set("sb_console", body + "." + mac[::-1], path="/console")
    answer = await admin.get("/console/")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"


async def test_an_expired_session_is_refused(
    admin: httpx.AsyncClient, frozen_clock: FrozenClock
) -> None:
    csrf = await csrf_of(admin)
    frozen_clock.advance(timedelta(seconds=SESSION_SECONDS + 1))
    page = await admin.get("/console/")
    assert page.status_code == 303
    assert page.headers["location"] == "/console/login?expired=1"
    form = await admin.get(page.headers["location"])
    assert "session has expired" in form.text
    action = await admin.post(
        "/console/agents/x/breaker", data={"csrf_token": csrf, "state": "open"}
    )
    assert action.status_code == 401
    assert "expired" in action.text


async def test_sign_out_deletes_the_cookie(admin: httpx.AsyncClient) -> None:
    csrf = await csrf_of(admin)
    answer = await admin.post("/console/logout", data={"csrf_token": csrf})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/login"
    assert (await admin.get("/console/")).status_code == 303


# -- CSRF ----------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, "", "not-the-token"])
async def test_a_form_without_the_right_csrf_token_is_refused(
    admin: httpx.AsyncClient, client: httpx.AsyncClient, token: str | None
) -> None:
    await make_agent(client, "worker-1", [])
    data: dict[str, Any] = {"state": "open"} | ({"csrf_token": token} if token is not None else {})
    answer = await admin.post("/console/agents/worker-1/breaker", data=data)
    assert answer.status_code == 403
    assert "CSRF" in answer.text
    assert (await client.get("/v1/agents/worker-1/breaker")).json()["state"] == "closed"


async def test_the_csrf_token_of_another_session_is_refused(
    app: Litestar, admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "worker-1", [])
    async with same_app_client(app) as other:
        await sign_in(other, ADMIN_KEY)
        foreign = await csrf_of(other)
    answer = await admin.post(
        "/console/agents/worker-1/breaker", data={"csrf_token": foreign, "state": "open"}
    )
    assert answer.status_code == 403


# -- pages and actions ---------------------------------------------------------------------


async def test_the_console_is_not_in_the_openapi_document(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/schema/openapi.json")).json()["paths"]
    assert not [path for path in paths if path.startswith("/console")]


async def test_static_files_are_served_from_the_package(browser: httpx.AsyncClient) -> None:
    css = await browser.get("/console/static/console.css")
    assert css.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    js = await browser.get("/console/static/console.js")
    assert js.status_code == 200
    assert "data-confirm" in js.text


async def test_overview_counts_what_the_database_holds(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    await create_session(client)
    await create_session(client)
    await make_agent(client, "worker-1", [])
    page = await admin.get("/console/")
    assert page.status_code == 200
    sessions = re.search(r"Sessions by status</caption>(.*?)</table>", page.text, re.S)
    assert sessions is not None
    assert re.search(r"badge-active\">active</span></th><td class=\"num\">2<", sessions.group(1))
    assert "worker-1" in page.text
    assert "housekeeping" in page.text


async def test_session_search_filters_by_external_ref_and_status(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    alice = await create_user(client, "alice@example")
    mine = await create_session(client, user_id=alice)
    other = await create_session(client)
    page = await admin.get("/console/sessions", params={"user": "alice@example"})
    assert mine["session_id"] in page.text
    assert other["session_id"] not in page.text
    none = await admin.get("/console/sessions", params={"user": "alice@example", "status": "idle"})
    assert mine["session_id"] not in none.text
    by_id = await admin.get("/console/sessions", params={"user": alice})
    assert mine["session_id"] in by_id.text


async def test_session_search_pages_with_cursors(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    user = await create_user(client, "many@example")
    made = [(await create_session(client, user_id=user))["session_id"] for _ in range(52)]
    first = await admin.get("/console/sessions", params={"user": "many@example"})
    next_link = re.search(r'href="/console/sessions\?([^"]+)" rel="next"', first.text)
    assert next_link is not None
    second = await admin.get("/console/sessions?" + next_link.group(1).replace("&amp;", "&"))
    shown = set(re.findall(r"/console/sessions/([0-9a-f-]{36})", first.text + second.text))
    assert shown == set(made)


async def test_bad_filters_get_a_clear_400_page(admin: httpx.AsyncClient) -> None:
    for params in ({"status": "sleeping"}, {"created_from": "yesterday"}, {"cursor": "bogus"}):
        answer = await admin.get("/console/sessions", params=params)
        assert answer.status_code == 400, params
        assert answer.headers["content-type"].startswith("text/html")
    assert (await admin.get("/console/sessions/not-a-uuid")).status_code in (400, 404)
    missing = await admin.get("/console/sessions/0190c6c0-0000-7000-8000-000000000000")
    assert missing.status_code == 404
    assert "No session" in missing.text


async def test_session_page_shows_a_diff_and_rolls_back(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    session = await create_session(client)
    sid = session["session_id"]
    patched = await client.patch(
        f"/v1/sessions/{sid}",
        json={"session_state": {"active_process": "billing-dispute"}, "priority": "high"},
        headers={"Content-Type": "application/merge-patch+json", **if_match(1)},
    )
    assert patched.status_code == 200, patched.text
    page = await admin.get(f"/console/sessions/{sid}", params={"old": 1, "new": 2})
    assert page.status_code == 200
    assert "From version 1 to version 2" in page.text
    assert "session_state.active_process" in page.text
    assert "billing-dispute" in page.text
    assert re.search(r'<td class="mono">priority</td><td>changed</td>', page.text)
    csrf = _token(page.text, "csrf_token")
    stale = await admin.post(
        f"/console/sessions/{sid}/rollback",
        data={"csrf_token": csrf, "to_version": "1", "base_version": "1"},
    )
    assert stale.status_code == 409  # the page showed version 1; it is at 2 now
    done = await admin.post(
        f"/console/sessions/{sid}/rollback",
        data={"csrf_token": csrf, "to_version": "1", "base_version": "2"},
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/console/sessions/{sid}?done=rolled-back"
    now = (await client.get(f"/v1/sessions/{sid}")).json()
    assert now["version"] == 3
    assert now["priority"] == session["priority"]
    versions = (await client.get(f"/v1/sessions/{sid}/versions")).json()["items"]
    assert versions[0]["change_reason"] == "rollback to version 1"
    assert versions[0]["changed_by"] == "admin"


async def test_preserve_goes_through_the_session_service(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    sid = (await create_session(client))["session_id"]
    csrf = await csrf_of(admin, f"/console/sessions/{sid}")
    answer = await admin.post(
        f"/console/sessions/{sid}/preserve",
        data={"csrf_token": csrf, "preserve": "true", "base_version": "1"},
    )
    assert answer.status_code == 303
    assert (await client.get(f"/v1/sessions/{sid}")).json()["preserve"] is True
    bad = await admin.post(
        f"/console/sessions/{sid}/preserve",
        data={"csrf_token": csrf, "preserve": "maybe", "base_version": "2"},
    )
    assert bad.status_code == 400


async def test_breaker_open_and_close(admin: httpx.AsyncClient, client: httpx.AsyncClient) -> None:
    await make_agent(client, "worker-1", [])
    csrf = await csrf_of(admin, "/console/agents")
    opened = await admin.post(
        "/console/agents/worker-1/breaker", data={"csrf_token": csrf, "state": "open"}
    )
    assert opened.status_code == 303
    assert (await client.get("/v1/agents/worker-1/breaker")).json()["state"] == "forced_open"
    page = await admin.get(opened.headers["location"])
    assert "The breaker is open" in page.text
    closed = await admin.post(
        "/console/agents/worker-1/breaker", data={"csrf_token": csrf, "state": "closed"}
    )
    assert closed.status_code == 303
    assert (await client.get("/v1/agents/worker-1/breaker")).json()["state"] == "closed"
    unknown = await admin.post(
        "/console/agents/nobody/breaker", data={"csrf_token": csrf, "state": "open"}
    )
    assert unknown.status_code == 404


async def test_key_rotation_shows_the_new_key_once(
    admin: httpx.AsyncClient, client: httpx.AsyncClient, app: Litestar
) -> None:
    old_key = await make_agent(client, "worker-1", [])
    csrf = await csrf_of(admin, "/console/agents")
    answer = await admin.post("/console/agents/worker-1/rotate-key", data={"csrf_token": csrf})
    assert answer.status_code == 200
    assert answer.headers["cache-control"] == "no-store"
    new_key = re.search(r'id="new-key"[^>]*value="([^"]+)"', answer.text)
    assert new_key is not None
    # The new key authenticates (403: an agent may not read the registry), the old does not.
    async with same_app_client(app, {"X-API-Key": new_key.group(1)}) as agent:
        assert (await agent.get("/v1/agents/worker-1")).status_code == 403
    async with same_app_client(app, {"X-API-Key": old_key}) as agent:
        assert (await agent.get("/v1/agents/worker-1")).status_code == 401
    assert new_key.group(1) not in (await admin.get("/console/agents")).text


async def test_jobs_page_and_dry_run(admin: httpx.AsyncClient, client: httpx.AsyncClient) -> None:
    csrf = await csrf_of(admin, "/console/jobs")
    answer = await admin.post(
        "/console/jobs/housekeeping/run", data={"csrf_token": csrf, "dry_run": "true"}
    )
    assert answer.status_code == 303
    run_id = answer.headers["location"].split("run=")[1]
    page = await admin.get(answer.headers["location"])
    assert f'id="run-{run_id}" class="highlight"' in page.text
    unknown = await admin.post(
        "/console/jobs/nope/run", data={"csrf_token": csrf, "dry_run": "true"}
    )
    assert unknown.status_code == 404


async def test_tasks_are_listed_and_filtered(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    for name in ("worker-1", "worker-2"):
        made = await client.post("/v1/agents", json={"name": name, "url": "http://127.0.0.1:9/"})
        assert made.status_code == 201, made.text
    submitted = {}
    for name in ("worker-1", "worker-1", "worker-2"):
        task = await client.post("/v1/tasks", json={"agent_name": name, "input": {"q": 1}})
        assert task.status_code == 201, task.text
        submitted[task.json()["task_id"]] = name
    page = await admin.get("/console/tasks", params={"agent": "worker-1", "status": "submitted"})
    assert page.status_code == 200
    shown = set(re.findall(r'href="/console/tasks/([0-9a-f-]{36})"', page.text))
    assert shown == {task for task, name in submitted.items() if name == "worker-1"}
    none = await admin.get("/console/tasks", params={"status": "completed"})
    assert not re.findall(r'href="/console/tasks/([0-9a-f-]{36})"', none.text)
    one = next(iter(submitted))
    detail = await admin.get(f"/console/tasks/{one}")
    assert detail.status_code == 200
    assert "&#34;q&#34;: 1" in detail.text or '"q": 1' in detail.text
    assert (await admin.get("/console/tasks", params={"status": "asleep"})).status_code == 400


async def test_an_escalation_is_resolved_with_a_note(
    browser: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    """Through the API's EscalationService; a coordination_manager key may do it too."""
    sid = (await create_session(client))["session_id"]
    manager = await make_agent(client, "n8n-ops", ["coordination_manager"])
    assert (await sign_in(browser, manager)).status_code == 303
    page = await browser.get(f"/console/sessions/{sid}")
    assert 'action="/console/sessions/' + sid + '/resolve"' not in page.text  # not escalated
    csrf = _token(page.text, "csrf_token")
    early = await browser.post(
        f"/console/sessions/{sid}/resolve", data={"csrf_token": csrf, "note": "nothing to do"}
    )
    assert early.status_code == 409
    escalated = await client.patch(
        f"/v1/sessions/{sid}",
        json={"status": "escalated"},
        headers={"Content-Type": "application/merge-patch+json", **if_match(1)},
    )
    assert escalated.status_code == 200, escalated.text
    page = await browser.get(f"/console/sessions/{sid}")
    assert 'action="/console/sessions/' + sid + '/resolve"' in page.text
    empty = await browser.post(
        f"/console/sessions/{sid}/resolve", data={"csrf_token": csrf, "note": "  "}
    )
    assert empty.status_code == 400
    done = await browser.post(
        f"/console/sessions/{sid}/resolve",
        data={"csrf_token": csrf, "note": "refund issued by hand"},
    )
    assert done.status_code == 303
    assert done.headers["location"] == f"/console/sessions/{sid}?done=resolved"
    assert (await client.get(f"/v1/sessions/{sid}")).json()["status"] == "active"
    decisions = (await client.get(f"/v1/sessions/{sid}/decisions")).json()["items"]
    assert any("refund issued by hand" in str(decision) for decision in decisions)


# -- charts ------------------------------------------------------------------------------


async def _seed_activity(database_url: str, session_id: str, now: Any) -> None:
    """Decisions, breaker events and finished tasks at known times around ``now``."""
    conn = await asyncpg.connect(database_url)
    try:

        async def decide(at: Any, outcome: str) -> None:
            await conn.execute(
                "INSERT INTO coordination_decisions (session_id, message, classifier, intents,"
                " outcome, degraded, response, execution_time_ms, created_by, created_at)"
                " VALUES ($1, 'hi', 'keywords', '[]', $2, false, '{}', 1, 'test', $3)",
                UUID(session_id),
                outcome,
                at,
            )

        async def breaker(at: Any, state: str) -> None:
            await conn.execute(
                "INSERT INTO outbox_events (event_type, payload, created_at)"
                " VALUES ('breaker.changed', jsonb_build_object('state', $1::text), $2)",
                state,
                at,
            )

        async def task(at: Any, status: str) -> None:
            task_id = await conn.fetchval(
                "INSERT INTO agent_tasks (agent_name, kind, input, created_by)"
                " VALUES ('worker', 'message', '{}', 'test') RETURNING task_id"
            )
            # Through the states the transition trigger allows: submitted, working, done.
            await conn.execute(
                "UPDATE agent_tasks SET status = 'working', started_at = $2 WHERE task_id = $1",
                task_id,
                at,
            )
            await conn.execute(
                "UPDATE agent_tasks SET status = $2, finished_at = $3 WHERE task_id = $1",
                task_id,
                status,
                at,
            )

        minute = timedelta(minutes=1)
        await decide(now - 2 * minute, "agent")  # the bucket now falls in
        await decide(now - 2 * minute, "fallback")
        await decide(now - 12 * minute, "agent")  # two buckets back
        await decide(now - 2 * timedelta(hours=1), "agent")  # outside the hour
        await breaker(now - 7 * minute, "open")
        await breaker(now - 6 * minute, "closed")  # a close is not a trip
        await task(now - minute, "completed")
        await task(now - minute, "failed")
        await task(now - 30 * minute, "completed")
    finally:
        await conn.close()


async def test_activity_buckets_count_real_rows(
    client: httpx.AsyncClient, database_url: str, frozen_clock: FrozenClock
) -> None:
    session = await create_session(client)
    start = frozen_clock.now()  # 12:00 sharp: the last 5-minute bucket is [12:00, 12:05)
    now = start + timedelta(minutes=3)
    await _seed_activity(database_url, session["session_id"], now)
    conn = await asyncpg.connect(database_url)
    try:
        buckets = await repo.activity_series(conn, *window_bounds(now, "1h"))
        day = await repo.activity_series(conn, *window_bounds(now, "24h"))
    finally:
        await conn.close()
    assert len(buckets) == 12
    assert buckets[-1].bucket == start
    assert buckets[0].bucket == start - timedelta(minutes=55)
    by_start = {b.bucket: b for b in buckets}
    last = by_start[start]
    assert (last.decisions, last.fallbacks, last.completed, last.failed) == (2, 1, 1, 1)
    assert by_start[start - timedelta(minutes=10)].decisions == 1
    assert by_start[start - timedelta(minutes=5)].trips == 1
    assert by_start[start - timedelta(minutes=30)].completed == 1
    assert sum(b.decisions for b in buckets) == 3
    assert sum(b.trips for b in buckets) == 1
    assert sum(b.fallbacks + b.failed for b in buckets) == 2
    # A day in hours: the last bucket is [12:00, 13:00); 11:51 and 10:03 fall before it.
    assert len(day) == 24
    assert day[-1].bucket == start
    assert [b.decisions for b in day[-3:]] == [1, 1, 2]
    assert sum(b.decisions for b in day) == 4


async def test_overview_draws_the_charts(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    page = await admin.get("/console/?window=24h")
    assert page.status_code == 200
    assert page.text.count('<svg class="chart" role="img"') == 5
    assert "Messages routed, per hour" in page.text
    assert 'aria-current="page">24 hours' in page.text
    bad = await admin.get("/console/?window=7d")
    assert bad.status_code == 400
    assert "window must be one of 1h, 24h" in bad.text


# -- agents, cards and skills (app/console/operations.py) ----------------------------------

CARD = {
    "name": "Budget_Agent",
    "description": "Plans budgets",
    "url": "http://127.0.0.1:9/agent",
    "version": "1.0.0",
    "skills": [
        {
            "id": "budgeting",
            "name": "Budgeting",
            "description": "Monthly budgets",
            "tags": ["money"],
        }
    ],
}


async def test_agent_page_shows_registry_card_skills_breaker_and_tasks(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "Budget_Agent", [])
    published = await client.post("/v1/agents/Budget_Agent/card", json=CARD)
    assert published.status_code == 200, published.text
    listing = await admin.get("/console/agents")
    assert 'href="/console/agents/Budget_Agent"' in listing.text
    page = await admin.get("/console/agents/Budget_Agent")
    assert page.status_code == 200, page.text
    assert "<h1>Agent Budget_Agent</h1>" in page.text
    assert 'class="badge badge-published">published' in page.text
    assert '<td class="mono">budgeting</td>' in page.text
    assert '"description": "Plans budgets"' in page.text  # the stored card, as JSON
    assert 'class="badge badge-closed">closed' in page.text
    assert "No tasks for this agent." in page.text
    assert "Discover card now" in page.text
    skills = await admin.get("/console/skills")
    assert skills.status_code == 200
    assert '<td class="mono">budgeting</td>' in skills.text
    assert '<a href="/console/agents/Budget_Agent">Budget_Agent</a>' in skills.text
    assert (await admin.get("/console/agents/Nobody")).status_code == 404


async def test_discover_now_fetches_a_real_a2a_card(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    server = await A2AAgent().start()
    try:
        await make_agent(client, "Plan_Agent", [])
        patched = await client.patch("/v1/agents/Plan_Agent", json={"url": server.url})
        assert patched.status_code == 200, patched.text
        csrf = await csrf_of(admin, "/console/agents/Plan_Agent")
        sent = await admin.post("/console/agents/Plan_Agent/discover", data={"csrf_token": csrf})
        assert sent.status_code == 303
        assert sent.headers["location"] == "/console/agents/Plan_Agent?done=discovered"
        assert server.card_fetches == 1
        base = server.url
    finally:
        await server.stop()
    page = await admin.get(sent.headers["location"])
    assert "The card was fetched" in page.text
    assert 'class="badge badge-discovered">discovered' in page.text
    assert f"{base}/a2a (protocol 1.0)" in page.text
    assert '<td class="mono">a2a_budgeting</td>' in page.text
    agent = (await client.get("/v1/agents/Plan_Agent")).json()
    assert agent["card_status"] == "discovered"
    assert agent["a2a_url"] == base + "/a2a"


async def test_discover_failures_are_messages_on_the_agent_page(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    """The API's 422 (no url, a card it cannot use) and 502 (unreachable) become a readable
    alert on the page, with the error recorded on the agent."""
    await make_agent(client, "Plan_Agent", [])
    csrf = await csrf_of(admin)
    no_url = await admin.post("/console/agents/Plan_Agent/discover", data={"csrf_token": csrf})
    assert no_url.headers["location"] == "/console/agents/Plan_Agent?done=no-url"
    page = await admin.get(no_url.headers["location"])
    assert page.status_code == 200
    assert 'role="alert"' in page.text
    assert "has no URL to fetch a card from" in page.text

    server = await A2AAgent(card_mode="no_interface").start()
    try:
        await client.patch("/v1/agents/Plan_Agent", json={"url": server.url})
        invalid = await admin.post("/console/agents/Plan_Agent/discover", data={"csrf_token": csrf})
        assert invalid.headers["location"] == "/console/agents/Plan_Agent?done=card-invalid"
        page = await admin.get(invalid.headers["location"])
        assert "cannot be used; the agent is marked invalid" in page.text
        assert "declares no JSON-RPC interface" in page.text
    finally:
        await server.stop()
    # The agent's server is gone: nothing listens there any more.
    unreachable = await admin.post("/console/agents/Plan_Agent/discover", data={"csrf_token": csrf})
    assert unreachable.headers["location"] == "/console/agents/Plan_Agent?done=card-unreachable"
    page = await admin.get(unreachable.headers["location"])
    assert page.status_code == 200
    assert "could not be fetched; the agent is marked unreachable" in page.text
    assert 'class="badge badge-unreachable">unreachable' in page.text
    assert (await client.get("/v1/agents/Plan_Agent")).json()["card_status"] == "unreachable"


# -- event deliveries ------------------------------------------------------------------------


@asynccontextmanager
async def delivering(database_url: str, clock: Clock) -> AsyncIterator[EventService]:
    """An EventService of another process (as the scheduler builds it) that gives up after one
    failed attempt, so a delivery goes dead at once."""
    database = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
    await database.open()
    outbound = OutboundPolicy(LOOPBACK_ALLOWED)
    try:
        async with outbound_client(outbound) as http:
            yield EventService(
                database, clock, SchedulerSettings(delivery_max_attempts=1), http, outbound
            )
    finally:
        await database.close()


async def test_deliveries_filter_and_an_event_is_redelivered(
    admin: httpx.AsyncClient,
    client: httpx.AsyncClient,
    database_url: str,
    frozen_clock: FrozenClock,
) -> None:
    receiver = await AgentServer(behaviour="fail", status=500).start()
    try:
        subscribed = await client.post(
            "/v1/subscriptions", json={"url": receiver.url, "event_types": ["session.version"]}
        )
        assert subscribed.status_code == 201, subscribed.text
        session = await create_session(client)
        async with delivering(database_url, frozen_clock) as events:
            assert await events.deliver_due() == 1
            dead = await admin.get("/console/deliveries?state=dead")
            assert dead.status_code == 200
            (event_id,) = set(re.findall(r'href="/console/deliveries/([0-9a-f-]{36})"', dead.text))
            assert "HTTP 500" in dead.text
            other_type = await admin.get("/console/deliveries?state=dead&type=session.handoff")
            assert event_id not in other_type.text
            assert "No delivery matches." in other_type.text
            assert event_id not in (await admin.get("/console/deliveries?state=delivered")).text
            overview = await admin.get("/console/")
            assert 'href="/console/deliveries?state=dead"' in overview.text

            page = await admin.get(f"/console/deliveries/{event_id}")
            assert page.status_code == 200
            assert session["session_id"] in page.text  # the payload
            assert receiver.url in page.text
            assert 'class="badge badge-dead">dead' in page.text

            receiver.behaviour, receiver.status = "ok", 200
            sent = await admin.post(
                f"/console/deliveries/{event_id}/redeliver",
                data={"csrf_token": await csrf_of(admin)},
            )
            assert sent.status_code == 303
            assert sent.headers["location"] == f"/console/deliveries/{event_id}?done=redelivered"
            pending = await admin.get(sent.headers["location"])
            assert "Every delivery of the event is pending again" in pending.text
            assert 'class="badge badge-pending">pending' in pending.text
            assert await events.deliver_due() == 1
        delivered = await admin.get(f"/console/deliveries/{event_id}")
        assert 'class="badge badge-delivered">delivered' in delivered.text
        assert len(receiver.requests) == 2
    finally:
        await receiver.stop()
    api = (await client.get("/v1/events", params={"status": "delivered"})).json()["items"]
    assert [item["event_id"] for item in api] == [event_id]


async def test_delivery_pages_refuse_bad_input(admin: httpx.AsyncClient) -> None:
    bad_state = await admin.get("/console/deliveries?state=lost")
    assert bad_state.status_code == 400
    assert "state must be one of pending, delivered, dead" in bad_state.text
    assert (await admin.get("/console/deliveries?type=session.nope")).status_code == 400
    assert (await admin.get("/console/deliveries?cursor=garbage")).status_code == 400
    unknown = await admin.get("/console/deliveries/01900000-0000-7000-8000-000000000000")
    assert unknown.status_code == 404
    csrf = await csrf_of(admin)
    redeliver = await admin.post(
        "/console/deliveries/01900000-0000-7000-8000-000000000000/redeliver",
        data={"csrf_token": csrf},
    )
    assert redeliver.status_code == 404


async def test_discover_and_redeliver_need_the_admin_key_and_the_csrf_token(
    browser: httpx.AsyncClient, client: httpx.AsyncClient, database_url: str
) -> None:
    await make_agent(client, "Plan_Agent", [])
    manager = await make_agent(client, "n8n-ops", ["coordination_manager"])
    assert (await sign_in(browser, manager)).status_code == 303
    page = await browser.get("/console/agents/Plan_Agent")
    assert page.status_code == 200
    assert "Discover card now" not in page.text
    assert (await browser.get("/console/deliveries")).status_code == 200
    csrf = await csrf_of(browser)
    event = "01900000-0000-7000-8000-000000000000"
    # An event's page names its subscribers' URLs, which only the admin key may read.
    detail = await browser.get(f"/console/deliveries/{event}")
    assert detail.status_code == 403
    assert "needs the admin key" in detail.text
    for action in ("/console/agents/Plan_Agent/discover", f"/console/deliveries/{event}/redeliver"):
        refused = await browser.post(action, data={"csrf_token": csrf})
        assert refused.status_code == 403, action
        assert "needs the admin key" in refused.text
    agent = (await client.get("/v1/agents/Plan_Agent")).json()
    assert agent["card_checked_at"] is None  # no discovery was tried

    await browser.post("/console/logout", data={"csrf_token": csrf})
    assert (await sign_in(browser, ADMIN_KEY)).status_code == 303
    for action in ("/console/agents/Plan_Agent/discover", f"/console/deliveries/{event}/redeliver"):
        forged = await browser.post(action, data={"csrf_token": "forged"})
        assert forged.status_code == 403, action
        assert "CSRF token" in forged.text
    assert (await client.get("/v1/agents/Plan_Agent")).json()["card_checked_at"] is None


# -- the sign-in's rate limit ----------------------------------------------------------------


async def test_failed_sign_ins_are_limited_per_address(
    browser: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Ten wrong keys from an address, then 429 with Retry-After, for a right key too (a
    different answer would confirm a guess); each failure is logged without the key."""
    burst = ConsoleSettings().login_failure_burst
    caplog.set_level(logging.WARNING, logger="switchboard.console")
    for attempt in range(burst):
        wrong = await sign_in(browser, f"guess-number-{attempt}")
        assert wrong.status_code == 401, attempt
    limited = await sign_in(browser, "guess-number-last")
    assert limited.status_code == 429
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert "Too many requests for sign-ins from this address" in limited.text
    assert '<a href="/console/login">Sign in</a>' in limited.text
    assert (await sign_in(browser, ADMIN_KEY)).status_code == 429
    refusals = [r.getMessage() for r in caplog.records if "sign-in from" in r.getMessage()]
    assert len(refusals) == burst
    assert all("127.0.0.1" in message for message in refusals)
    assert not any("guess-number" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("proxies", "trusted"),
    [
        (["127.0.0.1", "10.0.0.0/8"], True),
        ([], False),
        # Proxies are trusted, but not this peer: its forwarded headers are a client's claim.
        (["10.0.0.0/8"], False),
    ],
    ids=["behind-trusted-proxies", "none-trusted", "peer-not-trusted"],
)
async def test_behind_a_trusted_proxy_sign_ins_are_limited_per_forwarded_client(
    app: Litestar, proxies: list[str], trusted: bool
) -> None:
    """Behind two trusted proxies, X-Forwarded-For names the client: one
    guesser spends its own burst and another operator behind the same proxy still signs
    in; cookies are Secure when the proxy says the client used HTTPS. From a peer that is
    not trusted the headers change nothing: everyone behind it shares one limit."""
    burst = ConsoleSettings().login_failure_burst
    # The client's request went through a proxy at 10.1.2.3, then the one at 127.0.0.1.
    server = ServerSettings(trusted_proxies=proxies)
    async with served(app, server) as url:

        def behind_proxy(client: str, proto: str = "http") -> httpx.AsyncClient:
            forwarded = {"X-Forwarded-For": f"{client}, 10.1.2.3", "X-Forwarded-Proto": proto}
            return httpx.AsyncClient(base_url=url, headers=forwarded, timeout=30)

        async with behind_proxy("203.0.113.5") as guesser:
            for attempt in range(burst):
                assert (await sign_in(guesser, f"guess-{attempt}")).status_code == 401
            assert (await sign_in(guesser, "guess-last")).status_code == 429
        async with behind_proxy("198.51.100.7") as operator:
            answer = await sign_in(operator, ADMIN_KEY)
        async with behind_proxy("198.51.100.8", "https") as over_https:
            form = await over_https.get("/console/login")
    cookies = form.headers.get_list("set-cookie")
    assert cookies
    if trusted:
        assert answer.status_code == 303
        assert all("secure" in cookie.lower() for cookie in cookies)
    else:
        assert answer.status_code == 429
        assert not any("secure" in cookie.lower() for cookie in cookies)


async def test_wrong_keys_sent_at_once_are_limited_too(browser: httpx.AsyncClient) -> None:
    """Attempts sent together each spend their token before any key is looked at: a burst
    of concurrent guesses gets no more tries than the same guesses one by one, so a right
    key among them, past the limit, is refused like the rest (it was let in when the
    tokens were checked first and spent only after the key lookup)."""
    burst = ConsoleSettings().login_failure_burst
    form = await browser.get("/console/login")
    token = _token(form.text, "login_token")
    keys = [f"guess-at-once-{n}" for n in range(burst * 3 - 1)] + [ADMIN_KEY]
    answers = await asyncio.gather(
        *(
            browser.post("/console/login", data={"login_token": token, "api_key": key})
            for key in keys
        )
    )
    statuses = Counter(answer.status_code for answer in answers)
    assert statuses == {401: burst, 429: burst * 2}
    assert answers[-1].status_code == 429


async def test_successful_sign_ins_spend_nothing(browser: httpx.AsyncClient) -> None:
    for _ in range(ConsoleSettings().login_failure_burst * 2):
        assert (await sign_in(browser, ADMIN_KEY)).status_code == 303
    assert (await sign_in(browser, "one-wrong-key")).status_code == 401


# -- memories, cancelling a task, live streams ---------------------------------------------


def _memory_ids(html: str) -> list[str]:
    return re.findall(r'data-memory="([0-9a-f-]{36})"', html)


async def test_session_page_shows_the_memories_the_context_endpoint_gives(
    app: Litestar, browser: httpx.AsyncClient, client: httpx.AsyncClient, database_url: str
) -> None:
    """The session's memories and its user's session-less ones, through the context rule
    (another session's, another user's and unreadable ones stay out), paged by cursor."""
    session = await create_session(client)
    sid, user = session["session_id"], session["user_id"]
    other_session = (await create_session(client, user_id=user))["session_id"]
    stranger = await create_user(client)

    def memory(**fields: Any) -> dict[str, Any]:
        return {"user_id": user, "memory_type": "orchestrator", "content": {"n": 1}, **fields}

    batch = [memory(session_id=sid, content={"n": n}) for n in range(19)]
    batch += [
        memory(category="agent_outputs", key="plan", content={"n": "user-level"}),
        memory(category="user_profile", key="income", content={"n": "profile"}),
        memory(session_id=other_session, content={"n": "elsewhere"}),
        {"user_id": stranger, "memory_type": "orchestrator", "content": {"n": "stranger"}},
    ]
    written = await client.post("/v1/memories", json=batch)
    assert written.status_code == 201, written.text
    ids = [m["memory_id"] for m in written.json()["items"]]
    visible = set(ids[:21])  # the session's 19, the user-level plan and profile

    assert (await sign_in(browser, ADMIN_KEY)).status_code == 303
    first = await browser.get(f"/console/sessions/{sid}")
    assert first.status_code == 200
    context = await client.get(f"/v1/sessions/{sid}/context", params={"limit": 20})
    assert _memory_ids(first.text) == [m["memory_id"] for m in context.json()["memories"]]
    assert 'rel="next"' in first.text
    older = re.search(r'href="([^"]*memories_cursor=[^"#]+)', first.text)
    assert older is not None
    second = await browser.get(older.group(1).replace("&amp;", "&"))
    assert second.status_code == 200
    assert set(_memory_ids(first.text)) | set(_memory_ids(second.text)) == visible
    assert len(_memory_ids(first.text)) == 20
    assert len(_memory_ids(second.text)) == 1
    # What the table says of a memory: category, key, access level, retention, expiry.
    row = re.search(rf'data-memory="{ids[19]}">(.*?)</tr>', first.text + second.text, re.S)
    assert row is not None
    assert "agent_outputs" in row.group(1)
    assert ">plan<" in row.group(1)
    assert "coordination_manager" in row.group(1)
    assert "30 d" in row.group(1)
    assert "<time" in row.group(1)
    profile = re.search(rf'data-memory="{ids[20]}">(.*?)</tr>', first.text + second.text, re.S)
    assert profile is not None
    assert ">kept<" in profile.group(1)

    # Every read is audited, as the context endpoint's are: a context row under the admin.
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT agent_name, query FROM memory_access_log WHERE action = 'context' "
            "AND query->>'session_id' = $1 ORDER BY at",
            sid,
        )
    finally:
        await conn.close()
    assert [r["agent_name"] for r in rows] == ["admin"] * 3
    bad = await browser.get(f"/console/sessions/{sid}", params={"memories_cursor": "bogus"})
    assert bad.status_code == 400

    # A coordination_manager key sees what its roles allow: not the user_profile memory.
    manager = await make_agent(client, "n8n-ops", ["coordination_manager"])
    async with same_app_client(app) as other:
        assert (await sign_in(other, manager)).status_code == 303
        seen = set()
        page = await other.get(f"/console/sessions/{sid}")
        seen |= set(_memory_ids(page.text))
        older = re.search(r'href="([^"]*memories_cursor=[^"#]+)', page.text)
        if older is not None:
            seen |= set(_memory_ids((await other.get(older.group(1).replace("&amp;", "&"))).text))
    assert seen == visible - {ids[20]}


async def test_a_task_is_canceled_from_its_page_and_from_the_list(
    browser: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    """TaskService.cancel as POST /v1/tasks/{id}/cancel: the transition records the operator
    and the reason; a task that is over gets a 409 page saying so; admin only."""
    made = await client.post("/v1/agents", json={"name": "worker-1", "url": "http://127.0.0.1:9/"})
    assert made.status_code == 201, made.text
    task_ids = []
    for _ in range(2):
        task = await client.post("/v1/tasks", json={"agent_name": "worker-1", "input": {"q": 1}})
        assert task.status_code == 201, task.text
        task_ids.append(task.json()["task_id"])
    first, second = task_ids

    manager = await make_agent(client, "n8n-ops", ["coordination_manager"])
    assert (await sign_in(browser, manager)).status_code == 303
    page = await browser.get(f"/console/tasks/{first}")
    assert f"/console/tasks/{first}/cancel" not in page.text  # no button it may not press
    refused = await browser.post(
        f"/console/tasks/{first}/cancel",
        data={"csrf_token": _token(page.text, "csrf_token"), "back": "task"},
    )
    assert refused.status_code == 403
    await browser.post("/console/logout", data={"csrf_token": _token(page.text, "csrf_token")})

    assert (await sign_in(browser, ADMIN_KEY)).status_code == 303
    page = await browser.get(f"/console/tasks/{first}")
    assert f'action="/console/tasks/{first}/cancel"' in page.text
    csrf = _token(page.text, "csrf_token")
    done = await browser.post(
        f"/console/tasks/{first}/cancel",
        data={"csrf_token": csrf, "back": "task", "reason": "customer hung up"},
    )
    assert done.status_code == 303, done.text
    assert done.headers["location"] == f"/console/tasks/{first}?done=canceled"
    detail = (await client.get(f"/v1/tasks/{first}")).json()
    assert detail["task"]["status"] == "canceled"
    last = detail["transitions"][-1]
    assert (last["to_status"], last["actor"], last["reason"]) == (
        "canceled",
        "admin",
        "customer hung up",
    )
    shown = await browser.get(done.headers["location"])
    assert "Canceled; a running attempt was stopped." in shown.text
    assert f'action="/console/tasks/{first}/cancel"' not in shown.text  # it is over

    again = await browser.post(
        f"/console/tasks/{first}/cancel", data={"csrf_token": csrf, "back": "task"}
    )
    assert again.status_code == 409
    assert again.headers["content-type"].startswith("text/html")
    assert "already canceled" in again.text

    listed = await browser.get("/console/tasks", params={"agent": "worker-1"})
    assert f'action="/console/tasks/{second}/cancel"' in listed.text
    assert f'action="/console/tasks/{first}/cancel"' not in listed.text
    # A bad field is refused before the task is touched.
    bogus = await browser.post(
        f"/console/tasks/{second}/cancel",
        data={"csrf_token": csrf, "back": "tasks", "status": "bogus", "agent": "worker-1"},
    )
    assert bogus.status_code == 400
    assert (await client.get(f"/v1/tasks/{second}")).json()["task"]["status"] != "canceled"
    from_list = await browser.post(
        f"/console/tasks/{second}/cancel",
        data={"csrf_token": csrf, "back": "tasks", "status": "", "agent": "worker-1"},
    )
    assert from_list.status_code == 303
    assert from_list.headers["location"] == "/console/tasks?status=&agent=worker-1&done=canceled"
    assert (await client.get(f"/v1/tasks/{second}")).json()["task"]["status"] == "canceled"
    bad = await browser.post(
        f"/console/tasks/{second}/cancel", data={"csrf_token": csrf, "back": "elsewhere"}
    )
    assert bad.status_code == 400
    missing = await browser.post(
        "/console/tasks/0190c6c0-0000-7000-8000-000000000000/cancel",
        data={"csrf_token": csrf, "back": "task"},
    )
    assert missing.status_code == 404


async def test_live_pages_name_their_streams(
    admin: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    """The session page follows its own session's stream; the task pages ask the console
    stream for task events only; a type the console does not stream is a 400."""
    sid = (await create_session(client))["session_id"]
    page = await admin.get(f"/console/sessions/{sid}")
    assert f'data-live="/console/sessions/{sid}/events"' in page.text
    assert page.text.count("data-live-region") >= 6
    tasks = await admin.get("/console/tasks")
    assert 'data-live="/console/events?types=task.completed,' in tasks.text
    letters = await admin.get("/console/dead-letters")
    assert "data-live-region" in letters.text
    bad = await admin.get("/console/events", params={"types": "memory.purged"})
    assert bad.status_code == 400
    unknown = await admin.get("/console/events", params={"types": "nope"})
    assert unknown.status_code == 400
    missing = await admin.get("/console/sessions/0190c6c0-0000-7000-8000-000000000000/events")
    assert missing.status_code == 404
