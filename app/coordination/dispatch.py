"""Calling an agent: the seed's request format over HTTP, or A2A SendMessage for an agent
whose card declares an A2A interface (app/outbound/a2a.py, its answer mapped by
app/coordination/a2a_answers.py), through the agent's circuit breaker, with retries
(exponential backoff and jitter) outside the breaker, all within the agent's timeout_ms.
An answer that is not quite JSON is repaired (app/coordination/answers.py). Any failure
ends in a result the caller turns into a fallback."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import orjson
from pydantic import ValidationError

from app.agents.schemas import Agent
from app.common.jsonbody import decode_json
from app.coordination.a2a_answers import (
    A2AAnswerFailed,
    A2AContinuation,
    A2AOutcome,
    a2a_message,
    outcome_of,
)
from app.coordination.answers import RepairKind, repair_answer
from app.coordination.breaker import AsyncCircuitBreaker, BreakerOpen
from app.coordination.intents import DetectedIntent
from app.coordination.schemas import (
    AgentContext,
    AgentInput,
    AgentRequest,
    AgentResponse,
    BranchAgentContext,
    ClassifierContext,
    ClassifierInput,
)
from app.errors import MalformedJson, TooDeeplyNested, ValidationFailed
from app.memories.schemas import BranchMemory
from app.outbound.a2a import A2AClient, A2AFailure, A2AInterface
from app.outbound.policy import OutboundRefused
from app.sessions.schemas import Session

# What an agent may answer when the caller names no bound: the default request body limit
# (1 MiB of memory content and 64 KiB around it), the most a client may send the other way.
DEFAULT_MAX_ANSWER_BYTES = 1024 * 1024 + 64 * 1024
DEFAULT_REPAIR_MAX_BYTES = 64 * 1024
# The reason of an answer that is not (repairable) JSON or not the response format: not
# retried within a call, but a durable task's next attempt may get a good one.
MALFORMED_ANSWER = "agent answered malformed JSON"


class AgentCallFailed(Exception):
    """An attempt failed; ``retryable`` says whether another attempt may help."""

    def __init__(self, reason: str, *, retryable: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class Answer:
    """An agent's valid answer, and what was wrong with its JSON if it had to be repaired."""

    response: AgentResponse
    repaired: RepairKind | None = None
    # An A2A agent's answer: the remote task's state, and what to continue if it asks.
    a2a: A2AOutcome | None = None


@dataclass(frozen=True, slots=True)
class CallResult:
    """How a call ended: a valid response, or the reason there is none."""

    response: AgentResponse | None
    attempts: int
    error: str | None
    elapsed_ms: int
    # The answer was not valid JSON and was repaired: cut off ("truncated") or broken
    # before its end ("malformed").
    repaired: RepairKind | None = None

    @property
    def ok(self) -> bool:
        """True when the agent answered with success."""
        return self.response is not None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Backoff between attempts: base * 2**n, capped, with full jitter."""

    base_seconds: float = 0.05
    cap_seconds: float = 2.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 0)."""
        return random.uniform(0, min(self.cap_seconds, self.base_seconds * 2**attempt))  # noqa: S311


