"""The HTTP client for every outbound call, with the outbound policy enforced per connection.

A connection is opened by resolving the host name once, here, dropping every address the
policy refuses, and connecting to a remaining address itself: what was checked is what is
connected to, so a name that resolves to an allowed address for the check and to a
forbidden one a moment later (DNS rebinding) never reaches the forbidden one. The request
keeps the original name in its Host header, and TLS keeps it for SNI and certificate
verification (httpcore starts TLS with the origin's name, not the address connected to).

httpx does not take a network backend, so the transport builds the httpcore pool itself;
hand-written because the Python SSRF guards found (advocate) wrap requests, not httpx, and
the httpx ones are early releases.
"""

from __future__ import annotations

import asyncio
import functools
import os
import ssl
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from app.outbound.policy import OutboundPolicy, OutboundRefused

if TYPE_CHECKING:
    from app.tracing import Tracing

# httpx's own defaults.
_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)


class _ConnectRefused(httpcore.ConnectError):
    """Raised inside httpcore when the policy refuses every address; the transport turns
    it back into ``OutboundRefused`` (httpx would map it to a plain ConnectError)."""

    def __init__(self, refused: OutboundRefused) -> None:
        super().__init__(str(refused))
        self.refused = refused


class PolicyNetworkBackend(httpcore.AsyncNetworkBackend):
    """Resolves, filters through the policy, and connects to a checked address."""

    def __init__(
        self, policy: OutboundPolicy, inner: httpcore.AsyncNetworkBackend | None = None
    ) -> None:
        self._policy = policy
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Connect to the first address of ``host`` the policy allows that answers."""
        try:
            async with asyncio.timeout(timeout):
                addresses = await self._policy.usable_addresses(host, port)
        except OutboundRefused as refused:
            raise _ConnectRefused(refused) from None
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except (OSError, UnicodeError) as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        failure: Exception | None = None
        for address in addresses:
            try:
                # An address literal: the inner backend does not resolve anything again.
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # usable_addresses never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        """Never: outbound calls go to network addresses the policy has checked."""
        raise _ConnectRefused(OutboundRefused("unix sockets are not outbound destinations"))

    async def sleep(self, seconds: float) -> None:
        """As the inner backend sleeps."""
        await self._inner.sleep(seconds)


@functools.cache
def _trusted_context(_cert_file: str | None, _cert_dir: str | None) -> ssl.SSLContext:
    # Keyed by the variables httpx reads, so a changed SSL_CERT_FILE still takes effect.
    return httpx.create_ssl_context(verify=True)


def _ssl_context(verify: ssl.SSLContext | bool) -> ssl.SSLContext:
    """The context for ``verify``: the default one (the CA bundle) is loaded once per process.
    Loading it takes about 30 ms of CPU, and each client used to load it twice (httpx's own
    pool, then ours): a quarter of building an app (every test builds one)."""
    if verify is True:
        return _trusted_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
    return httpx.create_ssl_context(verify=verify)


class OutboundTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` whose every request and connection passes the policy."""

    def __init__(
        self,
        policy: OutboundPolicy,
        *,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        limits = limits or _LIMITS
        context = _ssl_context(verify)
        super().__init__(verify=context, limits=limits)
        self._policy = policy
        # The pool httpx would build, with the policy's backend (httpx has no parameter for
        # it). SSL_CERT_FILE / SSL_CERT_DIR are honoured as httpx honours them.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PolicyNetworkBackend(policy, network_backend),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Refuse a URL the policy refuses on its face; refuse any address it refuses."""
        why = self._policy.refusal_for_url(request.url)
        if why is not None:
            raise OutboundRefused(why)
        try:
            return await super().handle_async_request(request)
        except httpx.ConnectError as exc:
            if isinstance(exc.__cause__, _ConnectRefused):
                raise exc.__cause__.refused from None
            raise


def outbound_client(
    policy: OutboundPolicy,
    network_backend: httpcore.AsyncNetworkBackend | None = None,
    *,
    tracing: Tracing | None = None,
) -> httpx.AsyncClient:
    """The one HTTP client for agent calls and event delivery.

    No proxies from the environment (a proxy would make the connection instead, to an
    address nobody checked) and no redirects (a 3xx could point anywhere; it is an answer,
    not a hop). Deadlines are set per call by the callers. With ``tracing``, each call is
    a client span whose ``traceparent`` the request carries (a refused one too: the span
    records the refusal, and nothing is sent)."""
    transport: httpx.AsyncBaseTransport = OutboundTransport(policy, network_backend=network_backend)
    if tracing is not None:
        transport = tracing.instrument(transport)
    return httpx.AsyncClient(
        transport=transport,
        timeout=None,  # noqa: S113 - each caller sets its deadline
        follow_redirects=False,
        trust_env=False,
    )
