"""The handler of ``agent_call`` tasks (and the base of the coordinator's kinds): one
attempt is ONE HTTP call of the named agent, through its circuit breaker and within its
timeout, with AgentClient's in-call retries off (the task's retries replace them). An
agent whose card declares an A2A interface is called with A2A SendMessage instead of the
seed's JSON request (app/coordination/dispatch.py), with the same rules.

How an attempt ends: a valid answer is the task's result (the seed's response_format);
a timeout, a transport error, a 5xx or 429, a malformed answer (not JSON even after
repair, or not the response format) or an agent reporting a retryable failure is
``TaskFailed(retryable=True)``; a 4xx, an oversized answer or one holding values that
cannot be stored, an agent without a URL, disabled or unknown is
``TaskFailed(retryable=False)`` (another attempt would get the same);
an open circuit is ``TaskDelayed`` until the breaker lets a probe through."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from app.agents.schemas import Agent
from app.agents.service import AgentService
from app.clock import Clock
from app.coordination.a2a_answers import A2AContinuation
from app.coordination.breaker import BreakerOpen
from app.coordination.breakers import BreakerRegistry
from app.coordination.dispatch import MALFORMED_ANSWER, AgentCallFailed, AgentClient, Answer
from app.errors import NotFound
from app.tasks.schemas import Task, TaskDelayed, TaskFailed


class AgentCall:
    """Calls a task's agent once with the task's input as the request body."""

    def __init__(
        self, agents: AgentService, breakers: BreakerRegistry, client: AgentClient, clock: Clock
    ) -> None:
        self._agents = agents
        self._breakers = breakers
        self._client = client
        self._clock = clock

    async def agent(self, name: str) -> Agent:
        """The registered agent ``name``; a non-retryable failure if there is none."""
        try:
            agent = await self._agents.get_agent(name)
        except NotFound:
            raise TaskFailed(f"no agent named {name}", retryable=False) from None
        if not agent.enabled:
            raise TaskFailed(f"agent {name} is disabled", retryable=False)
        return agent

    async def attempt(
        self, agent: Agent, request: Any, continuation: A2AContinuation | None = None
    ) -> Answer:
        """One call of ``agent`` with ``request`` (an AgentRequest or a JSON object;
        ``continuation``: the remote A2A task it continues), its failures translated into
        TaskFailed and TaskDelayed."""
        breaker = self._breakers.breaker_for(agent)
        try:
            return await self._client.attempt(agent, breaker, request, continuation)
        except BreakerOpen as refused:
            raise TaskDelayed(self._probe_time(agent), str(refused)) from None
        except TimeoutError:
            raise TaskFailed(f"timeout after {agent.timeout_ms} ms", retryable=True) from None
        except AgentCallFailed as failure:
            # An LLM's next answer may be well-formed: malformed is worth another attempt.
            retryable = failure.retryable or failure.reason == MALFORMED_ANSWER
            raise TaskFailed(failure.reason, retryable=retryable) from None

    async def __call__(self, task: Task) -> dict[str, Any]:
        """The ``agent_call`` handler: the task's input is the request body."""
        agent = await self.agent(task.agent_name)
        answer = await self.attempt(agent, task.input)
        result: dict[str, Any] = answer.response.model_dump(mode="json")
        if answer.repaired is not None:
            result["repaired"] = answer.repaired
        return result

    def _probe_time(self, agent: Agent) -> datetime:
        """When the agent's open circuit lets a probe through (forced open: check again
        after its reset timeout)."""
        reset = timedelta(milliseconds=agent.reset_timeout_ms)
        snapshot = self._breakers.peek(agent.name)
        if snapshot is not None and snapshot.state == "open" and snapshot.opened_at is not None:
            return max(snapshot.opened_at + reset, self._clock.now())
        return self._clock.now() + reset
