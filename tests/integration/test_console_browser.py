"""The operator console in a real headless Chromium (Debian's ``chromium`` package, driven by
Playwright) against a live Switchboard process on 127.0.0.1: an operator's round trip, and
the CSRF, cross-site and expired-session refusals.

The browser comes from the system (``scripts/chromium.sh``, run by ``make test``, installs
Debian's package where it can); Playwright never downloads one. Without a Chromium the tests
are skipped, saying why. ``SWITCHBOARD_CONSOLE_SCREENSHOTS=<dir>`` (``make
console-screenshots``) writes the overview and a session page there."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.serve import spawn
from tests import dbutil
from tests.a2a_agent import A2AAgent
from tests.conftest import ADMIN_KEY

playwright_api = pytest.importorskip(
    "playwright.async_api",
    reason="the python playwright package is not installed (make install puts it in .venv)",
)

CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",  # root in CI containers
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",  # the machine's closed network refuses Google's hosts
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """A Chromium of the system: SWITCHBOARD_CHROMIUM, else chromium on PATH."""
    configured = os.environ.get("SWITCHBOARD_CHROMIUM")
    if configured:
        return configured
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Live:
    """A Switchboard process, an admin client of its API, and its database."""

    url: str
    api: httpx.AsyncClient
    database_url: str


@asynccontextmanager
async def running_switchboard(
    server_url: str, template_database: str, **env: str
) -> AsyncIterator[Live]:
    """A Switchboard process on a database of its own, and an admin client of its API."""
    name = dbutil.unique_name("sbtest_console")
    await dbutil.create_database(server_url, name, template=template_database)
    process, port = await asyncio.to_thread(
        spawn,
        "switchboard",
        {
            "SWITCHBOARD_DATABASE_URL": dbutil.with_database(server_url, name),
            "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
            "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",
            "SWITCHBOARD_TASKS_ENABLED": "true",
            **env,
        },
    )
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=10
        ) as api:
            yield Live(url, api, dbutil.with_database(server_url, name))
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)
        await dbutil.drop_database(server_url, name)


@pytest.fixture
def chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip(
            "no Chromium on this machine: install Debian's chromium package "
            "(scripts/chromium.sh, which make test runs, does so as root) or set "
            "SWITCHBOARD_CHROMIUM to a Chromium binary"
        )
    return path


@pytest.fixture
async def live(server_url: str, template_database: str, chromium: str) -> AsyncIterator[Live]:
    async with running_switchboard(server_url, template_database) as started:
        yield started


@pytest.fixture
async def page(chromium: str) -> AsyncIterator[Any]:
    """A page of a fresh headless Chromium; confirm dialogs are accepted."""
    async with playwright_api.async_playwright() as driver:
        browser = await driver.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS)
        try:
            context = await browser.new_context(viewport={"width": 1366, "height": 900})
            opened = await context.new_page()
            opened.set_default_timeout(15_000)
            opened.on("dialog", lambda dialog: asyncio.ensure_future(dialog.accept()))
            yield opened
        finally:
            await browser.close()


async def screenshot(page: Any, name: str, tmp_path: Path) -> Path:
    """Write a full-page PNG into SWITCHBOARD_CONSOLE_SCREENSHOTS (else the test's tmp)."""
    folder = Path(os.environ.get("SWITCHBOARD_CONSOLE_SCREENSHOTS") or tmp_path)
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    target = folder / name
    await page.screenshot(path=str(target), full_page=True)
    assert (
        await asyncio.to_thread(target.stat)
    ).st_size > 10_000  # a rendered page, not a blank one
    return target


class _Agent(BaseHTTPRequestHandler):
    """A downstream agent on 127.0.0.1: reads the call, answers ``answer()``'s JSON."""

    def answer(self) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        status, answer = self.answer()
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        return


@contextmanager
def serving(handler: type[_Agent]) -> Iterator[str]:
    """``handler`` served on 127.0.0.1 for the block: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Refusing(_Agent):
    """An agent that refuses every call with a 400 (not retried: one attempt, a dead letter)."""

    def answer(self) -> tuple[int, dict[str, Any]]:
        return 400, {"error": "bad request"}


@pytest.fixture(scope="module")
def refusing_agent() -> Iterator[str]:
    with serving(_Refusing) as url:
        yield url


async def dead_letters(api: httpx.AsyncClient, seconds: float = 20) -> list[dict[str, Any]]:
    """The open dead letters, once there is one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        items: list[dict[str, Any]] = (await api.get("/v1/dead-letters")).json()["items"]
        if items:
            return items
        await asyncio.sleep(0.2)
    raise AssertionError("no dead letter arrived")


async def seed(live: Live, refusing_agent: str) -> dict[str, Any]:
    """What an operator would find: users and sessions, agents, a dead letter, job runs."""
    api = live.api
    for name in ("Billing_Agent", "Research_Agent"):
        made = await api.post("/v1/agents", json={"name": name, "intents": [], "roles": []})
        assert made.status_code == 201, made.text
    alice = (await api.post("/v1/users", json={"external_ref": "alice@example.com"})).json()["id"]
    bob = (await api.post("/v1/users", json={"external_ref": "bob@example.com"})).json()["id"]
    session = (
        await api.post(
            "/v1/sessions",
            json={
                "user_id": alice,
                "session_state": {"active_process": "onboarding"},
                "current_agent": "Guide_Agent",
            },
        )
    ).json()
    sid = session["session_id"]
    patched = await api.patch(
        f"/v1/sessions/{sid}",
        json={
            "session_state": {"active_process": "billing-dispute"},
            "priority": "high",
            "progress_percentage": 40,
        },
        headers={"Content-Type": "application/merge-patch+json", "If-Match": '"1"'},
    )
    assert patched.status_code == 200, patched.text
    handed = await api.post(
        f"/v1/sessions/{sid}/handoff",
        json={
            "to_agent": "Billing_Agent",
            "reason": "the customer disputes an invoice",
            "output_summary": "identity checked, invoice 2291 found",
        },
        headers={"If-Match": '"2"'},
    )
    assert handed.status_code == 200, handed.text
    remembered = await api.post(
        "/v1/memories",
        json={
            "user_id": alice,
            "session_id": sid,
            "memory_type": "orchestrator",
            "category": "agent_outputs",
            "key": "dispute",
            "content": {"invoice": 2291, "claim": "charged twice"},
        },
    )
    assert remembered.status_code == 201, remembered.text
    for user in (alice, bob, bob):
        assert (await api.post("/v1/sessions", json={"user_id": user})).status_code == 201
    made = await api.post(
        "/v1/agents", json={"name": "Picky_Agent", "url": refusing_agent, "timeout_ms": 2000}
    )
    assert made.status_code == 201, made.text
    task = await api.post(
        "/v1/tasks",
        json={
            "agent_name": "Picky_Agent",
            "input": {"message": "refund please"},
            "session_id": sid,
        },
    )
    assert task.status_code in (200, 201), task.text
    letters = await dead_letters(api)
    ran = await api.post("/v1/jobs/housekeeping/run", params={"dry_run": "true"})
    assert ran.status_code == 200, ran.text
    return {"session_id": sid, "dead_letter_id": letters[0]["dead_letter_id"]}


async def sign_in(page: Any, url: str, key: str = ADMIN_KEY) -> None:
    await page.goto(f"{url}/console/")
    assert page.url.endswith("/console/login")
    await page.get_by_label("Admin key, or an agent key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{url}/console/")


async def test_an_operator_round_trip(
    live: Live, page: Any, refusing_agent: str, tmp_path: Path
) -> None:
    seeded = await seed(live, refusing_agent)
    sid = seeded["session_id"]

    await sign_in(page, live.url)
    assert await page.get_by_role("heading", name="Overview").is_visible()
    assert ADMIN_KEY not in await page.content()
    assert "key" not in page.url
    picky = await page.locator("tr", has_text="Picky_Agent").first.inner_text()
    assert "1 (100 %)" in picky  # its one task of the last hour failed
    # The activity charts: inline SVG, each named for assistive technology.
    charts = page.get_by_role("img", name="Tasks failed, per 5 min")
    assert "1 in all" in (await charts.locator("desc").text_content() or "")
    assert await page.locator("svg.chart").count() == 5
    await page.locator("#live-status", has_text="listening").wait_for()
    await screenshot(page, "overview.png", tmp_path)
    # Keyboard first: the first Tab stop is the skip link, and it leads to the content.
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
    tiles = await page.locator(".tile-alert").all_inner_texts()
    assert any("dead letters waiting" in tile for tile in tiles)

    # Find the session: by the user's external reference.
    await page.get_by_role("link", name="Sessions", exact=True).click()
    await page.get_by_label("User (id or external ref)").fill("alice@example.com")
    await page.get_by_role("button", name="Search").click()
    rows = page.locator("main table").first.locator("tbody tr")
    assert await rows.count() == 2  # alice has two sessions; bob's are not shown
    await page.get_by_role("link", name=sid).click()
    await page.wait_for_url(f"{live.url}/console/sessions/{sid}")

    # Read its diff. The latest change is shown first: the failed task escalated the session.
    diff = page.locator(".diff")
    assert "From version 3 to version 4" in await diff.inner_text()
    assert "escalated" in await diff.locator("table.changes tbody").inner_text()
    await page.get_by_label("Compare version").fill("1")
    await page.get_by_label("with").fill("2")
    await page.get_by_role("button", name="Show diff").click()
    await page.wait_for_url(f"{live.url}/console/sessions/{sid}?old=1&new=2")
    assert "From version 1 to version 2" in await diff.inner_text()
    changes = await diff.locator("table.changes tbody").inner_text()
    assert "session_state.active_process" in changes
    assert "billing-dispute" in changes
    assert "priority" in changes
    await page.get_by_text("Unified diff").click()
    assert '"active_process": "billing-dispute"' in await diff.locator("pre").inner_text()
    timeline = await page.locator("ol.timeline").inner_text()
    assert "Billing_Agent executing" in timeline
    assert "dispute" in await page.locator("#session-memories").inner_text()
    await screenshot(page, "session.png", tmp_path)

    # Roll back to version 1 (the confirm dialog is accepted).
    await page.get_by_label("Roll back to version").fill("1")
    await page.get_by_role("button", name="Roll back").click()
    await page.wait_for_url(f"{live.url}/console/sessions/{sid}?done=rolled-back")
    assert "Rolled back" in await page.get_by_role("status").inner_text()
    after = (await live.api.get(f"/v1/sessions/{sid}")).json()
    assert after["version"] == 5
    assert after["status"] == "escalated"  # not content: a rollback leaves it
    assert after["session_state"]["active_process"] == "onboarding"
    assert after["priority"] == "normal"
    assert after["current_agent"] == "Guide_Agent"

    # Resolve the escalation the dead letter caused.
    await page.get_by_label("What was done about it").fill("invoice corrected by hand")
    await page.get_by_role("button", name="Resolve").click()
    await page.wait_for_url(f"{live.url}/console/sessions/{sid}?done=resolved")
    assert (await live.api.get(f"/v1/sessions/{sid}")).json()["status"] == "active"

    # Open and close a breaker.
    await page.get_by_role("link", name="Agents", exact=True).click()
    await page.get_by_role("button", name="Open the breaker of Billing_Agent").click()
    await page.wait_for_url("**/console/agents?done=breaker-open")
    assert (await live.api.get("/v1/agents/Billing_Agent/breaker")).json()["state"] == "forced_open"
    await page.get_by_role("button", name="Close the breaker of Billing_Agent").click()
    await page.wait_for_url("**/console/agents?done=breaker-closed")
    assert (await live.api.get("/v1/agents/Billing_Agent/breaker")).json()["state"] == "closed"

    # Requeue the dead letter.
    await page.get_by_role("link", name="Dead letters", exact=True).click()
    letter = seeded["dead_letter_id"]
    await page.get_by_role("button", name=f"Requeue the task of dead letter {letter}").click()
    await page.wait_for_url("**/console/dead-letters?done=requeued")
    requeued = (await live.api.get("/v1/dead-letters", params={"state": "requeued"})).json()[
        "items"
    ]
    assert [item["dead_letter_id"] for item in requeued] == [letter]
    assert requeued[0]["requeued_by"] == "admin"

    # Run a job dry.
    await page.get_by_role("link", name="Jobs", exact=True).click()
    await page.get_by_role("button", name="Dry run of expiry_cleanup").click()
    await page.wait_for_url("**/console/jobs/expiry_cleanup?run=*")
    highlighted = page.locator("tr.highlight")
    assert await highlighted.count() == 1
    assert "yes" in await highlighted.inner_text()  # the Dry column
    runs = (await live.api.get("/v1/jobs/expiry_cleanup/runs")).json()["items"]
    assert [run["dry_run"] for run in runs] == [True]

    # Sign out: the console is closed again.
    await page.get_by_role("button", name="Sign out").click()
    await page.wait_for_url(f"{live.url}/console/login")
    await page.goto(f"{live.url}/console/sessions")
    assert page.url == f"{live.url}/console/login"


async def test_a_form_with_a_forged_csrf_token_is_refused(live: Live, page: Any) -> None:
    made = await live.api.post("/v1/agents", json={"name": "Csrf_Target"})
    assert made.status_code == 201, made.text
    await sign_in(page, live.url)
    await page.goto(f"{live.url}/console/agents")
    form = page.locator('form[action="/console/agents/Csrf_Target/breaker"]')
    await form.locator('input[name="csrf_token"]').evaluate("field => { field.value = 'forged'; }")
    async with page.expect_response("**/console/agents/Csrf_Target/breaker") as answered:
        await form.get_by_role("button").click()
    assert (await answered.value).status == 403
    assert "CSRF token is missing or wrong" in await page.content()
    assert (await live.api.get("/v1/agents/Csrf_Target/breaker")).json()["state"] == "closed"


async def test_a_cross_site_form_gets_no_cookie(live: Live, page: Any) -> None:
    """SameSite=Strict: a page on another site posting to the console is not signed in,
    even with the browser signed in (and even if it knew a CSRF token)."""
    made = await live.api.post("/v1/agents", json={"name": "Cross_Site_Target"})
    assert made.status_code == 201, made.text
    await sign_in(page, live.url)
    csrf = await page.locator('input[name="csrf_token"]').first.get_attribute("value")
    other_site = f"http://localhost:{live.url.rsplit(':', 1)[1]}"  # another host name

    async def evil_page(route: Any) -> None:
        await route.fulfill(
            content_type="text/html",
            body=(
                f'<form method="post" action="{live.url}/console/agents/Cross_Site_Target/'
                f'breaker"><input name="csrf_token" value="{csrf}">'
                '<input name="state" value="open"><button>go</button></form>'
            ),
        )

    await page.route(f"{other_site}/evil", evil_page)
    await page.goto(f"{other_site}/evil")
    async with page.expect_response("**/console/agents/Cross_Site_Target/breaker") as answered:
        await page.get_by_role("button", name="go").click()
    assert (await answered.value).status == 401
    assert (await live.api.get("/v1/agents/Cross_Site_Target/breaker")).json()["state"] == "closed"


async def test_an_expired_session_is_refused(
    server_url: str, template_database: str, chromium: str, page: Any
) -> None:
    async with running_switchboard(
        server_url, template_database, SWITCHBOARD_CONSOLE_SESSION_SECONDS="3"
    ) as short:
        made = await short.api.post("/v1/agents", json={"name": "Late_Agent"})
        assert made.status_code == 201, made.text
        await sign_in(page, short.url)
        await page.goto(f"{short.url}/console/agents")
        await asyncio.sleep(3.5)
        async with page.expect_response("**/console/agents/Late_Agent/breaker") as answered:
            await page.get_by_role("button", name="Open the breaker of Late_Agent").click()
        assert (await answered.value).status == 401
        # The browser dropped the cookie at its Max-Age (the signed expiry is the same time;
        # tests/integration/test_console.py checks a cookie sent past it): signed out.
        assert "Sign in to the console first" in await page.content()
        assert (await short.api.get("/v1/agents/Late_Agent/breaker")).json()["state"] == "closed"
        await page.goto(f"{short.url}/console/")
        assert page.url == f"{short.url}/console/login"


async def test_the_overview_refreshes_itself_after_an_api_write(live: Live, page: Any) -> None:
    """The overview listens on GET /console/events and swaps its counts in place: a session
    made over the API shows up without a reload (the page's own JS state survives)."""
    refused: list[str] = []
    page.on("console", lambda message: refused.append(message.text))
    await sign_in(page, live.url)
    counts = page.locator("table.counts", has_text="Sessions by status")
    assert "No live sessions." in await counts.inner_text()
    await page.locator("#live-status", has_text="listening").wait_for()
    await page.evaluate("window.notReloaded = true")
    user = (await live.api.post("/v1/users", json={"external_ref": "carol@example.com"})).json()[
        "id"
    ]
    for _ in range(2):
        made = await live.api.post("/v1/sessions", json={"user_id": user})
        assert made.status_code == 201, made.text
    # The counts are replaced in place (the region swapped), not by a reload. The two
    # sessions' events may come in one refresh or two (2 s apart): wait for the count of 2.
    fresh = page.locator("table.counts", has_text="Sessions by status")
    active = fresh.locator("tr", has_text="active").filter(has_text="2")
    await active.wait_for(timeout=10_000)
    assert await page.evaluate("window.notReloaded") is True
    assert "updated at" in await page.locator("#live-status").inner_text()
    assert not [m for m in refused if "Content Security Policy" in m]


# -- agents' cards and event deliveries (app/console/operations.py) ----------------------------


class _Receiver(BaseHTTPRequestHandler):
    """An event subscriber: answers ``status`` (500 until a test says otherwise)."""

    status = 500
    received: list[str] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        type(self).received.append(self.headers.get("X-Switchboard-Event-Id", ""))
        self.send_response(type(self).status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    handler = type("Receiver", (_Receiver,), {"status": 500, "received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/events", handler
    finally:
        server.shutdown()
        server.server_close()


@asynccontextmanager
async def scheduler_process(live: Live) -> AsyncIterator[None]:
    """``python -m scheduler`` on the live process's database, as a deployment runs it beside
    ``switchboard serve --no-scheduler``: it delivers events every half second and gives a
    delivery up (dead) after one failed attempt."""
    env = {
        **os.environ,
        "SWITCHBOARD_DATABASE_URL": live.database_url,
        "SWITCHBOARD_ADMIN_KEY": ADMIN_KEY,
        "SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK": "true",
        "SWITCHBOARD_SCHEDULER_DELIVERY_INTERVAL": "PT0.5S",
        "SWITCHBOARD_SCHEDULER_DELIVERY_MAX_ATTEMPTS": "1",
    }
    process = await asyncio.to_thread(
        subprocess.Popen, [sys.executable, "-m", "scheduler"], env=env
    )
    try:
        yield
    finally:
        process.terminate()
        await asyncio.to_thread(process.wait, 30)


async def deliveries(api: httpx.AsyncClient, status: str, seconds: float = 20) -> list[Any]:
    """The deliveries in ``status``, once there is one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        items: list[Any] = (await api.get("/v1/events", params={"status": status})).json()["items"]
        if items:
            return items
        await asyncio.sleep(0.2)
    raise AssertionError(f"no {status} delivery arrived")


async def test_an_event_that_failed_is_redelivered(
    live: Live, page: Any, receiver: tuple[str, type[_Receiver]]
) -> None:
    url, answers = receiver
    subscribed = await live.api.post(
        "/v1/subscriptions", json={"url": url, "event_types": ["session.version"]}
    )
    assert subscribed.status_code == 201, subscribed.text
    async with scheduler_process(live):
        user = (await live.api.post("/v1/users", json={"external_ref": "dora@example.com"})).json()
        made = await live.api.post("/v1/sessions", json={"user_id": user["id"]})
        assert made.status_code == 201, made.text
        (dead,) = await deliveries(live.api, "dead")
        event_id = dead["event_id"]
        assert answers.received == [event_id]

        await sign_in(page, live.url)
        tile = page.get_by_role("link", name="event deliveries not made")
        assert "1" in await tile.inner_text()
        await tile.click()
        await page.wait_for_url(f"{live.url}/console/deliveries?state=dead")
        row = page.locator("tbody tr", has_text=event_id)
        assert "HTTP 500" in await row.inner_text()
        await row.get_by_role("link", name=event_id).click()
        await page.wait_for_url(f"{live.url}/console/deliveries/{event_id}")
        assert made.json()["session_id"] in await page.locator("pre").inner_text()
        delivery = page.locator("tbody tr", has_text=url)
        assert "dead" in await delivery.inner_text()

        answers.status = 200  # the subscriber is fixed: deliver the event again
        await page.get_by_role("button", name=f"Redeliver event {event_id}").click()
        await page.wait_for_url(f"{live.url}/console/deliveries/{event_id}?done=redelivered")
        assert "pending again" in await page.get_by_role("status").inner_text()
        (delivered,) = await deliveries(live.api, "delivered")
        assert delivered["event_id"] == event_id
    assert answers.received == [event_id, event_id]
    await page.reload()
    assert "delivered" in await page.locator("tbody tr", has_text=url).inner_text()
    await page.get_by_role("link", name="Deliveries", exact=True).click()
    await page.get_by_label("State").select_option("delivered")
    await page.get_by_role("button", name="Filter").click()
    await page.wait_for_url("**/console/deliveries?state=delivered&type=")
    assert await page.locator("tbody tr", has_text=event_id).count() == 1


async def test_discover_an_agent_card_from_a_real_a2a_agent(live: Live, page: Any) -> None:
    agent = await A2AAgent().start()
    try:
        made = await live.api.post("/v1/agents", json={"name": "Plan_Agent", "url": agent.url})
        assert made.status_code == 201, made.text
        await sign_in(page, live.url)
        await page.get_by_role("link", name="Agents", exact=True).click()
        await page.get_by_role("link", name="Plan_Agent", exact=True).click()
        await page.wait_for_url(f"{live.url}/console/agents/Plan_Agent")
        assert "No skills" in await page.locator("section", has_text="Skills").inner_text()
        await page.get_by_role("button", name="Discover the card of Plan_Agent now").click()
        await page.wait_for_url(f"{live.url}/console/agents/Plan_Agent?done=discovered")
        assert "The card was fetched" in await page.get_by_role("status").inner_text()
        assert agent.card_fetches == 1
        card = await page.locator("section", has_text="A2A card").inner_text()
        assert "discovered" in card
        assert f"{agent.url}/a2a" in await page.locator("dl.facts").first.inner_text()
        await page.get_by_role("link", name="Skills", exact=True).click()
        row = page.locator("tbody tr", has_text="a2a_budgeting")
        assert "Plan_Agent" in await row.inner_text()

        await agent.stop()  # the agent is gone: the next discovery cannot fetch the card
        await row.get_by_role("link", name="Plan_Agent", exact=True).click()
        await page.get_by_role("button", name="Discover the card of Plan_Agent now").click()
        await page.wait_for_url(f"{live.url}/console/agents/Plan_Agent?done=card-unreachable")
        alert = await page.get_by_role("alert").inner_text()
        assert "could not be fetched" in alert
        assert "The error:" in alert
    finally:
        await agent.stop()
    stored = (await live.api.get("/v1/agents/Plan_Agent")).json()
    assert stored["card_status"] == "unreachable"
    assert [skill["id"] for skill in stored["skills"]] == ["a2a_budgeting"]


async def test_a_session_page_follows_its_own_session(live: Live, page: Any) -> None:
    """The session page shows the memories its context gives, and refreshes over its own
    session's stream: an API write updates it in place, but not the part in which the
    operator is typing, and a write to another session does not refresh it at all."""
    api = live.api
    user = (await api.post("/v1/users", json={"external_ref": "dora@example.com"})).json()["id"]
    sid = (await api.post("/v1/sessions", json={"user_id": user})).json()["session_id"]
    other = (await api.post("/v1/sessions", json={"user_id": user})).json()["session_id"]
    wrote = await api.post(
        "/v1/memories",
        json={
            "user_id": user,
            "session_id": sid,
            "memory_type": "orchestrator",
            "category": "agent_outputs",
            "key": "refund_plan",
            "content": {"step": "refund invoice 2291"},
        },
    )
    assert wrote.status_code == 201, wrote.text

    def patch(session: str, version: int, priority: str) -> Any:
        return api.patch(
            f"/v1/sessions/{session}",
            json={"priority": priority},
            headers={"Content-Type": "application/merge-patch+json", "If-Match": f'"{version}"'},
        )

    assert (await patch(sid, 1, "high")).status_code == 200
    await sign_in(page, live.url)
    await page.goto(f"{live.url}/console/sessions/{sid}")
    memories = page.locator("#session-memories")
    assert "refund_plan" in await memories.inner_text()
    assert "agent_outputs" in await memories.inner_text()
    await page.locator("#live-status", has_text="listening").wait_for()
    await page.evaluate("window.notReloaded = true")
    version = page.locator("#session-state dt:text-is('Version') + dd")
    assert await version.inner_text() == "2"

    # The operator types into the rollback form; an API write arrives meanwhile.
    rollback_to = page.get_by_label("Roll back to version")
    await rollback_to.fill("2")
    assert (await patch(sid, 2, "low")).status_code == 200
    diff = page.locator("#session-versions .diff h3", has_text="From version 2 to version 3")
    await diff.wait_for(timeout=10_000)  # the versions part was swapped in place
    assert await version.inner_text() == "2"  # the part with the form waits
    assert await rollback_to.input_value() == "2"
    assert "being filled in" in await page.locator("#live-status").inner_text()

    # The form is cleared and left: its part catches up.
    await rollback_to.fill("1")
    await page.get_by_role("heading", name="Memories").click()
    await page.locator("#session-state dt:text-is('Version') + dd", has_text="3").wait_for(
        timeout=10_000
    )
    assert await page.evaluate("window.notReloaded") is True

    # Another session's write reaches no part of this page (the stream is filtered).
    await page.evaluate("document.getElementById('session-versions').dataset.mark = 'kept'")
    assert (await patch(other, 1, "high")).status_code == 200
    await asyncio.sleep(3)  # longer than a refresh takes (throttle 2 s)
    assert await page.evaluate("document.getElementById('session-versions').dataset.mark") == (
        "kept"
    )


class _Slow(_Agent):
    """An agent that takes its time (until the test lets it go): a task stays working."""

    release = threading.Event()

    def answer(self) -> tuple[int, dict[str, Any]]:
        self.release.wait(30)
        return 200, {"answer": "late"}


@pytest.fixture
def slow_agent() -> Iterator[str]:
    with serving(_Slow) as url:
        try:
            yield url
        finally:
            _Slow.release.set()  # before the server stops: it waits for its handlers


async def task_status(api: httpx.AsyncClient, task_id: str) -> str:
    status: str = (await api.get(f"/v1/tasks/{task_id}")).json()["task"]["status"]
    return status


async def test_an_operator_cancels_tasks(live: Live, page: Any, slow_agent: str) -> None:
    """A working task is canceled from the tasks list (its attempt stops), a new task shows
    up in the list by itself, and it is canceled from its own page with a reason."""
    api = live.api
    made = await api.post(
        "/v1/agents", json={"name": "Slow_Agent", "url": slow_agent, "timeout_ms": 60_000}
    )
    assert made.status_code == 201, made.text

    async def submit() -> str:
        task = await api.post("/v1/tasks", json={"agent_name": "Slow_Agent", "input": {"q": 1}})
        assert task.status_code == 201, task.text
        task_id: str = task.json()["task_id"]
        return task_id

    working = await submit()
    deadline = time.monotonic() + 15
    while await task_status(api, working) != "working":
        assert time.monotonic() < deadline, "the task never started"
        await asyncio.sleep(0.1)

    await sign_in(page, live.url)
    await page.goto(f"{live.url}/console/tasks?agent=Slow_Agent")
    await page.get_by_role("button", name=f"Cancel task {working}").click()
    await page.wait_for_url("**/console/tasks?status=&agent=Slow_Agent&done=canceled")
    assert "Canceled" in await page.get_by_role("status").inner_text()
    assert await task_status(api, working) == "canceled"
    row = page.locator("tr", has_text=working)
    assert "canceled" in await row.inner_text()
    assert await row.get_by_role("button").count() == 0

    # The list refreshes over the console's stream: a new task appears without a reload.
    await page.locator("#live-status", has_text="listening").wait_for()
    waiting = await submit()
    await page.get_by_role("link", name=waiting).wait_for(timeout=10_000)
    await page.get_by_role("link", name=waiting).click()
    await page.get_by_label("Why (recorded in the transition)").fill("duplicate request")
    await page.get_by_role("button", name="Cancel the task").click()
    await page.wait_for_url(f"{live.url}/console/tasks/{waiting}?done=canceled")
    detail = (await api.get(f"/v1/tasks/{waiting}")).json()
    assert detail["task"]["status"] == "canceled"
    assert (detail["transitions"][-1]["actor"], detail["transitions"][-1]["reason"]) == (
        "admin",
        "duplicate request",
    )
    assert await page.get_by_role("button", name="Cancel the task").count() == 0
