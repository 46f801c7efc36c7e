"""The outbound URL policy: which URLs Switchboard may call (agents, event subscribers).

Agents publish their own dispatch URL through their card and admins set subscription URLs;
without a policy Switchboard would POST session data wherever it is told, cloud metadata
services and other processes on the host included. The same rules run twice: when a URL is
registered (a 422 naming the field) and when a connection is made, on the addresses the
host name resolves to at that moment, so a name that later resolves elsewhere (DNS
rebinding) is still refused. Every rule reads its data from ``OutboundSettings``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

import httpx

from app.errors import ValidationFailed
from app.settings import OutboundSettings

IPAddress = IPv4Address | IPv6Address
IPNetwork = IPv4Network | IPv6Network
# host, port -> the addresses the name resolves to now, in the order to try them.
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]


def _networks(*cidrs: str) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(cidr) for cidr in cidrs)


# Cloud instance-metadata services (AWS IPv4 and IPv6, GCP IPv6, Alibaba; Azure, GCP and
# OpenStack IPv4 share AWS's address; ECS task metadata is 169.254.170.2): whoever reaches
# them gets the host's credentials. Refused whatever the settings say.
METADATA_NETWORKS = _networks(
    "169.254.169.254/32", "169.254.170.2/32", "fd00:ec2::254/128", "fd20:ce::254/128",
    "100.100.100.200/32",
)  # fmt: skip
# Their names too, so a URL naming one is refused even where the name does not resolve.
METADATA_HOSTS = ("metadata.google.internal", "metadata.goog")
# Never an HTTP server a message should reach: "this network" (0.0.0.0 connects to the
# host itself on Linux), the unspecified IPv6 address, multicast, broadcast and reserved.
# Also the IPv6 ranges that only tunnel to or translate somewhere else (Teredo, the
# deprecated site-local range): no agent is reached through them on purpose.
NEVER_NETWORKS = _networks(
    "0.0.0.0/8", "::/128", "224.0.0.0/4", "ff00::/8", "240.0.0.0/4", "255.255.255.255/32",
    "2001::/32", "fec0::/10",
)  # fmt: skip
LOOPBACK_NETWORKS = _networks("127.0.0.0/8", "::1/128")
LINK_LOCAL_NETWORKS = _networks("169.254.0.0/16", "fe80::/10")
# RFC 1918, IPv6 unique local addresses, and the shared address space (carrier-grade NAT,
# and overlay networks such as Tailscale).
PRIVATE_NETWORKS = _networks(
    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "100.64.0.0/10"
)
# IPv6 addresses that carry an IPv4 address in their last 32 bits, which a stack or a
# gateway may use: NAT64's well-known prefix and its local-use one (RFC 8215), the
# IPv4-translated form (SIIT, ::ffff:0:0:0/96) and the deprecated IPv4-compatible form
# (6to4 and IPv4-mapped addresses have their own properties).
_CARRIES_IPV4_IN_LAST_32 = _networks("64:ff9b::/96", "64:ff9b:1::/48", "::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


class OutboundRefused(httpx.TransportError):
    """The outbound policy refused a URL or every address its host resolves to.

    An ``httpx.TransportError``, so a caller that handles transport failures handles this
    one too; callers that can say more (the dispatcher, event delivery) catch it first."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused by the outbound policy: {reason}")
        self.reason = reason


@dataclass(frozen=True, slots=True)
class HostPattern:
    """An exact host name, or ``*.example.com`` for any name below example.com."""

    pattern: str

    def matches(self, host: str) -> bool:
        """True if ``host`` (normalised) is this name or, for a wildcard, below it."""
        if self.pattern.startswith("*."):
            return host.endswith(self.pattern[1:])
        return host == self.pattern


def normalise_host(host: str) -> str:
    """Lower case, no trailing dot, no IPv6 brackets: how host rules compare names."""
    return host.strip("[]").rstrip(".").lower()


def rule_host(host: str) -> str:
    """A host rule from the settings, spelled as a URL's host is compared: a name written
    in Unicode becomes its IDNA (punycode) form, as httpx encodes it; ``*.`` stays."""
    wildcard = host.startswith("*.")
    name = normalise_host(host[2:] if wildcard else host)
    if not name.isascii():
        name = httpx.URL(f"http://{name}/").raw_host.decode("ascii")
    return f"*.{name}" if wildcard else name


def literal_address(host: str) -> IPAddress | None:
    """The address a host names literally, or None for a name."""
    try:
        return ipaddress.ip_address(normalise_host(host))
    except ValueError:
        return None


