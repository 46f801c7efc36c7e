"""The pure intent engine: clause splitting, keyword/cue detection, the seed's scoring, the tie
rule and clarification (no database)."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from app.coordination.intents import (
    AGENT_UNAVAILABLE,
    DetectedIntent,
    IntentRules,
    classifier_intents,
    detect_intents,
    normalize,
    prioritize,
    split_clauses,
    with_agent_availability,
)

# The seed's calculateIntentPriority tables.
SEED_WEIGHTS = {
    "emergency_financial": 100,
    "urgent_changes": 80,
    "request_consultation": 60,
    "request_plan": 50,
    "provide_info": 40,
    "ask_question": 30,
    "general_inquiry": 20,
}
SEED_MODIFIERS = {
    "session_in_progress": 20,
    "incomplete_critical_process": 30,
    "user_expressed_urgency": 25,
    "time_sensitive_deadline": 15,
}
AGENTS = {
    "emergency_financial": "Consult_Customer_Agent",
    "urgent_changes": "Add_Changes_Agent",
    "request_consultation": "Consult_Customer_Agent",
    "request_plan": "Make_Plan_Agent",
    "provide_info": "Collect_Create_Data_Agent",
    "ask_question": "Educate_Customer_Agent",
    "general_inquiry": "Orchestrator_Agent",
}


@pytest.fixture
def rules() -> IntentRules:
    """Seed weights and modifiers, with keywords and cues chosen not to overlap by accident."""
    return IntentRules(
        base_weights=SEED_WEIGHTS,
        keywords={
            "emergency_financial": ["lost my job", "eviction", "can't pay rent", "emergency"],
            "urgent_changes": ["cancel", "change my", "switch my"],
            "request_consultation": ["consultation", "talk to an advisor", "speak with someone"],
            "request_plan": ["make a plan", "plan", "budget"],
            "provide_info": ["my income is", "i earn", "my rent is"],
            "ask_question": ["what is", "how do i", "explain"],
            "general_inquiry": ["hello", "thanks"],
        },
        modifiers=SEED_MODIFIERS,
        cues={
            "user_expressed_urgency": ["urgent", "asap", "right away", "immediately", "today"],
            "time_sensitive_deadline": [
                "deadline",
                "due",
                "by tomorrow",
                "by friday",
                "before the end of",
            ],
        },
        intent_agents=AGENTS,
    )


def only(message: str, rules: IntentRules, flags: tuple[str, ...] = ()) -> DetectedIntent:
    """The single intent detected in ``message`` (fails if there is not exactly one)."""
    found = detect_intents(message, rules, flags)
    assert len(found) == 1, found
    return found[0]


def intent(name: str, score: int, *, base: int | None = None, position: int = 0) -> DetectedIntent:
    """A hand-made detected intent, for exercising prioritize directly."""
    return DetectedIntent(
        intent=name,
        clause=name,
        position=position,
        matched=(),
        base_weight=SEED_WEIGHTS.get(name, 20) if base is None else base,
        modifiers=(),
        score=score,
    )


def names(intents: tuple[DetectedIntent, ...] | list[DetectedIntent]) -> list[str]:
    return [found.intent for found in intents]


# -- the seed's scoring table -------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected_intent", "expected_score"),
    [
        ("I lost my job", "emergency_financial", 100),
        ("Please cancel the transfer", "urgent_changes", 80),
        ("I would like a consultation", "request_consultation", 60),
        ("Help me make a plan", "request_plan", 50),
        ("My income is 4000", "provide_info", 40),
        ("What is an index fund", "ask_question", 30),
        ("Hello there", "general_inquiry", 20),
    ],
)
def test_every_base_weight_alone(
    rules: IntentRules, message: str, expected_intent: str, expected_score: int
) -> None:
    found = only(message, rules)
    assert found.intent == expected_intent
    assert found.base_weight == expected_score
    assert found.modifiers == ()
    assert found.score == expected_score


@pytest.mark.parametrize(("modifier", "points"), list(SEED_MODIFIERS.items()))
def test_every_modifier_alone_as_a_context_flag(
    rules: IntentRules, modifier: str, points: int
) -> None:
    found = only("What is an ETF", rules, (modifier,))
    assert found.modifiers == (modifier,)
    assert found.score == 30 + points


@pytest.mark.parametrize(
    ("message", "modifier"),
    [
        ("What is an ETF, it is urgent", "user_expressed_urgency"),
        ("What is an ETF asap", "user_expressed_urgency"),
        ("Explain ETFs right away", "user_expressed_urgency"),
        ("Explain ETFs to me today", "user_expressed_urgency"),
        ("What is the deadline for an IRA", "time_sensitive_deadline"),
        ("Explain what is due by tomorrow", "time_sensitive_deadline"),
        ("Explain it before the end of the month", "time_sensitive_deadline"),
    ],
)
def test_cue_phrases_reveal_modifiers(rules: IntentRules, message: str, modifier: str) -> None:
    found = only(message, rules)
    assert found.intent == "ask_question"
    assert found.modifiers == (modifier,)
    assert found.score == 30 + SEED_MODIFIERS[modifier]


@pytest.mark.parametrize("base_intent", ["request_plan", "ask_question", "general_inquiry"])
def test_every_combination_of_modifiers_matches_the_seed_formula(
    rules: IntentRules, base_intent: str
) -> None:
    message = {"request_plan": "make a plan", "ask_question": "explain", "general_inquiry": "hi"}
    for size in range(len(SEED_MODIFIERS) + 1):
        for combo in itertools.combinations(SEED_MODIFIERS, size):
            found = detect_intents(message[base_intent], rules, combo)[0]
            expected = min(SEED_WEIGHTS[base_intent] + sum(SEED_MODIFIERS[m] for m in combo), 100)
            assert found.intent == base_intent
            assert found.modifiers == tuple(sorted(combo))
            assert found.score == expected


def test_cues_and_flags_add_up(rules: IntentRules) -> None:
    found = only("Explain Roth IRAs asap, the deadline is close", rules, ("session_in_progress",))
    assert found.modifiers == (
        "session_in_progress",
        "time_sensitive_deadline",
        "user_expressed_urgency",
    )
    assert found.score == 30 + 20 + 15 + 25


def test_emergency_with_urgency_is_capped_at_100(rules: IntentRules) -> None:
    found = only("I lost my job and need help asap", rules)
    assert found.intent == "emergency_financial"
    assert found.modifiers == ("user_expressed_urgency",)
    assert found.score == 100


def test_plan_with_all_four_modifiers_is_capped_at_100(rules: IntentRules) -> None:
    found = only("Make a plan", rules, tuple(SEED_MODIFIERS))
    assert found.modifiers == tuple(sorted(SEED_MODIFIERS))
    assert found.score == 100


def test_score_cap_comes_from_the_rules(rules: IntentRules) -> None:
    found = only("Make a plan asap", replace(rules, score_cap=70))
    assert found.score == 70


def test_unknown_intent_weight_falls_back_to_20(rules: IntentRules) -> None:
    extra = replace(rules, keywords={**rules.keywords, "retirement_question": ["pension"]})
    found = only("Tell me about my pension", extra)
    assert found.intent == "retirement_question"
    assert found.base_weight == 20
    assert found.score == 20
    assert only("My pension asap", extra).score == 45
    assert only("My pension", replace(extra, default_weight=35)).score == 35


# -- clause splitting ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "clauses"),
    [
        ("I lost my job. Can you help? Thanks!", ["I lost my job", "Can you help", "Thanks"]),
        ("Make a plan and also explain IRAs", ["Make a plan", "explain IRAs"]),
        ("I want a plan but I am broke", ["I want a plan", "I am broke"]),
        ("Budget for food, and explain bonds", ["Budget for food", "explain bonds"]),
        ("Make a plan and then call me", ["Make a plan", "call me"]),
        ("Make a plan then call me", ["Make a plan", "call me"]),
        ("Make a plan plus a budget", ["Make a plan", "a budget"]),
        ("Make a plan also a budget", ["Make a plan", "a budget"]),
        ("Make a plan AND ALSO a budget", ["Make a plan", "a budget"]),
        ("Make a plan, but also a budget", ["Make a plan", "a budget"]),
        ("first; second\nthird\r\nfourth", ["first", "second", "third", "fourth"]),
        ("Really?! Yes...", ["Really", "Yes"]),
    ],
)
def test_split_clauses_on_sentence_ends_and_joins(message: str, clauses: list[str]) -> None:
    assert split_clauses(message) == clauses


@pytest.mark.parametrize(
    "message",
    [
        "Pay rent and food",  # a bare "and" joins things within one request
        "I like butter and bread",  # "but" only as a whole word
        "Planetary authentic alsoran plusses",  # "plan", "then", "also", "plus" inside words
        "Also, make a plan",  # a join at the very start starts nothing
        "My rate is 3.5 percent",
        "It costs $4.99 a month",
        "Costs like rent, e.g. utilities",
        "Ask Dr. Smith about it",
    ],
)
def test_split_clauses_keeps_single_requests_whole(message: str) -> None:
    assert split_clauses(message) == [message]


def test_split_clauses_does_not_split_numbers_but_splits_after_them() -> None:
    assert split_clauses("My rate is 3.5 percent. It costs $4.99.") == [
        "My rate is 3.5 percent",
        "It costs $4.99",
    ]


def test_split_clauses_keeps_original_wording_and_strips_edges() -> None:
    assert split_clauses("  MAKE a Plan!!  ;  ,  Explain   bonds ,  ") == [
        "MAKE a Plan",
        "Explain   bonds",
    ]


@pytest.mark.parametrize("message", ["", "   ", " \n\t\r\n ", ". ; ! ?", " also but "])
def test_split_clauses_drops_empty_clauses(message: str) -> None:
    assert split_clauses(message) == []


@pytest.mark.parametrize(
    ("message", "clauses"),
    [
        (" " * 10_000, []),
        ("." * 10_000, []),
        (", " * 5_000 + "x", ["x"]),
        ("\n" * 10_000 + "x", ["x"]),
        ("then " * 2_000, ["then"]),
        ("a" * 10_000, ["a" * 10_000]),
    ],
)
def test_split_clauses_on_pathological_runs(message: str, clauses: list[str]) -> None:
    assert split_clauses(message) == clauses


# -- detection ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        "The planet is warm",
        "I am planning nothing",
        "Cancellation policy",
        "budgeting apps",
        "A subplan for rent",
        "The airplan_budget file",
    ],
)
def test_keywords_match_whole_words_only(rules: IntentRules, message: str) -> None:
    found = only(message, rules)
    assert found.intent == "general_inquiry"
    assert found.matched == ()


@pytest.mark.parametrize(
    "message",
    ["MAKE A PLAN", "make  a \t plan", "(make a plan)", "plan?", "I can't pay rent", "a budget."],
)
def test_keywords_match_any_case_whitespace_and_punctuation(
    rules: IntentRules, message: str
) -> None:
    assert only(message, rules).intent in {"request_plan", "emergency_financial"}
    assert only(message, rules).matched != ()


def test_multi_word_phrase_reports_every_phrase_it_contains(rules: IntentRules) -> None:
    found = only("Please MAKE  a   plan", rules)
    assert found.matched == ("make a plan", "plan")


def test_matched_phrases_follow_rule_order_not_text_order(rules: IntentRules) -> None:
    assert only("A budget, a plan", rules).matched == ("plan", "budget")


def test_rule_phrases_are_normalized(rules: IntentRules) -> None:
    shouty = replace(rules, keywords={"request_plan": ["  Make   A Plan "]})
    assert only("make a plan", shouty).matched == ("make a plan",)


def test_a_bare_string_of_keywords_is_one_phrase(rules: IntentRules) -> None:
    single = replace(rules, keywords={"request_plan": "make a plan"})
    assert only("make a plan", single).matched == ("make a plan",)
    assert only("a", single).intent == "general_inquiry"


def test_a_clause_may_hold_several_intents(rules: IntentRules) -> None:
    found = detect_intents("I lost my job and need a budget", rules)
    assert names(found) == ["emergency_financial", "request_plan"]
    assert {f.position for f in found} == {0}
    assert {f.clause for f in found} == {"I lost my job and need a budget"}


def test_an_intent_in_several_clauses_is_reported_once_at_its_first(rules: IntentRules) -> None:
    found = detect_intents("Explain bonds. Make a plan. Also a budget please", rules)
    assert names(found) == ["ask_question", "request_plan"]
    plan = found[1]
    assert plan.position == 1
    assert plan.clause == "Make a plan"
    assert plan.matched == ("make a plan", "plan", "budget")


def test_cues_apply_only_to_their_clause(rules: IntentRules) -> None:
    plan, question = detect_intents("Make a plan. Explain IRAs asap", rules)
    assert (plan.intent, plan.modifiers, plan.score) == ("request_plan", (), 50)
    assert (question.intent, question.modifiers, question.score) == (
        "ask_question",
        ("user_expressed_urgency",),
        55,
    )


def test_a_repeated_intent_collects_cues_from_each_of_its_clauses(rules: IntentRules) -> None:
    plan, question = detect_intents("Make a plan. Explain IRAs. Then a budget by Friday", rules)
    assert plan.intent == "request_plan"
    assert plan.modifiers == ("time_sensitive_deadline",)
    assert plan.score == 65
    assert question.modifiers == ()


def test_cues_of_a_later_clause_do_not_leak_to_other_intents(rules: IntentRules) -> None:
    plan, question = detect_intents("Make a plan and explain bonds. Also a budget asap", rules)
    assert (plan.intent, plan.modifiers) == ("request_plan", ("user_expressed_urgency",))
    assert (question.intent, question.modifiers, question.score) == ("ask_question", (), 30)


def test_context_flags_apply_to_every_intent_and_unknown_flags_are_ignored(
    rules: IntentRules,
) -> None:
    found = detect_intents(
        "I lost my job. Explain IRAs", rules, ["session_in_progress", "not_a_modifier"]
    )
    assert [(f.intent, f.modifiers, f.score) for f in found] == [
        ("emergency_financial", ("session_in_progress",), 100),
        ("ask_question", ("session_in_progress",), 50),
    ]


def test_cues_of_modifiers_without_points_are_ignored(rules: IntentRules) -> None:
    odd = replace(rules, cues={**rules.cues, "mystery": ["soon"]})
    assert only("Explain it soon", odd).modifiers == ()


def test_nothing_matching_gives_the_default_intent_for_the_whole_message(
    rules: IntentRules,
) -> None:
    found = only("  Nice weather. Good day  ", rules)
    assert found == DetectedIntent(
        intent="general_inquiry",
        clause="Nice weather. Good day",
        position=0,
        matched=(),
        base_weight=20,
        modifiers=(),
        score=20,
    )


def test_the_default_intent_takes_cues_from_anywhere_and_flags(rules: IntentRules) -> None:
    found = only("Nice weather today. Rent is due", rules, ["incomplete_critical_process", "x"])
    assert found.intent == "general_inquiry"
    assert found.modifiers == (
        "incomplete_critical_process",
        "time_sensitive_deadline",
        "user_expressed_urgency",
    )
    assert found.score == 20 + 30 + 15 + 25


@pytest.mark.parametrize("message", ["", "   "])
def test_an_empty_message_gives_the_default_intent(rules: IntentRules, message: str) -> None:
    found = only(message, rules)
    assert (found.intent, found.clause, found.score) == ("general_inquiry", "", 20)


def test_the_default_intent_comes_from_the_rules(rules: IntentRules) -> None:
    found = only("Nice weather", replace(rules, default_intent="ask_question"))
    assert (found.intent, found.base_weight, found.score) == ("ask_question", 30, 30)


def test_rules_without_any_phrases_always_give_the_default(rules: IntentRules) -> None:
    empty = replace(rules, keywords={}, cues={})
    assert only("make a plan asap", empty).intent == "general_inquiry"
    assert only("make a plan asap", empty).modifiers == ()


def test_compiled_matchers_are_not_part_of_equality_or_repr(rules: IntentRules) -> None:
    twin = replace(rules)
    assert twin == rules
    assert "_compiled" not in repr(rules)


def test_normalize_lowercases_and_collapses_whitespace() -> None:
    assert normalize("  Make \t A\n\nPLAN  ") == "make a plan"


# -- prioritization -----------------------------------------------------------------------


def test_a_mixed_message_gives_a_primary_and_ordered_secondaries(rules: IntentRules) -> None:
    message = "My income is 3000 a month. I lost my job, and I need a plan"
    prio = prioritize(detect_intents(message, rules), rules, clarification_margin=10)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "emergency_financial"
    assert prio.primary.clause == "I lost my job"
    assert names(prio.secondaries) == ["request_plan", "provide_info"]
    assert names(prio.intents) == ["emergency_financial", "request_plan", "provide_info"]


def test_higher_score_beats_higher_base_weight(rules: IntentRules) -> None:
    prio = prioritize(detect_intents("I want a consultation. Make a plan asap", rules), rules, 0)
    assert [(i.intent, i.score) for i in prio.intents] == [
        ("request_plan", 75),
        ("request_consultation", 60),
    ]


def test_equal_scores_are_ordered_by_base_weight_before_position(rules: IntentRules) -> None:
    # Both capped at 100; the change comes first in the message, the emergency weighs more.
    found = detect_intents("Cancel my card right away. I lost my job", rules)
    assert [(f.intent, f.score, f.position) for f in found] == [
        ("urgent_changes", 100, 0),
        ("emergency_financial", 100, 1),
    ]
    prio = prioritize(found, rules, clarification_margin=0)
    assert names(prio.intents) == ["emergency_financial", "urgent_changes"]


def test_equal_score_and_weight_are_ordered_by_position_before_name(rules: IntentRules) -> None:
    later_a = intent("alpha", 50, base=50, position=1)
    earlier_b = intent("beta", 50, base=50, position=0)
    for given in ([later_a, earlier_b], [earlier_b, later_a]):
        assert names(prioritize(given, rules, 0).intents) == ["beta", "alpha"]


def test_full_ties_are_ordered_by_name(rules: IntentRules) -> None:
    given = [intent(name, 50, base=50) for name in ("gamma", "alpha", "beta")]
    assert names(prioritize(given, rules, 0).intents) == ["alpha", "beta", "gamma"]
    assert names(prioritize(given[::-1], rules, 0).intents) == ["alpha", "beta", "gamma"]


def test_close_conflicting_top_intents_ask_for_clarification(rules: IntentRules) -> None:
    found = detect_intents("I want a consultation. Make a plan", rules)
    prio = prioritize(found, rules, clarification_margin=11)
    assert prio.primary is None
    assert prio.secondaries == ()
    assert names(prio.intents) == ["request_consultation", "request_plan"]
    assert prio.clarification is not None
    assert names(prio.clarification.options) == ["request_consultation", "request_plan"]
    assert prio.clarification.question == (
        "Do you want to start with request consultation or request plan?"
    )


def test_a_gap_equal_to_the_margin_does_not_ask(rules: IntentRules) -> None:
    found = detect_intents("I want a consultation. Make a plan", rules)
    prio = prioritize(found, rules, clarification_margin=10)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "request_consultation"
    assert names(prio.secondaries) == ["request_plan"]


def test_a_margin_of_zero_never_asks(rules: IntentRules) -> None:
    tied = [intent("urgent_changes", 80), intent("request_plan", 80)]
    prio = prioritize(tied, rules, clarification_margin=0)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "urgent_changes"


def test_intents_served_by_the_same_agent_do_not_conflict(rules: IntentRules) -> None:
    found = detect_intents("I lost my job. I need a consultation asap by Friday", rules)
    assert [(f.intent, f.score) for f in found] == [
        ("emergency_financial", 100),
        ("request_consultation", 100),
    ]
    prio = prioritize(found, rules, clarification_margin=10)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "emergency_financial"
    assert names(prio.secondaries) == ["request_consultation"]


def test_an_intent_without_an_agent_conflicts_with_nothing(rules: IntentRules) -> None:
    unserved = replace(rules, intent_agents={"urgent_changes": "Add_Changes_Agent"})
    close = [intent("urgent_changes", 80), intent("request_plan", 78)]
    assert prioritize(close, unserved, 10).clarification is None
    assert prioritize(close, rules, 10).clarification is not None


def test_clarification_options_are_the_close_conflicting_intents(rules: IntentRules) -> None:
    given = [
        intent("ask_question", 75),  # 15 behind the top: not close enough
        intent("request_plan", 82),  # close, different agent: an option
        intent("provide_info", 84),  # close, different agent: an option
        intent("request_consultation", 85),  # close, different agent: an option
        intent("urgent_changes", 90),
    ]
    prio = prioritize(given, rules, clarification_margin=10)
    assert prio.clarification is not None
    assert names(prio.clarification.options) == [
        "urgent_changes",
        "request_consultation",
        "provide_info",
        "request_plan",
    ]
    assert prio.clarification.question == (
        "Do you want to start with urgent changes, request consultation, provide info, "
        "or request plan?"
    )
    assert names(prio.intents) == [
        "urgent_changes",
        "request_consultation",
        "provide_info",
        "request_plan",
        "ask_question",
    ]


def test_an_emergency_is_never_held_for_a_clarification(rules: IntentRules) -> None:
    close = [intent("urgent_changes", 95), intent("emergency_financial", 100)]
    prio = prioritize(close, rules, clarification_margin=10)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "emergency_financial"
    assert names(prio.secondaries) == ["urgent_changes"]


def test_a_tie_at_the_cap_goes_to_the_higher_base_weight_without_asking(
    rules: IntentRules,
) -> None:
    """The issue's case: "I lost my job and need to cancel my plan asap" puts the
    emergency (100 + 25) and the change (80 + 25) both at the cap."""
    found = detect_intents("I lost my job and need to cancel my plan asap", rules)
    assert [(f.intent, f.score) for f in found][:2] == [
        ("emergency_financial", 100),
        ("urgent_changes", 100),
    ]
    prio = prioritize(found, rules, clarification_margin=10)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "emergency_financial"
    # Below the emergency, two capped intents of different base weights are told apart
    # too (the tie rule's base weight), and equal ones are still asked about.
    heavy = replace(rules, base_weights={**rules.base_weights, "request_plan": 80})
    capped = [intent("urgent_changes", 100), intent("request_consultation", 100)]
    assert prioritize(capped, heavy, 10).clarification is None
    same = [intent("urgent_changes", 100), intent("request_plan", 100, base=80)]
    assert prioritize(same, heavy, 10).clarification is not None


def test_an_unavailable_agents_intent_waits_behind_an_available_one(rules: IntentRules) -> None:
    with_modifier = replace(rules, modifiers={**rules.modifiers, AGENT_UNAVAILABLE: -25})
    found = detect_intents("I want a consultation. Make a plan for me", with_modifier)
    before = prioritize(found, with_modifier, 10)
    assert before.primary is not None
    assert before.primary.intent == "request_consultation"
    ranked = with_agent_availability(found, with_modifier, {"request_consultation"})
    consult = next(f for f in ranked if f.intent == "request_consultation")
    assert (consult.score, consult.modifiers) == (35, (AGENT_UNAVAILABLE,))
    after = prioritize(ranked, with_modifier, 0)
    assert after.primary is not None
    assert after.primary.intent == "request_plan"
    assert names(after.secondaries) == ["request_consultation"]
    # Never below zero; without the modifier in the rules, nothing changes.
    low = with_agent_availability(
        [intent("general_inquiry", 20)], with_modifier, {"general_inquiry"}
    )
    assert low[0].score == 0
    assert with_agent_availability(found, rules, {"request_consultation"}) == found


def test_an_emergency_keeps_its_place_when_its_agent_is_down(rules: IntentRules) -> None:
    with_modifier = replace(rules, modifiers={**rules.modifiers, AGENT_UNAVAILABLE: -25})
    found = detect_intents("I lost my job. Cancel my gym", with_modifier)
    ranked = with_agent_availability(found, with_modifier, {"emergency_financial"})
    assert ranked == found
    prio = prioritize(ranked, with_modifier, 10)
    assert prio.primary is not None
    assert prio.primary.intent == "emergency_financial"


def test_a_single_intent_never_asks(rules: IntentRules) -> None:
    prio = prioritize([intent("request_plan", 50)], rules, clarification_margin=100)
    assert prio.clarification is None
    assert prio.primary is not None
    assert prio.primary.intent == "request_plan"
    assert prio.secondaries == ()


def test_no_intents_give_no_primary(rules: IntentRules) -> None:
    prio = prioritize([], rules, clarification_margin=10)
    assert (prio.intents, prio.primary, prio.secondaries, prio.clarification) == (
        (),
        None,
        (),
        None,
    )


def test_analysis_is_deterministic(rules: IntentRules) -> None:
    message = "Cancel my card asap. I lost my job, and I need a plan by Friday. Explain bonds"
    first = detect_intents(message, rules, ["session_in_progress"])
    second = detect_intents(message, rules, ["session_in_progress"])
    assert first == second
    assert prioritize(first, rules, 10) == prioritize(second, rules, 10)
    assert prioritize(first, rules, 10) == prioritize(first[::-1], rules, 10)


# -- an AI classifier's answer -----------------------------------------------------------


def test_a_classifiers_intents_are_scored_by_the_rules(rules: IntentRules) -> None:
    """Named by the classifier, scored as detected ones: base weight, the caller's flags,
    and the cues of the clause the classifier gave (the whole message when it gave none)."""
    output = {
        "intents": [
            {"intent": "request_plan", "clause": "  a plan by Friday, urgent "},
            "ask_question",
        ]
    }
    message = "I need a plan by Friday, urgent. And a question"
    plan, question = classifier_intents(output, message, rules, ["session_in_progress"]) or []
    assert plan == DetectedIntent(
        intent="request_plan",
        clause="a plan by Friday, urgent",
        position=0,
        matched=("classifier",),
        base_weight=50,
        modifiers=("session_in_progress", "time_sensitive_deadline", "user_expressed_urgency"),
        score=100,
    )
    assert (question.intent, question.clause, question.position) == ("ask_question", message, 1)
    assert question.modifiers == (
        "session_in_progress",
        "time_sensitive_deadline",
        "user_expressed_urgency",
    )
    assert question.score == 30 + 20 + 15 + 25


def test_a_classifiers_unknown_or_repeated_intents_are_dropped(rules: IntentRules) -> None:
    output = {
        "intents": [
            {"intent": "no_such_intent"},
            {"clause": "no name"},
            7,
            {"intent": "ask_question", "clause": "first"},
            {"intent": "ask_question", "clause": "second"},
        ]
    }
    (found,) = classifier_intents(output, "message", rules) or []
    assert (found.intent, found.clause, found.position) == ("ask_question", "first", 3)


@pytest.mark.parametrize(
    "output",
    [None, "ask_question", {}, {"intents": []}, {"intents": "ask_question"}, {"intents": ["x"]}],
)
def test_a_classifier_answer_without_usable_intents_is_none(
    rules: IntentRules, output: object
) -> None:
    assert classifier_intents(output, "what is a budget", rules) is None


# -- large input --------------------------------------------------------------------------


def test_a_10000_character_message_gives_sensible_clauses(rules: IntentRules) -> None:
    sentence = "I lost my job and also I need a plan by Friday. "
    message = (sentence * (10_000 // len(sentence) + 1))[:10_000]
    assert len(message) == 10_000
    clauses = split_clauses(message)
    assert clauses[:4] == [
        "I lost my job",
        "I need a plan by Friday",
        "I lost my job",
        "I need a plan by Friday",
    ]
    assert len(clauses) == 2 * (10_000 // len(sentence)) + 1  # plus the cut-off tail
    assert all(len(clause) <= len("I need a plan by Friday") for clause in clauses)

    emergency, plan = detect_intents(message, rules)
    assert (emergency.intent, emergency.position, emergency.score) == (
        "emergency_financial",
        0,
        100,
    )
    assert (plan.intent, plan.position, plan.modifiers, plan.score) == (
        "request_plan",
        1,
        ("time_sensitive_deadline",),
        65,
    )


def test_a_10000_character_message_without_breaks_is_one_clause(rules: IntentRules) -> None:
    message = ("word " * 2_000).strip() + " budget"
    found = only(message, rules)
    assert found.intent == "request_plan"
    assert found.clause == message
    assert found.matched == ("budget",)
