"""Which agent takes an intent, and whether it can answer now: pure functions over the
registry (``Agent``) and the breaker states, no I/O."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.agents.schemas import Agent
from app.coordination.intents import DetectedIntent

_WORD = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True, slots=True)
class Route:
    """The agent an intent goes to and why ("intent", "skill" or "default")."""

    agent: Agent
    routed_by: str


@dataclass(frozen=True, slots=True)
class Handoff:
    """Where a direct_agent_routing fallback passes a message: the agent, the intent it
    takes, and the other intents found on the way (queued)."""

    agent: Agent
    intent: DetectedIntent
    others: tuple[DetectedIntent, ...]


@dataclass(frozen=True, slots=True)
class RoutingPolicy:
    """The agents routing treats specially (settings)."""

    default_agent: str
    classifier_agent: str


def route(intent: DetectedIntent, agents: Sequence[Agent], policy: RoutingPolicy) -> Route | None:
    """The agent for an intent.

    An intent some keyword (or the classifier, or a queued action) named goes to the agent
    serving it, else to the best skill match for its clause, else to the default agent. An
    intent nobody claimed (the default intent, with no evidence) is matched by skill first:
    otherwise the agent serving the default intent would take every such message, and the
    skills the agents publish would never route anything.
    """
    if not intent.matched:
        by_skill = best_skill_match(intent.clause, agents, policy)
        if by_skill is not None:
            return Route(by_skill, "skill")
    serving = serving_agent(intent.intent, agents)
    if serving is not None:
        return Route(serving, "intent")
    by_skill = best_skill_match(intent.clause, agents, policy)
    if by_skill is not None:
        return Route(by_skill, "skill")
    default = next((a for a in agents if a.name == policy.default_agent and a.enabled), None)
    return Route(default, "default") if default else None


def classifier_agent(agents: Sequence[Agent], policy: RoutingPolicy) -> Agent | None:
    """The AI classifier, when it is registered, enabled and has a url to be called at."""
    return next(
        (a for a in agents if a.name == policy.classifier_agent and a.enabled and a.url), None
    )


def handoff(
    failed: Agent,
    taken: Iterable[str],
    ranked: Sequence[DetectedIntent],
    agents: Sequence[Agent],
    policy: RoutingPolicy,
) -> Handoff | None:
    """Where ``direct_agent_routing`` passes a request the failed agent (the orchestrator)
    could not route: the first of the ``ranked`` intents (what the keyword rules find, in
    priority order) whose route is another agent, one that does not route onward itself (no
    chains). The intents found after it that matched a keyword and are not ``taken`` (the
    failed turn's own, already queued) go with it, to be queued. None: nobody to pass to."""
    for index, candidate in enumerate(ranked):
        target = route(candidate, agents, policy)
        if (
            target is not None
            and target.agent.name != failed.name
            and target.agent.fallback_strategy != "direct_agent_routing"
        ):
            skip = set(taken)
            others = tuple(o for o in ranked[index + 1 :] if o.intent not in skip and o.matched)
            return Handoff(target.agent, candidate, others)
    return None


def serving_agent(intent: str, agents: Sequence[Agent]) -> Agent | None:
    """The enabled agent that lists ``intent``: one with a url first, then by name."""
    serving = [a for a in agents if a.enabled and intent in a.intents]
    return min(serving, key=lambda a: (a.url is None, a.name), default=None)


def intent_agents(agents: Sequence[Agent]) -> dict[str, str]:
    """Every intent some enabled agent lists, and the agent that serves it."""
    served = {intent for agent in agents if agent.enabled for intent in agent.intents}
    return {intent: chosen.name for intent in served if (chosen := serving_agent(intent, agents))}


def best_skill_match(text: str, agents: Sequence[Agent], policy: RoutingPolicy) -> Agent | None:
    """The enabled agent (not the classifier, not the default agent) whose skill tags share
    the most words with ``text``; the first by registry order on a tie; None without a hit."""
    words = set(_WORD.findall(text.lower()))
    best, best_hits = None, 0
    for agent in agents:
        if not agent.enabled or agent.name in (policy.classifier_agent, policy.default_agent):
            continue
        tags = {str(tag).lower() for skill in agent.skills for tag in skill.get("tags", [])}
        hits = len(tags & words)
        if hits > best_hits:
            best, best_hits = agent, hits
    return best
