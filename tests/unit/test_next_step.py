"""The next-step decision as pure functions: rule order, each limit at its boundary, the
counters an event adds, and replay (the stored inputs decide the same again)."""

from __future__ import annotations

import msgspec
import pytest

from app.coordination.next_step import (
    Counters,
    Facts,
    Limits,
    NextStep,
    NextStepRule,
    PriorCounts,
    count,
    decide,
)

# The seeded rules (sql/schema.sql), as data.
RULES = [
    NextStepRule(position=10, name="step_retries", event=None,
                 condition="step_retries_exhausted", outcome="request_manual_intervention"),
    NextStepRule(position=20, name="consecutive_fallbacks", event=None,
                 condition="fallbacks_exceeded", outcome="request_manual_intervention"),
    NextStepRule(position=30, name="handoffs_without_progress", event=None,
                 condition="handoffs_exceeded", outcome="request_manual_intervention"),
    NextStepRule(position=40, name="stalled", event=None, condition="stalled",
                 outcome="request_manual_intervention"),
    NextStepRule(position=50, name="clarification", event="clarification", condition="always",
                 outcome="ask_user"),
    NextStepRule(position=60, name="finished", event="answered", condition="complete",
                 outcome="finalize"),
    NextStepRule(position=70, name="handoff", event=None, condition="handoff_suggested",
                 outcome="hand_off"),
    NextStepRule(position=80, name="next_intent", event=None, condition="queue_waiting",
                 outcome="continue"),
    NextStepRule(position=90, name="wait_for_user", event=None, condition="always",
                 outcome="ask_user"),
]  # fmt: skip
LIMITS = Limits(
    max_step_retries=3,
    max_consecutive_fallbacks=5,
    max_handoffs_without_progress=15,
    max_seconds_without_progress=3600,
)
QUIET = Counters(
    step_retries=0, consecutive_fallbacks=0, handoffs_without_progress=0, seconds_without_progress=0
)
FACTS = Facts(intent="request_plan", agent="Make_Plan_Agent")
FAILED = Facts(intent="request_plan", agent="Make_Plan_Agent", error="HTTP 500")


def with_counts(**changes: int) -> Counters:
    return msgspec.structs.replace(QUIET, **changes)


@pytest.mark.parametrize(
    ("counters", "facts", "rule"),
    [
        (with_counts(step_retries=2), FAILED, "wait_for_user"),
        (with_counts(step_retries=3), FAILED, "step_retries"),
        # A step that did not fail is not out of retries, whatever the count says.
        (with_counts(step_retries=3), FACTS, "wait_for_user"),
        (with_counts(consecutive_fallbacks=5), FAILED, "wait_for_user"),
        (with_counts(consecutive_fallbacks=6), FAILED, "consecutive_fallbacks"),
        (with_counts(handoffs_without_progress=15), FACTS, "wait_for_user"),
        (with_counts(handoffs_without_progress=16), FACTS, "handoffs_without_progress"),
        (with_counts(seconds_without_progress=3600), FACTS, "wait_for_user"),
        (with_counts(seconds_without_progress=3601), FACTS, "stalled"),
    ],
)
def test_each_limit_triggers_just_past_its_boundary(
    counters: Counters, facts: Facts, rule: str
) -> None:
    decided = decide(RULES, "fallback", counters, LIMITS, facts)
    assert decided.rule == rule
    manual = rule not in ("wait_for_user",)
    assert (decided.outcome == "request_manual_intervention") is manual


def test_the_first_matching_rule_wins_in_position_order() -> None:
    both = with_counts(step_retries=3, consecutive_fallbacks=9)
    assert decide(RULES, "fallback", both, LIMITS, FAILED).rule == "step_retries"
    # Order is the position, not the order the rows come in.
    assert decide(list(reversed(RULES)), "fallback", both, LIMITS, FAILED).rule == "step_retries"


@pytest.mark.parametrize(
    ("event", "facts", "outcome"),
    [
        ("clarification", FACTS, "ask_user"),
        ("answered", msgspec.structs.replace(FACTS, progress_percentage=100), "finalize"),
        # Done but work still queued: the queue goes first.
        (
            "answered",
            msgspec.structs.replace(FACTS, progress_percentage=100, queue_waiting=1),
            "continue",
        ),
        ("answered", msgspec.structs.replace(FACTS, handoff_suggested="Other_Agent"), "hand_off"),
        ("fallback", msgspec.structs.replace(FAILED, queue_waiting=2), "continue"),
        ("answered", FACTS, "ask_user"),
    ],
)
def test_outcomes(event: str, facts: Facts, outcome: str) -> None:
    assert decide(RULES, event, QUIET, LIMITS, facts).outcome == outcome  # type: ignore[arg-type]


def test_no_matching_rule_asks_the_user() -> None:
    decided = decide(RULES[:1], "answered", QUIET, LIMITS, FACTS)
    assert (decided.outcome, decided.rule) == ("ask_user", "no_rule")


def test_a_stored_decision_replays_to_the_same_outcome() -> None:
    decided = decide(RULES, "fallback", with_counts(consecutive_fallbacks=6), LIMITS, FAILED)
    stored = msgspec.json.decode(msgspec.json.encode(decided))
    again = msgspec.convert(stored, NextStep)
    inputs = again.inputs
    assert decide(RULES, inputs.event, inputs.counters, inputs.limits, inputs.facts) == decided


PRIOR = PriorCounts(
    consecutive_fallbacks=2, step_failures=1, handoffs=4, seconds_without_progress=120
)


def test_a_fallback_adds_a_failure_to_the_run_and_to_its_step() -> None:
    counters = count(PRIOR, "fallback", handed_off=False, progressed=False)
    assert counters == Counters(
        step_retries=1,
        consecutive_fallbacks=3,
        handoffs_without_progress=4,
        seconds_without_progress=120,
    )


def test_an_answer_ends_the_runs_and_progress_ends_the_handoff_count() -> None:
    answered = count(PRIOR, "answered", handed_off=True, progressed=False)
    assert (answered.consecutive_fallbacks, answered.step_retries) == (0, 0)
    assert answered.handoffs_without_progress == 5
    progressed = count(PRIOR, "answered", handed_off=True, progressed=True)
    assert (progressed.handoffs_without_progress, progressed.seconds_without_progress) == (0, 0)


def test_a_clarification_leaves_the_counters_as_they_are() -> None:
    counters = count(PRIOR, "clarification", handed_off=False, progressed=False)
    assert (counters.consecutive_fallbacks, counters.step_retries) == (2, 0)
