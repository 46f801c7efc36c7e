"""The next-step decision, as pure functions over data: after each agent result and each
failure, what the session does next (continue with the next queued intent, hand off, ask
the user, finalize, or request manual intervention).

No I/O: the rules come in as data (``next_step_rules``, read and cached by
``RulesService``), the counters come in already read from the decision log and the
versions (app/coordination/escalation.py), the limits are settings. The first rule, by
position, whose event (None: any) and condition hold gives the outcome; the decision
carries every input it read, so a run can be replayed (``decide`` on the same inputs gives
the same decision) and explained.

The limits and their boundaries (each an "at most"; the event that goes past it escalates):

- ``step_retries``: the failures of the same step (intent and agent) since it last
  succeeded, minus the first. ``max_step_retries`` = 3 (seed 001's ``max_retries``): the
  fourth failure in a row of one step (three retries failed) asks for a person.
- ``consecutive_fallbacks``: fallback answers since the last agent answer. More than
  ``max_consecutive_fallbacks`` asks for a person.
- ``handoffs_without_progress``: handoffs since ``progress_percentage`` last rose. More
  than ``max_handoffs_without_progress`` asks for a person.
- ``seconds_without_progress``: since the progress last rose (or the session began, or a
  person resolved it). More than ``max_age_without_progress`` asks for a person.

Every counter starts again when a person resolves the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Literal

import msgspec

Outcome = Literal["continue", "hand_off", "ask_user", "finalize", "request_manual_intervention"]
# What the decision follows: an agent's answer (a turn's or a task's late one), a fallback
# answer, a clarification question, a 202 (the agent's task works on).
Event = Literal["answered", "fallback", "clarification", "accepted"]
Condition = Literal[
    "always",
    "step_retries_exhausted",
    "fallbacks_exceeded",
    "handoffs_exceeded",
    "stalled",
    "complete",
    "handoff_suggested",
    "queue_waiting",
]
MANUAL_INTERVENTION: Outcome = "request_manual_intervention"


class NextStepRule(msgspec.Struct, frozen=True, kw_only=True):
    """One row of ``next_step_rules``."""

    position: int
    name: str
    event: Event | None
    condition: Condition
    outcome: Outcome
    description: str = ""


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """The safety limits the decision was made with (settings)."""

    max_step_retries: int
    max_consecutive_fallbacks: int
    max_handoffs_without_progress: int
    max_seconds_without_progress: int


class Counters(msgspec.Struct, frozen=True, kw_only=True):
    """What the session's durable record says, this event included."""

    step_retries: int
    consecutive_fallbacks: int
    handoffs_without_progress: int
    seconds_without_progress: int


class Facts(msgspec.Struct, frozen=True, kw_only=True):
    """The event's own facts: the step, and the session as it leaves it."""

    intent: str | None
    agent: str | None
    # The agent the answer suggested next (a registered one), if another.
    handoff_suggested: str | None = None
    # Queued actions waiting to be processed (status pending).
    queue_waiting: int = 0
    progress_percentage: int = 0
    error: str | None = None


class NextStepInputs(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a next-step decision read."""

    event: Event
    counters: Counters
    limits: Limits
    facts: Facts


class NextStep(msgspec.Struct, frozen=True, kw_only=True):
    """A next-step decision: the outcome, the rule that gave it and why, and its inputs."""

    outcome: Outcome
    rule: str
    reason: str
    inputs: NextStepInputs


def holds(condition: Condition, counters: Counters, limits: Limits, facts: Facts) -> bool:
    """Whether ``condition`` holds for these inputs."""
    if condition == "always":
        return True
    if condition == "step_retries_exhausted":
        return facts.error is not None and counters.step_retries >= limits.max_step_retries
    if condition == "fallbacks_exceeded":
        return counters.consecutive_fallbacks > limits.max_consecutive_fallbacks
    if condition == "handoffs_exceeded":
        return counters.handoffs_without_progress > limits.max_handoffs_without_progress
    if condition == "stalled":
        return counters.seconds_without_progress > limits.max_seconds_without_progress
    if condition == "complete":
        return facts.progress_percentage >= 100 and facts.queue_waiting == 0
    if condition == "handoff_suggested":
        return facts.handoff_suggested is not None
    return facts.queue_waiting > 0  # queue_waiting


# When no rule matches (a deployment removed the catch-all): the user speaks next.
_NO_RULE = NextStepRule(
    position=-1,
    name="no_rule",
    event=None,
    condition="always",
    outcome="ask_user",
    description="no rule matched: the next message is the user's",
)


def decide(
    rules: Sequence[NextStepRule],
    event: Event,
    counters: Counters,
    limits: Limits,
    facts: Facts,
) -> NextStep:
    """The first rule (by position) whose event and condition hold, as a decision."""
    inputs = NextStepInputs(event=event, counters=counters, limits=limits, facts=facts)
    for rule in sorted(rules, key=lambda r: r.position):
        if rule.event is not None and rule.event != event:
            continue
        if holds(rule.condition, counters, limits, facts):
            return NextStep(
                outcome=rule.outcome, rule=rule.name, reason=rule.description, inputs=inputs
            )
    return NextStep(
        outcome=_NO_RULE.outcome, rule=_NO_RULE.name, reason=_NO_RULE.description, inputs=inputs
    )


class PriorCounts(msgspec.Struct, frozen=True, kw_only=True):
    """The counters as the log stood before this event (read by one query)."""

    consecutive_fallbacks: int
    # Failures of this event's step (intent and agent) since it last succeeded.
    step_failures: int
    handoffs: int
    # Seconds since the progress last rose, the session began or a person resolved it.
    seconds_without_progress: int
    # The errors of the latest failed turns, newest first.
    last_errors: list[str] = []
    # When a person last resolved the session (None: never): the counters start there.
    resolved_at: datetime | None = None


def count(prior: PriorCounts, event: Event, *, handed_off: bool, progressed: bool) -> Counters:
    """The counters with this event added: a fallback is one more failure (of the run and
    of its step), an answer ends both runs, a handoff is one more unless the progress rose."""
    fallbacks, failures = prior.consecutive_fallbacks, prior.step_failures
    if event == "fallback":
        fallbacks, failures = fallbacks + 1, failures + 1
    elif event == "answered":
        fallbacks, failures = 0, 0
    if progressed:
        handoffs, seconds = 0, 0
    else:
        handoffs = prior.handoffs + (1 if handed_off else 0)
        seconds = prior.seconds_without_progress
    return Counters(
        step_retries=max(0, failures - 1),
        consecutive_fallbacks=fallbacks,
        handoffs_without_progress=handoffs,
        seconds_without_progress=seconds,
    )