class AgentClient:
    """Posts AgentCommunicationProtocol requests to agents' URLs.

    ``http`` is the outbound client (``app.outbound.transport.outbound_client``): it
    refuses a URL or address the outbound policy refuses, which is a failed attempt like
    any other (the breaker counts it, the fallback answers) that no retry would change.
    An answer longer than ``max_answer_bytes`` is not read past that (a failed attempt);
    one that is not JSON is repaired when it is at most ``repair_max_bytes`` long. An
    agent with an A2A interface (``a2a_url``) is sent A2A SendMessage by ``a2a``."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        retry: RetryPolicy | None = None,
        *,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        repair_max_bytes: int = DEFAULT_REPAIR_MAX_BYTES,
        a2a: A2AClient | None = None,
    ) -> None:
        self._http = http
        self._a2a = a2a
        self._retry = retry or RetryPolicy()
        self._max_answer_bytes = max_answer_bytes
        self._repair_max_bytes = repair_max_bytes

    async def call(
        self, agent: Agent, breaker: AsyncCircuitBreaker, request: AgentRequest
    ) -> CallResult:
        """Call ``agent`` until it answers, fails for good, its circuit opens or time is up."""
        started = time.monotonic()
        deadline = started + agent.timeout_ms / 1000
        attempts = 0
        error: str | None = None
        try:
            send = self._sender(agent, request)
        except AgentCallFailed as failure:
            return CallResult(None, 0, failure.reason, 0)
        for attempt in range(agent.retry_attempts + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                error = error or "timeout"
                break
            try:
                attempts += 1
                answer = await breaker.call(send, timeout=remaining)
                return CallResult(
                    answer.response, attempts, None, _ms_since(started), answer.repaired
                )
            except BreakerOpen:
                attempts -= 1  # refused before anything was sent
                error = "circuit open"
                break
            except TimeoutError:
                error = f"timeout after {agent.timeout_ms} ms"
                break
            except AgentCallFailed as failure:
                error = failure.reason
                if not failure.retryable:
                    break
            if attempt == agent.retry_attempts:
                break  # that was the last attempt: waiting now would only delay the fallback
            pause = self._retry.delay(attempt)
            if time.monotonic() + pause >= deadline:
                break
            await asyncio.sleep(pause)
        return CallResult(None, attempts, error, _ms_since(started))

    async def attempt(
        self,
        agent: Agent,
        breaker: AsyncCircuitBreaker,
        request: AgentRequest | Mapping[str, Any],
        continuation: A2AContinuation | None = None,
    ) -> Answer:
        """One HTTP attempt through the agent's breaker within its timeout, without the
        in-call retries: a durable task's retries replace them (app/tasks/agent_call.py).
        ``continuation``: the remote A2A task the request continues (an A2A agent asked
        for input). Raises ``BreakerOpen`` (nothing sent), ``TimeoutError`` or
        ``AgentCallFailed``."""
        send = self._sender(agent, request, continuation)
        return await breaker.call(send, timeout=agent.timeout_ms / 1000)

    def _sender(
        self,
        agent: Agent,
        request: AgentRequest | Mapping[str, Any],
        continuation: A2AContinuation | None = None,
    ) -> Callable[[], Awaitable[Answer]]:
        """One attempt of ``request`` to ``agent``, ready to run: A2A SendMessage when its
        card declares an A2A interface, else the seed's JSON request to its url."""
        if agent.a2a_url and self._a2a is not None:
            interface = A2AInterface(agent.a2a_url, agent.a2a_protocol_version or "1.0")
            return lambda: self._send_a2a(interface, request, continuation)
        url = agent.url
        if not url:
            raise AgentCallFailed("agent has no url configured", retryable=False)
        return lambda: self._post(url, request)

    async def _send_a2a(
        self,
        interface: A2AInterface,
        request: AgentRequest | Mapping[str, Any],
        continuation: A2AContinuation | None,
    ) -> Answer:
        """One A2A SendMessage: the answer mapped to the seed's response, or a failure
        classified as the seed's protocol's are (what the breaker counts, what is retried)."""
        assert self._a2a is not None
        request_id = _request_id(request)
        try:
            answer = await self._a2a.send_message(
                interface, a2a_message(request, continuation), request_id or ""
            )
            outcome = outcome_of(answer, request_id)
        except A2AFailure as failure:
            reason = MALFORMED_ANSWER if failure.malformed else failure.reason
            raise AgentCallFailed(reason, retryable=failure.retryable) from None
        except A2AAnswerFailed as failure:
            raise AgentCallFailed(failure.reason, retryable=failure.retryable) from None
        return Answer(outcome.response, a2a=outcome)

    async def _post(self, url: str, request: AgentRequest | Mapping[str, Any]) -> Answer:
        try:
            # The trace context (traceparent) is set by the client's instrumentation.
            async with self._http.stream(
                "POST",
                url,
                content=orjson.dumps(request),
                headers={"content-type": "application/json", "accept": "application/json"},
            ) as reply:
                status = reply.status_code
                try:
                    body = await self._read(reply)
                except AgentCallFailed:
                    if status < 400:
                        raise
                    # An error's body is not used, its status decides; it is read when it
                    # fits so that the connection can serve the next attempt.
                    body = b""
        except OutboundRefused as refused:
            raise AgentCallFailed(str(refused), retryable=False) from refused
        except httpx.HTTPError as exc:
            raise AgentCallFailed(f"transport error: {type(exc).__name__}", retryable=True) from exc
        if status >= 500 or status == 429:
            raise AgentCallFailed(f"agent answered HTTP {status}", retryable=True)
        if status >= 400:
            raise AgentCallFailed(f"agent answered HTTP {status}", retryable=False)
        value, repaired = await self._decode(body)
        try:
            response = AgentResponse.model_validate(value)
        except ValidationError:
            raise AgentCallFailed(MALFORMED_ANSWER, retryable=False) from None
        if not response.success:
            details = response.error_details
            reason = (details.message or details.code) if details else None
            raise AgentCallFailed(
                f"agent reported failure: {reason or 'no details'}",
                retryable=bool(details and details.retryable),
            )
        return Answer(response, repaired)

    async def _read(self, reply: httpx.Response) -> bytes:
        """The answer's body, refused once it is longer than the limit (a client may send
        no more the other way): an agent cannot make a replica hold gigabytes."""
        limit = self._max_answer_bytes
        declared = reply.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise AgentCallFailed(f"agent answered more than {limit} bytes", retryable=False)
        chunks: list[bytes] = []
        size = 0
        async for chunk in reply.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise AgentCallFailed(f"agent answered more than {limit} bytes", retryable=False)
            chunks.append(chunk)
        return b"".join(chunks)

    async def _decode(self, body: bytes) -> tuple[object, RepairKind | None]:
        """The answer as JSON: strictly, else repaired; what was repaired, if anything."""
        try:
            # The same rule as for a client's body: an answer holding what the service
            # cannot store (a NUL, an integer past 64 bits) is no answer, not a 422 for
            # the client whose message it was.
            return decode_json(body), None
        except ValidationFailed as exc:
            fields = ", ".join(e["field"] for e in exc.extensions.get("errors", []))
            raise AgentCallFailed(
                f"agent answered values that cannot be stored ({fields})", retryable=False
            ) from None
        except TooDeeplyNested:
            raise AgentCallFailed(MALFORMED_ANSWER, retryable=False) from None
        except MalformedJson:
            pass
        # Off the event loop: other requests go on while a long answer is repaired.
        repaired = await asyncio.to_thread(repair_answer, body, self._repair_max_bytes)
        if repaired is None:
            raise AgentCallFailed(MALFORMED_ANSWER, retryable=False)
        return repaired.value, repaired.kind


