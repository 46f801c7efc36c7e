"""Talking A2A 1.0 to agents with the official a2a-sdk: fetching an agent's card from its
``/.well-known/agent-card.json`` (the SDK's card resolver) and sending a message with
``SendMessage`` over the JSON-RPC binding (the SDK's client; 0.3 agents get the SDK's
compatibility transport). Nothing here writes the wire format.

Every request goes through an HTTP client built like the outbound one
(``app.outbound.transport.outbound_client``: the outbound policy on every connection, no
proxies, no redirects, a client span whose ``traceparent`` the request carries), with the
answer's size bounded. It is a client of its own because the SDK's client factory stamps
its ``A2A-Version`` header on the client it is given, which the agents of the seed's
protocol and the event subscribers have no use for.

Failures are ``A2AFailure`` with whether another attempt may help; what the answer means
for Switchboard is ``app.coordination.a2a_answers``'s business.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    A2AClientTimeoutError,
    AgentCardResolutionError,
    ClientCallContext,
    ClientConfig,
    ClientFactory,
)
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    Message,
    SendMessageRequest,
    Task,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT, TransportProtocol
from a2a.utils.errors import A2AError, InternalError
from google.protobuf.json_format import MessageToDict, ParseError

from app.outbound.policy import OutboundPolicy, OutboundRefused
from app.outbound.transport import OutboundTransport

if TYPE_CHECKING:
    from app.tracing import Tracing

# The header a Switchboard request id travels in (the same request id the seed's JSON
# request carries in its body).
REQUEST_ID_HEADER = "X-Request-ID"


class AnswerTooLarge(httpx.TransportError):
    """The agent answered more than the bound; nothing past it was read."""


class A2AFailure(Exception):
    """A call (or a card fetch) failed; ``retryable`` says whether another may help."""

    def __init__(self, reason: str, *, retryable: bool, malformed: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        # The agent answered something that is not an A2A answer.
        self.malformed = malformed


class CardUnreachable(Exception):
    """The card could not be fetched: no answer, an HTTP error, or a refused address."""


class CardInvalid(Exception):
    """The card was fetched but is not a card Switchboard can use."""


@dataclass(frozen=True, slots=True)
class FetchedCard:
    """A card as fetched: the SDK's message and its JSON (A2A 1.0 field names)."""

    card: AgentCard
    document: dict[str, Any]


@dataclass(frozen=True, slots=True)
class A2AInterface:
    """The JSON-RPC interface of a card: where SendMessage goes, and its protocol version."""

    url: str
    protocol_version: str


def jsonrpc_interface(card: AgentCard) -> A2AInterface | None:
    """The JSON-RPC interface the SDK's client would pick for ``card`` (1.0 first), if any."""
    interface = ClientFactory._find_best_interface(
        list(card.supported_interfaces), protocol_bindings=[TransportProtocol.JSONRPC]
    )
    if interface is None or not interface.url:
        return None
    return A2AInterface(interface.url, interface.protocol_version or PROTOCOL_VERSION_CURRENT)


