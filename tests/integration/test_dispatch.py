"""AgentClient against a real HTTP agent on 127.0.0.1: how retries are spaced."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import uuid4

import httpx
import pytest

from app.agents.schemas import Agent
from app.coordination.breaker import AsyncCircuitBreaker
from app.coordination.dispatch import AgentClient, RetryPolicy
from app.coordination.schemas import AgentRequest, ClassifierContext, ClassifierInput
from tests.agent_server import AgentServer

AGENT_TIME = datetime(2026, 10, 1, tzinfo=UTC)

PAUSE = 0.4


@dataclass(frozen=True)
class FixedPause(RetryPolicy):
    """The same pause every time, and a record of every pause asked for."""

    asked: list[int] = field(default_factory=list)

    def delay(self, attempt: int) -> float:
        self.asked.append(attempt)
        return PAUSE


@pytest.fixture
async def failing_agent() -> AsyncIterator[AgentServer]:
    server = await AgentServer(behaviour="fail").start()
    yield server
    await server.stop()


@pytest.mark.parametrize("retry_attempts", [0, 2])
async def test_no_backoff_after_the_last_attempt(
    failing_agent: AgentServer, retry_attempts: int
) -> None:
    agent = Agent(
        agent_id=uuid4(),
        name="Flaky_Agent",
        roles=[],
        created_at=AGENT_TIME,
        disabled_at=None,
        description="",
        url=failing_agent.url,
        timeout_ms=30_000,
        retry_attempts=retry_attempts,
        fallback_strategy=None,
        intents=[],
        skills=[],
        enabled=True,
        fail_max=100,
        reset_timeout_ms=30_000,
        has_key=True,
        updated_at=AGENT_TIME,
    )
    breaker = AsyncCircuitBreaker("Flaky_Agent", fail_max=100, reset_timeout=30)
    policy = FixedPause()
    async with httpx.AsyncClient() as http:
        started = time.monotonic()
        request = AgentRequest(
            agent_name=agent.name,
            request_id="r1",
            user_id=None,
            session_id=None,
            input_data=ClassifierInput(message="hello", intents=[]),
            context=ClassifierContext(context_flags=[]),
            priority=0,
            timeout_ms=agent.timeout_ms,
        )
        result = await AgentClient(http, policy).call(agent, breaker, request)
        elapsed = time.monotonic() - started

    assert not result.ok
    assert result.attempts == retry_attempts + 1
    assert len(failing_agent.requests) == retry_attempts + 1
    assert failing_agent.connections == 1  # an error's body is read: the connection is reused
    # One pause between two attempts, none after the last: the caller gets its fallback
    # as soon as the final attempt has failed.
    assert policy.asked == list(range(retry_attempts))
    assert elapsed < retry_attempts * PAUSE + PAUSE / 2