def _views(address: IPAddress) -> list[IPAddress]:
    """The address, and the IPv4 address an IPv6 one carries (mapped, 6to4, NAT64)."""
    views: list[IPAddress] = [address]
    if isinstance(address, IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        compatible = address in _IPV4_COMPATIBLE and int(address) > 1  # not :: nor ::1
        if embedded is None and (_within(address, _CARRIES_IPV4_IN_LAST_32) or compatible):
            embedded = IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            views.append(embedded)
    return views


def _within(address: IPAddress, networks: Iterable[IPNetwork]) -> bool:
    return any(address.version == net.version and address in net for net in networks)


class OutboundPolicy:
    """Decides whether a URL may be called and which resolved addresses may be used."""

    def __init__(self, settings: OutboundSettings, resolver: Resolver | None = None) -> None:
        self._settings = settings
        self._resolve = resolver or system_resolver
        self._metadata_hosts = [HostPattern(h) for h in METADATA_HOSTS]
        self._allow_hosts = [HostPattern(rule_host(h)) for h in settings.allow_hosts]
        self._deny_hosts = [HostPattern(rule_host(h)) for h in settings.deny_hosts]
        self._allow_networks = tuple(settings.allow_networks)

    def refusal_for_url(self, url: httpx.URL) -> str | None:
        """Why ``url`` may not be called on its face (scheme, host name, literal address),
        or None. Says nothing of the addresses a host name resolves to."""
        if url.scheme not in self._settings.allowed_schemes:
            allowed = ", ".join(self._settings.allowed_schemes)
            return f"scheme {url.scheme!r} is not allowed (allowed: {allowed})"
        host = normalise_host(url.raw_host.decode("ascii"))
        if not host:
            return "the URL has no host"
        return self.refusal_for_host(host)

    def refusal_for_host(self, host: str) -> str | None:
        """Why a host may not be called whatever it resolves to, or None."""
        host = normalise_host(host)
        if any(p.matches(host) for p in self._metadata_hosts):
            return f"{host} is a cloud metadata service"
        if any(p.matches(host) for p in self._deny_hosts):
            return f"{host} is in SWITCHBOARD_OUTBOUND_DENY_HOSTS"
        address = literal_address(host)
        if address is not None:
            return self.refusal_for_address(host, address)
        listed = any(p.matches(host) for p in self._allow_hosts)
        if self._allow_hosts and not self._allow_networks and not listed:
            # Only names are allowed: no address this name resolves to could pass.
            return f"{host} is not in SWITCHBOARD_OUTBOUND_ALLOW_HOSTS"
        return None

    def refusal_for_address(self, host: str, address: IPAddress) -> str | None:
        """Why ``host`` may not be reached at ``address``, or None. Deny rules always win;
        an allow list, when set, narrows what is left (it never reopens a denied address)."""
        host = normalise_host(host)
        named = f"{host}" if literal_address(host) == address else f"{host} ({address})"
        for view in _views(address):
            why = self._denied(view)
            if why is not None:
                carried = "" if view == address else f" carries {view}, which"
                return f"{named}{carried} is {why}"
        if self._allow_hosts or self._allow_networks:
            listed = any(p.matches(host) for p in self._allow_hosts)
            if not listed and not _within(address, self._allow_networks):
                return (
                    f"{named} is in neither SWITCHBOARD_OUTBOUND_ALLOW_HOSTS nor "
                    "SWITCHBOARD_OUTBOUND_ALLOW_NETWORKS"
                )
        return None

    def _denied(self, address: IPAddress) -> str | None:
        settings = self._settings
        if _within(address, METADATA_NETWORKS):
            return "a cloud metadata address"
        if _within(address, settings.deny_networks):
            return "in SWITCHBOARD_OUTBOUND_DENY_NETWORKS"
        if _within(address, NEVER_NETWORKS):
            return "an unspecified, multicast, broadcast or reserved address"
        if _within(address, LOOPBACK_NETWORKS) and not settings.allow_loopback:
            return "a loopback address (SWITCHBOARD_OUTBOUND_ALLOW_LOOPBACK is off)"
        if _within(address, LINK_LOCAL_NETWORKS) and not settings.allow_link_local:
            return "a link-local address (SWITCHBOARD_OUTBOUND_ALLOW_LINK_LOCAL is off)"
        if _within(address, PRIVATE_NETWORKS) and not settings.allow_private:
            return "a private address (SWITCHBOARD_OUTBOUND_ALLOW_PRIVATE is off)"
        return None

    async def usable_addresses(self, host: str, port: int) -> list[IPAddress]:
        """The addresses ``host`` resolves to now that may be connected to, in order.

        Raises ``OutboundRefused`` when the host is refused or none of its addresses may
        be used, and ``OSError`` when it does not resolve."""
        why = self.refusal_for_host(host)
        if why is not None:
            raise OutboundRefused(why)
        literal = literal_address(host)
        addresses = [literal] if literal is not None else await self._resolve(host, port)
        usable: list[IPAddress] = []
        refusals: list[str] = []
        for address in addresses:
            why = self.refusal_for_address(host, address)
            if why is None:
                usable.append(address)
            else:
                refusals.append(why)
        if not usable:
            raise OutboundRefused(refusals[0] if refusals else f"{host} has no address")
        return usable

    async def registration_refusal(self, url: str) -> str | None:
        """Why ``url`` may not be registered, or None.

        A host name is resolved too, and refused when every address it has now is refused.
        A name that does not resolve (yet), or not within the resolve timeout, is accepted:
        resolution can change either way, and every connection is checked again."""
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL:
            return "the HTTP client cannot parse this URL"
        why = self.refusal_for_url(parsed)
        if why is not None:
            return why
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            async with asyncio.timeout(self._settings.resolve_timeout):
                await self.usable_addresses(parsed.raw_host.decode("ascii"), port)
        except OutboundRefused as refused:
            return refused.reason
        except (OSError, TimeoutError, UnicodeError):
            return None
        return None

    async def require_registrable(self, url: str, field: str) -> None:
        """422 naming ``field`` when ``url`` may not be registered (see
        ``registration_refusal``)."""
        why = await self.registration_refusal(url)
        if why is not None:
            raise ValidationFailed(
                f"Switchboard may not send requests to this URL: {why}.",
                errors=[{"field": field, "message": f"not an allowed destination: {why}"}],
            )


async def system_resolver(host: str, port: int) -> list[IPAddress]:
    """The addresses ``host`` resolves to (the system resolver, off the event loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
    )
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    return addresses
