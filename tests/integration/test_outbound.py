"""The outbound URL policy through the API: refused at registration (422 naming the field),
and refused again at connection time, against real listeners on 127.0.0.1 that must see no
connection when the address a name resolves to is not allowed."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any

import httpx
import pytest
from litestar import Litestar

from app.asgi import create_app
from app.clock import Clock, FrozenClock
from app.db.pool import Database
from app.events.service import EventService
from app.outbound.policy import IPAddress, OutboundPolicy
from app.outbound.transport import OutboundTransport, outbound_client
from app.settings import (
    CoordinationSettings,
    DatabaseSettings,
    OutboundSettings,
    SchedulerSettings,
    Settings,
)
from tests.agent_server import AgentServer
from tests.conftest import ADMIN_KEY, app_client, lifespan_of
from tests.integration.helpers import assert_problem, create_session

# Everything spelt out, so nothing comes from the environment: the defaults, plus one
# denied network.
STRICT = OutboundSettings(
    allowed_schemes=["http", "https"],
    allow_hosts=[],
    allow_networks=[],
    deny_hosts=[],
    deny_networks=[ip_network("203.0.113.0/24")],
    allow_loopback=False,
    allow_private=True,
    allow_link_local=False,
    resolve_timeout=2.0,
)
LOOSE = STRICT.model_copy(update={"allow_loopback": True})


def settings_with(outbound: OutboundSettings) -> Settings:
    return Settings(
        database=DatabaseSettings(pool_min_size=1, pool_max_size=3),
        coordination=CoordinationSettings(breaker_sync_seconds=0.2, rules_cache_seconds=0),
        outbound=outbound,
    )


@pytest.fixture
def settings() -> Settings:
    """The app under test (``client``) has the default policy: loopback refused."""
    return settings_with(STRICT)


@pytest.fixture
async def agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer().start()
    yield server
    await server.stop()


@pytest.fixture
async def loose_admin(
    database_url: str, client: httpx.AsyncClient
) -> AsyncIterator[httpx.AsyncClient]:
    """An admin client of a second app on the same database whose policy allows loopback:
    what was registered before the policy was tightened."""
    loose = create_app(
        settings_with(LOOSE), database_url=database_url, admin_key=ADMIN_KEY, run_scheduler=False
    )
    async with lifespan_of(loose), app_client(loose, {"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        yield c


REFUSED = {
    "metadata": "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
    "metadata-as-one-number": "http://2852039166/latest/meta-data/",
    "loopback-v4": "http://127.0.0.1:5678/webhook/agent",
    "loopback-v6": "http://[::1]:5678/webhook/agent",
    "denied-network": "http://203.0.113.7/agent",
    "name-resolving-to-loopback": "http://localhost:5678/webhook/agent",
}


@pytest.mark.parametrize("url", list(REFUSED.values()), ids=list(REFUSED))
async def test_registration_refuses_internal_destinations(
    client: httpx.AsyncClient, make_agent_client: Any, url: str
) -> None:
    created = await client.post("/v1/agents", json={"name": "Sneaky_Agent", "url": url})
    assert assert_problem(created, 422)["errors"][0]["field"] == "url"
    assert_problem(await client.get("/v1/agents/Sneaky_Agent"), 404)

    changed = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": url})
    body = assert_problem(changed, 422)
    assert body["errors"][0]["field"] == "url"
    assert "not an allowed destination" in body["errors"][0]["message"]

    # Any agent key may publish its own card: that is how an agent would set the URL.
    async with await make_agent_client("Educate_Customer_Agent") as educator:
        card = {"name": "Educator", "url": url}
        published = await educator.post("/v1/agents/Educate_Customer_Agent/card", json=card)
        assert assert_problem(published, 422)["errors"][0]["field"] == "url"
    assert_problem(await client.get("/v1/agents/Educate_Customer_Agent/card"), 404)
    for name in ("Make_Plan_Agent", "Educate_Customer_Agent"):
        assert (await client.get(f"/v1/agents/{name}")).json()["url"] is None

    subscription = {"url": url, "event_types": ["session.expired"]}
    subscribed = await client.post("/v1/subscriptions", json=subscription)
    assert assert_problem(subscribed, 422)["errors"][0]["field"] == "url"
    assert (await client.get("/v1/subscriptions")).json() == []


ALLOWED = {
    "private-rfc1918": "http://10.0.0.5:5678/webhook/agent",
    "private-home": "http://192.168.1.20/webhook/agent",
    "public-looking": "https://198.51.100.7/agent",
    # Names that do not resolve (yet) are accepted: every connection is checked again.
    "unresolvable-name": "https://agents.example.invalid/hook",
}


@pytest.mark.parametrize("url", list(ALLOWED.values()), ids=list(ALLOWED))
async def test_registration_allows_private_and_public_destinations(
    client: httpx.AsyncClient, url: str
) -> None:
    changed = await client.patch("/v1/agents/Make_Plan_Agent", json={"url": url})
    assert changed.status_code == 200, changed.text
    assert changed.json()["url"] == url
    card = {"name": "Planner", "url": url}
    published = await client.post("/v1/agents/Make_Plan_Agent/card", json=card)
    assert published.status_code == 200, published.text
    subscription = {"url": url, "event_types": ["session.expired"]}
    assert (await client.post("/v1/subscriptions", json=subscription)).status_code == 201


async def test_an_agent_url_registered_before_the_policy_tightened_is_never_connected_to(
    client: httpx.AsyncClient, loose_admin: httpx.AsyncClient, agent: AgentServer
) -> None:
    """``localhost`` resolves to 127.0.0.1 when the call is made; this app refuses loopback,
    so the agent must see no connection, and the turn gets the fallback, not a 500."""
    url = agent.url.replace("127.0.0.1", "localhost")
    registered = await loose_admin.patch(
        "/v1/agents/Educate_Customer_Agent",
        json={"url": url, "retry_attempts": 2, "fail_max": 1},
    )
    assert registered.status_code == 200, registered.text

    session = await create_session(client)
    answer = await client.post(
        f"/v1/sessions/{session['session_id']}/messages",
        json={"text": "what is compound interest"},
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["degraded"] is True
    assert answer.json()["fallback"] == "static_educational_content"
    assert agent.connections == 0
    decision = (await client.get(f"/v1/sessions/{session['session_id']}/decisions")).json()[
        "items"
    ][0]
    assert "refused by the outbound policy" in decision["error"]
    assert "loopback" in decision["error"]
    assert decision["attempts"] == 1  # a refusal is not retried: nothing would change
    # ... and it counts as the agent's failure: fail_max=1 opened the breaker.
    breaker = (await client.get("/v1/agents/Educate_Customer_Agent/breaker")).json()
    assert breaker["state"] == "open"

    # The looser app (loopback allowed) does reach the same agent at the same URL.
    session = await create_session(loose_admin)
    await loose_admin.post("/v1/agents/Educate_Customer_Agent/breaker", json={"state": "closed"})
    answer = await loose_admin.post(
        f"/v1/sessions/{session['session_id']}/messages",
        json={"text": "what is compound interest"},
    )
    assert answer.json()["degraded"] is False, answer.text
    assert agent.connections == 1


class RebindingResolver:
    """Resolves every name to ``first`` once, then to ``later``: a DNS server that
    answers the check with one address and the connection with another."""

    def __init__(self, first: str, later: str) -> None:
        self.first, self.later = ip_address(first), ip_address(later)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        return [self.first if len(self.asked) == 1 else self.later]


async def _app_with_resolver(
    database_url: str, outbound: OutboundSettings, resolver: RebindingResolver
) -> Litestar:
    return create_app(
        settings_with(outbound),
        database_url=database_url,
        admin_key=ADMIN_KEY,
        run_scheduler=False,
        resolver=resolver,
    )


@pytest.mark.parametrize("outbound", [STRICT, LOOSE], ids=["loopback-refused", "loopback-on"])
async def test_dns_rebinding_between_registration_and_call_does_not_pass(
    database_url: str, agent: AgentServer, outbound: OutboundSettings
) -> None:
    """The name resolves to a public address when registered and to 127.0.0.1 when called.
    With loopback refused nothing reaches the listener; with loopback allowed the request
    arrives there although the name exists in no DNS, keeping its Host header: the
    connection goes to the address the policy checked, not to a second lookup."""
    resolver = RebindingResolver(first="198.51.100.7", later="127.0.0.1")
    port = agent.port
    url = f"http://educator.rebinding.test:{port}/agent"
    app = await _app_with_resolver(database_url, outbound, resolver)
    async with lifespan_of(app), app_client(app, {"Authorization": f"Bearer {ADMIN_KEY}"}) as c:
        registered = await c.patch(
            "/v1/agents/Educate_Customer_Agent", json={"url": url, "retry_attempts": 0}
        )
        assert registered.status_code == 200, registered.text
        session = await create_session(c)
        answer = await c.post(
            f"/v1/sessions/{session['session_id']}/messages",
            json={"text": "what is compound interest"},
        )
        assert answer.status_code == 200, answer.text
    assert resolver.asked == ["educator.rebinding.test"] * 2
    if outbound.allow_loopback:
        assert answer.json()["degraded"] is False
        assert agent.connections == 1
        assert agent.headers[0]["host"] == f"educator.rebinding.test:{port}"
    else:
        assert answer.json()["degraded"] is True
        assert agent.connections == 0


CERTS = Path(__file__).resolve().parent.parent / "certs"


async def test_tls_is_verified_against_the_url_name_not_the_address_connected_to() -> None:
    """The transport connects to 127.0.0.1 itself; TLS still sends the URL's name (SNI) and
    checks the certificate against it. The certificate names only educator.rebinding.test,
    so a check against the address would fail."""
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(CERTS / "educator.pem", CERTS / "educator.key")
    agent = await AgentServer().start(tls=server_tls)
    trusted = ssl.create_default_context(cafile=str(CERTS / "educator.pem"))

    async def to_loopback(host: str, port: int) -> list[IPAddress]:
        return [ip_address("127.0.0.1")]

    policy = OutboundPolicy(LOOSE, to_loopback)
    try:
        transport = OutboundTransport(policy, verify=trusted)
        async with httpx.AsyncClient(transport=transport, trust_env=False) as http:
            named = await http.post(f"https://educator.rebinding.test:{agent.port}/agent", json={})
            assert named.status_code == 200, named.text
            assert agent.headers[0]["host"] == f"educator.rebinding.test:{agent.port}"
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await http.post(f"https://127.0.0.1:{agent.port}/agent", json={})
    finally:
        await agent.stop()


class TestEventDelivery:
    @pytest.fixture
    def clock(self, frozen_clock: FrozenClock) -> Clock:
        return frozen_clock

    @pytest.fixture
    async def database(self, database_url: str) -> AsyncIterator[Database]:
        db = Database(database_url, DatabaseSettings(pool_min_size=1, pool_max_size=2))
        await db.open()
        yield db
        await db.close()

    @pytest.fixture
    def deliver(
        self, database: Database, frozen_clock: FrozenClock
    ) -> Callable[[OutboundSettings], Awaitable[int]]:
        """Deliver what is due once, as a scheduler with ``outbound`` as its policy would."""

        async def run(outbound: OutboundSettings) -> int:
            policy = OutboundPolicy(outbound)
            async with outbound_client(policy) as http:
                events = EventService(database, frozen_clock, SchedulerSettings(), http, policy)
                return await events.deliver_due()

        return run

    async def test_delivery_to_a_refused_subscriber_fails_without_a_connection(
        self,
        client: httpx.AsyncClient,
        frozen_clock: FrozenClock,
        database_url: str,
        deliver: Callable[[OutboundSettings], Awaitable[int]],
    ) -> None:
        receiver = await AgentServer(reply={"ok": True}).start()
        try:
            loose = create_app(
                settings_with(LOOSE),
                database_url=database_url,
                admin_key=ADMIN_KEY,
                clock=frozen_clock,
                run_scheduler=False,
            )
            headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
            async with lifespan_of(loose), app_client(loose, headers) as loose_admin:
                subscription = {"url": receiver.url, "event_types": ["session.expired"]}
                subscribed = await loose_admin.post("/v1/subscriptions", json=subscription)
                assert subscribed.status_code == 201, subscribed.text
            await create_session(client, ttl_seconds=3600)
            frozen_clock.advance(timedelta(hours=2))
            assert (await client.post("/v1/jobs/expiry_cleanup/run")).status_code == 200

            assert await deliver(STRICT) == 1
            assert receiver.connections == 0
            pending = (await client.get("/v1/events", params={"status": "pending"})).json()
            [delivery] = pending["items"]
            assert delivery["attempts"] == 1
            assert delivery["last_error"].startswith("refused by the outbound policy: 127.0.0.1")

            # Under a policy that allows it, the same delivery goes through.
            frozen_clock.advance(timedelta(hours=1))
            assert await deliver(LOOSE) == 1
            assert receiver.connections == 1
            delivered = (await client.get("/v1/events", params={"status": "delivered"})).json()
            assert len(delivered["items"]) == 1
        finally:
            await receiver.stop()
