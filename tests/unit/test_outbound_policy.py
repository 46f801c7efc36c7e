"""The outbound URL policy's rules, with resolvers that answer what each test needs."""

from __future__ import annotations

import asyncio
import ssl
from ipaddress import ip_address, ip_network
from typing import Any

import certifi
import httpx
import pytest

from app.outbound.policy import IPAddress, OutboundPolicy, OutboundRefused
from app.settings import OutboundSettings


def settings(**overrides: Any) -> OutboundSettings:
    """Every field given, so nothing comes from the environment of the test run."""
    values: dict[str, Any] = {
        "allowed_schemes": ["http", "https"],
        "allow_hosts": [],
        "allow_networks": [],
        "deny_hosts": [],
        "deny_networks": [],
        "allow_loopback": False,
        "allow_private": True,
        "allow_link_local": False,
        "resolve_timeout": 2.0,
    }
    values.update(overrides)
    return OutboundSettings(**values)


def resolving_to(*addresses: str) -> Any:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        return [ip_address(a) for a in addresses]

    return resolve


async def not_resolving(host: str, port: int) -> list[IPAddress]:
    raise OSError(-2, "Name or service not known")


def refusal(url: str, **overrides: Any) -> str | None:
    return OutboundPolicy(settings(**overrides), not_resolving).refusal_for_url(httpx.URL(url))


def test_the_defaults_refuse_loopback_and_link_local_and_allow_private() -> None:
    fields = OutboundSettings.model_fields
    assert fields["allow_loopback"].default is False
    assert fields["allow_link_local"].default is False
    assert fields["allow_private"].default is True


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",  # cloud metadata
        "http://169.254.170.2/v2/credentials",  # ECS task metadata
        "http://[fd00:ec2::254]/",  # AWS metadata over IPv6 (a unique local address)
        "http://100.100.100.200/",  # Alibaba metadata (inside the private 100.64/10)
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://METADATA.google.internal./",
        "http://169.254.1.1/",  # link-local
        "http://[fe80::1]/",
        "http://127.0.0.1:8080/",  # loopback
        "http://127.8.9.10/",
        "http://[::1]:5678/",
        "http://0.0.0.0:8080/",  # connects to the host itself on Linux
        "http://0.1.2.3/",
        "http://[::]/",
        "http://224.0.0.1/",  # multicast
        "http://255.255.255.255/",
        "http://240.0.0.1/",  # reserved
        "http://[::ffff:169.254.169.254]/",  # IPv4-mapped
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",  # NAT64 of the metadata address
        "http://[2002:7f00:1::]/",  # 6to4 of 127.0.0.1
        "http://[::127.0.0.1]/",  # IPv4-compatible (deprecated)
        "http://[::ffff:0:a9fe:a9fe]/",  # IPv4-translated (SIIT) of the metadata address
        "http://[64:ff9b:1::a9fe:a9fe]/",  # local-use NAT64 of it
        "http://[2001::1]/",  # Teredo
        "http://[fec0::1]/",  # site-local (deprecated)
    ],
)
def test_refused_by_default(url: str) -> None:
    assert refusal(url) is not None


@pytest.mark.parametrize(
    "url",
    [
        "http://10.1.2.3:5678/webhook/agent",
        "http://172.16.0.9/",
        "http://192.168.1.20/",
        "http://[fd12:3456::1]/",
        "http://100.101.102.103/",  # shared address space (Tailscale, carrier NAT)
        "https://198.51.100.7/agent",
        "https://n8n.example.com/webhook/agent",  # a name: its addresses are checked later
    ],
)
def test_allowed_by_default(url: str) -> None:
    assert refusal(url) is None


def test_metadata_stays_refused_whatever_is_allowed() -> None:
    everything = {
        "allow_loopback": True,
        "allow_link_local": True,
        "allow_networks": [ip_network("0.0.0.0/0"), ip_network("::/0")],
        "allow_hosts": ["metadata.google.internal"],
    }
    assert refusal("http://169.254.169.254/", **everything) is not None
    assert refusal("http://[fd00:ec2::254]/", **everything) is not None
    assert refusal("http://metadata.google.internal/", **everything) is not None
    assert refusal("http://0.0.0.0/", **everything) is not None
    # ... while the switches do open what they name
    assert refusal("http://127.0.0.1:5678/", **everything) is None
    assert refusal("http://169.254.1.1/", **everything) is None


def test_switches() -> None:
    assert refusal("http://127.0.0.1/", allow_loopback=True) is None
    assert refusal("http://[::1]/", allow_loopback=True) is None
    assert refusal("http://10.0.0.1/", allow_private=False) is not None
    assert refusal("http://[fc00::1]/", allow_private=False) is not None
    assert refusal("http://198.51.100.7/", allow_private=False) is None
    assert refusal("http://example.com/", allowed_schemes=["https"]) is not None
    assert refusal("https://example.com/", allowed_schemes=["https"]) is None


def test_deny_lists() -> None:
    denied = {
        "deny_networks": [ip_network("203.0.113.0/24"), ip_network("2001:db8::/32")],
        "deny_hosts": ["internal.example.com", "*.corp.example.com"],
    }
    assert refusal("http://203.0.113.9/", **denied) is not None
    assert refusal("http://[2001:db8::5]/", **denied) is not None
    assert refusal("http://203.0.114.9/", **denied) is None
    assert refusal("http://internal.example.com/", **denied) is not None
    assert refusal("http://Internal.Example.com./", **denied) is not None
    assert refusal("http://hr.corp.example.com/", **denied) is not None
    assert refusal("http://corp.example.com/", **denied) is None  # only names below it
    assert refusal("http://public.example.com/", **denied) is None
    # A rule written in Unicode matches the name however the URL spells it.
    unicode_rule = {"deny_hosts": ["bücher.example", "*.bücher.test"]}
    assert refusal("http://bücher.example/", **unicode_rule) is not None
    assert refusal("http://xn--bcher-kva.example/", **unicode_rule) is not None
    assert refusal("http://shop.xn--bcher-kva.test/", **unicode_rule) is not None