def agent_request(
    agent: Agent,
    session: Session,
    text: str,
    intent: DetectedIntent,
    secondaries: Sequence[DetectedIntent],
    context_flags: list[str],
    request_id: str,
    branch: str | None = None,
    memories: Sequence[BranchMemory] = (),
) -> AgentRequest:
    """What ``agent`` is sent to handle ``intent`` of a message: the intent and its clause,
    the other intents found, and the session as the API shows it; on a ``branch``, the
    branch's content, its name and the ``memories`` the agent sees on it."""
    shown = (
        session.session_type,
        session.session_state,
        session.current_agent,
        session.progress_percentage,
        context_flags,
    )
    context = (
        AgentContext(*shown)
        if branch is None
        else BranchAgentContext(*shown, branch=branch, memories=list(memories))
    )
    return AgentRequest(
        agent_name=agent.name,
        request_id=request_id,
        user_id=str(session.user_id),
        session_id=str(session.session_id),
        input_data=AgentInput(
            message=text,
            intent=intent.intent,
            clause=intent.clause,
            secondary_intents=[i.intent for i in secondaries],
        ),
        context=context,
        priority=intent.score,
        timeout_ms=agent.timeout_ms,
    )


def classifier_request(
    classifier: Agent,
    session: Session | None,
    text: str,
    intents: Iterable[str],
    context_flags: list[str],
    request_id: str,
) -> AgentRequest:
    """What the AI classifier is sent: the message and the intents it may name."""
    return AgentRequest(
        agent_name=classifier.name,
        request_id=request_id,
        user_id=str(session.user_id) if session else None,
        session_id=str(session.session_id) if session else None,
        input_data=ClassifierInput(message=text, intents=sorted(intents)),
        context=ClassifierContext(context_flags=context_flags),
        priority=0,
        timeout_ms=classifier.timeout_ms,
    )


def _request_id(request: AgentRequest | Mapping[str, Any]) -> str | None:
    """The request id a request carries, if any."""
    if isinstance(request, AgentRequest):
        return request.request_id
    found = request.get("request_id")
    return found if isinstance(found, str) else None


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
