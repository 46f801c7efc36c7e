"""The RFC 7240 Prefer header: what a message's caller may ask of the wait."""

from __future__ import annotations

import pytest

from app.coordination.prefer import WaitPreference, parse_prefer, wait_budget


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], WaitPreference()),
        (["wait=10"], WaitPreference(wait_seconds=10)),
        (["respond-async"], WaitPreference(respond_async=True)),
        (["respond-async, wait=20"], WaitPreference(wait_seconds=20, respond_async=True)),
        (["Respond-Async", "WAIT=3"], WaitPreference(wait_seconds=3, respond_async=True)),
        (['wait="7"'], WaitPreference(wait_seconds=7)),
        (["wait = 5 ; foo=bar"], WaitPreference(wait_seconds=5)),
        (["wait=0"], WaitPreference(wait_seconds=0)),
        # The first of a name wins (RFC 7240 section 2).
        (["wait=4, wait=9"], WaitPreference(wait_seconds=4)),
        # Not understood: ignored, never an error.
        (["wait=abc"], WaitPreference()),
        (["wait=-1"], WaitPreference()),
        (["wait=1.5"], WaitPreference()),
        (["wait="], WaitPreference()),
        (["wait=\u0663"], WaitPreference()),  # an Arabic-Indic digit is not a DIGIT
        (["wait=99999999999999999999"], WaitPreference()),
        (["return=minimal, handling=lenient"], WaitPreference()),
        (["respond-async=yes"], WaitPreference()),
        ([",,, ;"], WaitPreference()),
        (['foo="a,b", wait=2'], WaitPreference(wait_seconds=2)),
    ],
)
def test_parse_prefer(values: list[str], expected: WaitPreference) -> None:
    assert parse_prefer(values) == expected


def test_the_default_when_nothing_is_asked() -> None:
    budget = wait_budget(WaitPreference(), 8.0, 55.0)
    assert (budget.seconds, budget.respond_async, budget.applied) == (8.0, False, None)
    assert budget.waits


def test_a_wait_is_capped_and_echoed_as_applied() -> None:
    assert wait_budget(WaitPreference(wait_seconds=20), 8.0, 55.0).applied == "wait=20"
    capped = wait_budget(WaitPreference(wait_seconds=600), 8.0, 55.0)
    assert (capped.seconds, capped.applied) == (55.0, "wait=55")


def test_wait_zero_does_not_wait() -> None:
    budget = wait_budget(WaitPreference(wait_seconds=0), 8.0, 55.0)
    assert (budget.seconds, budget.waits, budget.applied) == (0.0, False, "wait=0")


def test_respond_async_alone_answers_at_once_and_with_a_wait_waits_first() -> None:
    at_once = wait_budget(WaitPreference(respond_async=True), 8.0, 55.0)
    assert (at_once.seconds, at_once.respond_async, at_once.applied) == (
        0.0,
        True,
        "respond-async",
    )
    waiting = wait_budget(WaitPreference(wait_seconds=3, respond_async=True), 8.0, 55.0)
    assert (waiting.seconds, waiting.applied) == (3.0, "respond-async, wait=3")