async def test_allow_lists_narrow_and_never_reopen() -> None:
    only = {
        "allow_hosts": ["n8n.example.com", "*.agents.example.com"],
        "allow_networks": [ip_network("10.20.0.0/16")],
    }
    assert refusal("https://n8n.example.com/", **only) is None
    assert refusal("https://plan.agents.example.com/", **only) is None
    assert refusal("http://10.20.3.4/", **only) is None
    assert refusal("http://10.21.3.4/", **only) is not None
    # Another name passes only where it resolves into an allowed network.
    inside = OutboundPolicy(settings(**only), resolving_to("10.20.9.9"))
    assert await inside.registration_refusal("https://elsewhere.example.com/") is None
    outside = OutboundPolicy(settings(**only), resolving_to("198.51.100.7"))
    assert await outside.registration_refusal("https://elsewhere.example.com/") is not None
    # With names alone allowed, another name is refused before any lookup.
    assert refusal("https://elsewhere.example.com/", allow_hosts=["n8n.example.com"]) is not None
    # An allowed network inside a refused category stays refused.
    assert refusal("http://127.0.0.1/", allow_networks=[ip_network("127.0.0.0/8")]) is not None
    named = OutboundPolicy(settings(allow_hosts=["n8n.example.com"]), resolving_to("127.0.0.1"))
    with pytest.raises(OutboundRefused, match="loopback"):
        await named.usable_addresses("n8n.example.com", 443)


async def test_connections_use_only_the_allowed_addresses_of_a_name() -> None:
    policy = OutboundPolicy(settings(), resolving_to("127.0.0.1", "10.0.0.7", "169.254.169.254"))
    assert await policy.usable_addresses("agent.example.com", 80) == [ip_address("10.0.0.7")]
    only_bad = OutboundPolicy(settings(), resolving_to("127.0.0.1", "169.254.169.254"))
    with pytest.raises(OutboundRefused, match="loopback"):
        await only_bad.usable_addresses("agent.example.com", 80)


async def test_registration_resolves_names() -> None:
    loopback_only = OutboundPolicy(settings(), resolving_to("127.0.0.1", "::1"))
    why = await loopback_only.registration_refusal("http://agent.example.com:5678/x")
    assert why is not None
    assert "loopback" in why
    mixed = OutboundPolicy(settings(), resolving_to("127.0.0.1", "198.51.100.7"))
    assert await mixed.registration_refusal("http://agent.example.com/") is None
    # A name that does not resolve (yet) is accepted: each connection is checked again.
    unknown = OutboundPolicy(settings(), not_resolving)
    assert await unknown.registration_refusal("http://agent.example.com/") is None


async def test_a_slow_resolver_does_not_hold_a_registration() -> None:
    async def slow(host: str, port: int) -> list[IPAddress]:
        await asyncio.sleep(10)
        return [ip_address("127.0.0.1")]

    policy = OutboundPolicy(settings(resolve_timeout=0.05), slow)
    assert await asyncio.wait_for(policy.registration_refusal("http://a.example/"), 1) is None


async def test_localhost_is_refused_through_the_system_resolver() -> None:
    policy = OutboundPolicy(settings())
    why = await policy.registration_refusal("http://localhost:5678/webhook")
    assert why is not None
    assert "loopback" in why


@pytest.mark.parametrize("host", ["2852039166", "0xa9.0xfe.0xa9.0xfe", "0x7f.1", "127.1"])
async def test_odd_spellings_of_an_address_are_refused_once_resolved(host: str) -> None:
    """The HTTP client passes such hosts to the resolver, which reads them as addresses
    (URLs registered through the API are stored already normalised by the URL parser)."""
    with pytest.raises(OutboundRefused):
        await OutboundPolicy(settings()).usable_addresses(host, 80)


def test_lists_come_comma_separated_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_ALLOWED_SCHEMES", "https")
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_DENY_NETWORKS", "203.0.113.0/24, 2001:db8::/32")
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_ALLOW_HOSTS", "n8n.example.com,*.agents.example")
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK", "true")
    loaded = OutboundSettings()
    assert loaded.allowed_schemes == ["https"]
    assert loaded.deny_networks == [ip_network("203.0.113.0/24"), ip_network("2001:db8::/32")]
    assert loaded.allow_hosts == ["n8n.example.com", "*.agents.example"]
    assert loaded.allow_loopback is True
    monkeypatch.setenv("SWITCHBOARD_OUTBOUND_ALLOWED_SCHEMES", "ftp")
    with pytest.raises(ValueError, match="allowed_schemes"):
        OutboundSettings()


def test_clients_share_one_loaded_ca_bundle_and_follow_ssl_cert_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Loading the CA bundle costs ~30 ms of CPU; every app built two clients, each loading it
    # twice (httpx's own pool and the policy's). It is loaded once per process now, and a
    # changed SSL_CERT_FILE still gives a context of its own, as httpx would.
    from app.outbound.transport import OutboundTransport

    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    first = OutboundTransport(OutboundPolicy(settings()))
    second = OutboundTransport(OutboundPolicy(settings()))
    contexts = {id(t._pool._ssl_context) for t in (first, second)}
    assert len(contexts) == 1
    assert first._pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
    monkeypatch.setenv("SSL_CERT_FILE", certifi.where())
    other = OutboundTransport(OutboundPolicy(settings()))
    assert id(other._pool._ssl_context) not in contexts