class _BoundedStream(httpx.AsyncByteStream):
    """An answer's body, refused once it is longer than ``limit``."""

    def __init__(self, inner: httpx.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        size = 0
        async for chunk in self._inner:
            size += len(chunk)
            if size > self._limit:
                raise AnswerTooLarge(f"agent answered more than {self._limit} bytes")
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class BoundedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport: an answer longer than ``limit`` bytes is not read past it (the
    SDK reads whole answers: an agent cannot make a replica hold gigabytes)."""

    def __init__(self, inner: httpx.AsyncBaseTransport, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The inner transport's answer, its body bounded."""
        response = await self._inner.handle_async_request(request)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._limit:
            await response.aclose()
            raise AnswerTooLarge(f"agent answered more than {self._limit} bytes")
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_BoundedStream(stream, self._limit),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


class A2AClient:
    """Fetches agent cards and sends A2A messages through ``http`` (see the module doc)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self._http = http
        # Blocking SendMessage (no streaming): the answer is the task as it stands when it
        # is completed or interrupted (input-required), or the agent's message.
        self._factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http))

    async def aclose(self) -> None:
        """Release the client's connections."""
        await self._http.aclose()

    async def fetch_card(self, base_url: str, timeout: float) -> FetchedCard:  # noqa: ASYNC109
        """The card at ``<base_url>/.well-known/agent-card.json``, parsed by the SDK.
        ``CardUnreachable`` or ``CardInvalid`` when it cannot be had or used."""
        resolver = A2ACardResolver(self._http, base_url)
        try:
            async with asyncio.timeout(timeout):
                card = await resolver.get_agent_card(http_kwargs={"timeout": timeout})
        except TimeoutError:
            raise CardUnreachable(f"no card within {timeout:g} s") from None
        except AgentCardResolutionError as exc:
            if _caused_by(exc, json.JSONDecodeError) or _caused_by(exc, ParseError):
                raise CardInvalid(_card_reason(exc)) from None
            if exc.status_code is not None:
                raise CardUnreachable(f"the card's URL answered HTTP {exc.status_code}") from None
            raise CardUnreachable(_card_reason(exc)) from None
        except (OutboundRefused, AnswerTooLarge) as exc:
            raise CardUnreachable(str(exc)) from None
        except httpx.HTTPError as exc:
            raise CardUnreachable(f"transport error: {type(exc).__name__}") from None
        except (ParseError, ValueError, TypeError) as exc:
            raise CardInvalid(f"not an agent card: {exc}") from None
        return FetchedCard(card, MessageToDict(card))

    async def send_message(
        self, interface: A2AInterface, message: Message, request_id: str
    ) -> Task | Message:
        """``SendMessage`` to the agent at ``interface``: the task it answered with (as it
        stands once completed or interrupted) or its message. Raises ``A2AFailure``."""
        card = AgentCard(
            supported_interfaces=[
                AgentInterface(
                    url=interface.url,
                    protocol_binding=TransportProtocol.JSONRPC,
                    protocol_version=interface.protocol_version,
                )
            ],
            capabilities=AgentCapabilities(streaming=False),
        )
        client = self._factory.create(card)
        context = ClientCallContext(service_parameters={REQUEST_ID_HEADER: request_id})
        try:
            async for event in client.send_message(
                SendMessageRequest(message=message), context=context
            ):
                if event.HasField("task"):
                    return event.task
                if event.HasField("message"):
                    return event.message
            raise A2AFailure("agent answered neither a task nor a message", retryable=False)
        except A2AFailure:
            raise
        except A2AError as exc:
            raise _failure(exc) from None
        except (OutboundRefused, AnswerTooLarge) as exc:
            raise A2AFailure(str(exc), retryable=False) from None
        except httpx.HTTPError as exc:
            raise A2AFailure(f"transport error: {type(exc).__name__}", retryable=True) from None
        except (ParseError, ValueError, KeyError, TypeError):
            raise A2AFailure(
                "agent answered what is not an A2A answer", retryable=False, malformed=True
            ) from None
        finally:
            await client.close()


def _failure(exc: A2AError) -> A2AFailure:
    """An SDK error as a failed attempt: what the agent (or the network) said, and whether
    another attempt may help (a timeout, a transport error, a 5xx or 429, the agent's
    internal error may pass; a refusal, a 4xx, an A2A error about the request will not)."""
    if isinstance(exc, A2AClientTimeoutError):
        return A2AFailure("timeout", retryable=True)
    cause = exc.__cause__
    if isinstance(cause, OutboundRefused | AnswerTooLarge):
        return A2AFailure(str(cause), retryable=False)
    if isinstance(cause, httpx.HTTPStatusError):
        status = cause.response.status_code
        return A2AFailure(f"agent answered HTTP {status}", retryable=status >= 500 or status == 429)
    if isinstance(cause, httpx.HTTPError):
        return A2AFailure(f"transport error: {type(cause).__name__}", retryable=True)
    if isinstance(cause, json.JSONDecodeError):
        return A2AFailure("agent answered malformed JSON", retryable=False, malformed=True)
    if type(exc) is A2AClientError:
        return A2AFailure(f"agent answered: {exc.message}", retryable=False, malformed=True)
    return A2AFailure(
        f"agent answered A2A error {type(exc).__name__}: {exc.message}",
        retryable=isinstance(exc, InternalError),
    )


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    cause = exc.__cause__
    while cause is not None:
        if isinstance(cause, kind):
            return True
        cause = cause.__cause__
    return False


def _card_reason(exc: AgentCardResolutionError) -> str:
    cause = exc.__cause__
    if isinstance(cause, OutboundRefused | AnswerTooLarge):
        return str(cause)
    if isinstance(cause, httpx.HTTPError):
        return f"transport error: {type(cause).__name__}"
    return exc.message[:500]


def a2a_http_client(
    policy: OutboundPolicy, max_answer_bytes: int, *, tracing: Tracing | None = None
) -> httpx.AsyncClient:
    """The HTTP client of ``A2AClient``: the outbound policy's transport, traced like the
    outbound client, answers bounded to ``max_answer_bytes``; no proxies, no redirects,
    deadlines set per call."""
    transport: httpx.AsyncBaseTransport = OutboundTransport(policy)
    if tracing is not None:
        transport = tracing.instrument(transport)
    return httpx.AsyncClient(
        transport=BoundedTransport(transport, max_answer_bytes),
        timeout=None,  # noqa: S113 - each caller sets its deadline
        follow_redirects=False,
        trust_env=False,
    )
