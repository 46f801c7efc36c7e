"""Keyword intent detection and the seed's intent prioritization, as pure functions.

No I/O, no database, no clock: the rules come in as data (``IntentRules``), the answer goes out
as frozen dataclasses, and the same input always gives the same output.

Scoring is the seed's ``calculateIntentPriority``: the intent's base weight (or
``default_weight`` when it has none) plus the points of every context modifier that applies,
capped at ``score_cap``. A modifier applies when a caller/session flag names it (to every
intent) or when one of its cue phrases appears in a clause an intent was found in (to the
intents of that clause only; an intent found in several clauses is reported at the first one
and collects the cues of all of them).

Tie rule (the order of ``Prioritization.intents``), applied key by key until one differs:

1. higher score first;
2. then higher base weight (an emergency outranks a plan that modifiers lifted to the same score);
3. then earlier position in the message (the user asked for it first);
4. then intent name, alphabetically (so the order is total and deterministic).

The first intent is the primary unless the top two conflict (different serving agents) and
score closer than the clarification margin; then the user is asked which to start with. Two
exceptions: an emergency (base weight at the cap) is never held for a question, and two
intents tied at the cap are told apart by base weight (rule 2), not asked about.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

# Where one request ends and the next begins. Every break starts with one character of the
# leading class, which lets the regex engine skip ordinary text in C; the (?<!X.) anchors make
# only the first character of a run try a break, and possessive quantifiers consume the run
# once, so the split stays linear even for 10,000 spaces, commas or dots in a row.
_BREAK_START = r"[\s,.!?;\u2026]"
_HARD_BREAK = r"(?<=[;\r\n])"
# A sentence end is punctuation followed by whitespace or the end, so "3.5" and "$4.99" stay
# whole; a few abbreviations ("e.g.", "Dr.") are not sentence ends either.
_SENTENCE_END = (
    r"(?<=[.!?\u2026])(?<![.!?\u2026].)"
    r"(?<!\be\.g\.)(?<!\bi\.e\.)(?<!\bvs\.)(?<!\bmr\.)(?<!\bmrs\.)(?<!\bms\.)(?<!\bdr\.)"
    r"[.!?\u2026]*+[\"')\]\u201d\u2019]*+(?=\s|$)"
)
# Joins that start a new request: ", and", "and also", "and then", "also", "but", "plus",
# "then" between whitespace (a bare "and" joins things inside one request: "rent and food").
_JOIN = (
    r"(?<=[\s,])(?<![\s,].)"
    r"(?:(?<=,)[\s,]*+and|\s*+,[\s,]*+and"
    r"|[\s,]*+(?=[abpt])(?:and\s++also|and\s++then|also|but|plus|then))(?=\s)"
)
_CLAUSE_BREAK = re.compile(
    rf"{_BREAK_START}(?:{_HARD_BREAK}|{_SENTENCE_END}|{_JOIN})", re.IGNORECASE | re.DOTALL
)
_LEADING_JUNK = ",;: \t"
# The context modifier the coordinator applies to an intent whose agent cannot answer now.
AGENT_UNAVAILABLE = "agent_unavailable"
# Modifiers only the server applies: never from a caller's flags or a text cue.
SERVER_MODIFIERS = frozenset({AGENT_UNAVAILABLE})
_TRAILING_JUNK = ".,;:!? \t\u2026"


@dataclass(frozen=True, slots=True)
class _Phrase:
    """One distinct keyword/cue phrase: its matcher and whom a match counts for."""

    pattern: re.Pattern[str]
    intents: tuple[tuple[str, int], ...]  # (intent, rank of the phrase in its keyword list)
    modifiers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _CompiledRules:
    """The rules turned into matchers and lookup tables, built once per rules object."""

    # Every match of a phrase contains its longest word verbatim, so a plain substring test for
    # that word (fast, in C) rules most phrases out before any regex runs.
    by_word: tuple[tuple[str, tuple[_Phrase, ...]], ...]
    phrases: Mapping[str, tuple[str, ...]]  # intent -> its normalized phrases, in rule order
    intent_order: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class IntentRules:
    """Weights, keywords, modifiers and cues that drive detection and scoring (data, not code).

    Treat the mappings as immutable: the phrase matchers are compiled once, at construction.
    """

    base_weights: Mapping[str, int]
    keywords: Mapping[str, Sequence[str]]
    modifiers: Mapping[str, int]
    cues: Mapping[str, Sequence[str]]
    intent_agents: Mapping[str, str]
    default_intent: str = "general_inquiry"
    default_weight: int = 20
    score_cap: int = 100
    _compiled: _CompiledRules = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_compiled", _compile(self))

    def weight(self, intent: str) -> int:
        """The intent's base weight; ``default_weight`` for an intent without one."""
        return self.base_weights.get(intent, self.default_weight)


@dataclass(frozen=True, slots=True)
class DetectedIntent:
    """One intent found in a message, with the evidence and its priority score."""

    intent: str
    clause: str
    position: int
    matched: tuple[str, ...]
    base_weight: int
    modifiers: tuple[str, ...]
    score: int


@dataclass(frozen=True, slots=True)
class Clarification:
    """Conflicting top intents too close to call, and the question that lets the user pick."""

    options: tuple[DetectedIntent, ...]
    question: str


@dataclass(frozen=True, slots=True)
class Prioritization:
    """Detected intents in priority order: the primary and secondaries, or a clarification."""

    intents: tuple[DetectedIntent, ...]
    primary: DetectedIntent | None
    secondaries: tuple[DetectedIntent, ...]
    clarification: Clarification | None


def normalize(text: str) -> str:
    """Lowercase ``text`` and collapse every run of whitespace to one space (trimmed)."""
    return " ".join(text.lower().split())


def split_clauses(message: str) -> list[str]:
    """The requests in a message: split on sentence ends and on joins such as "and also",
    "but", "then"; original wording kept, edge whitespace and punctuation stripped."""
    clauses: list[str] = []
    for piece in _CLAUSE_BREAK.split(message):
        clause = piece.strip().rstrip(_TRAILING_JUNK).lstrip(_LEADING_JUNK).strip()
        if clause:
            clauses.append(clause)
    return clauses


def detect_intents(
    message: str, rules: IntentRules, context_flags: Iterable[str] = ()
) -> list[DetectedIntent]:
    """Every intent whose keywords occur in ``message``, once each at its first clause, scored;
    the default intent for the whole message when nothing matches."""
    compiled = rules._compiled
    flags = {f for f in context_flags if f in rules.modifiers and f not in SERVER_MODIFIERS}
    # intent -> (position, clause, phrase ranks, modifiers from cues)
    found: dict[str, tuple[int, str, set[int], set[str]]] = {}
    cues_anywhere: set[str] = set()
    lowered_message = message.lower()
    candidates = [(word, phrases) for word, phrases in compiled.by_word if word in lowered_message]
    for position, clause in enumerate(split_clauses(message) if candidates else ()):
        lowered = clause.lower()
        clause_intents: dict[str, set[int]] = {}
        clause_cues: set[str] = set()
        for word, phrases in candidates:
            if word not in lowered:
                continue
            for phrase in phrases:
                if phrase.pattern.search(lowered) is None:
                    continue
                for intent, rank in phrase.intents:
                    clause_intents.setdefault(intent, set()).add(rank)
                clause_cues.update(phrase.modifiers)
        cues_anywhere |= clause_cues
        for intent, ranks in clause_intents.items():
            earlier = found.get(intent)
            if earlier is None:
                found[intent] = (position, clause, ranks, set(clause_cues))
            else:
                earlier[2].update(ranks)
                earlier[3].update(clause_cues)

    if not found:
        return [
            score_intent(rules, rules.default_intent, message.strip(), 0, (), cues_anywhere | flags)
        ]
    order = compiled.intent_order
    detected: list[DetectedIntent] = []
    for intent, (position, clause, ranks, cues) in sorted(
        found.items(), key=lambda item: (item[1][0], order[item[0]])
    ):
        matched = tuple(map(compiled.phrases[intent].__getitem__, sorted(ranks)))
        detected.append(score_intent(rules, intent, clause, position, matched, cues | flags))
    return detected


def classifier_intents(
    output: object, message: str, rules: IntentRules, context_flags: Iterable[str] = ()
) -> list[DetectedIntent] | None:
    """The intents an AI classifier named in its ``output_data`` (``{"intents": [name or
    {"intent", "clause"}, ...]}``), scored by the rules like detected ones: base weight plus
    the modifiers the flags and the clause's cues apply. Unknown names are dropped, the
    first mention of a name counts; None when nothing usable is left."""
    raw = output.get("intents") if isinstance(output, dict) else None
    if not isinstance(raw, list) or not raw:
        return None
    flags = tuple(context_flags)
    found: dict[str, DetectedIntent] = {}
    for position, item in enumerate(raw):
        name = item.get("intent") if isinstance(item, dict) else item
        if not isinstance(name, str) or name not in rules.base_weights or name in found:
            continue
        clause = item.get("clause") if isinstance(item, dict) else None
        clause = clause if isinstance(clause, str) and clause.strip() else message
        # The cues (and flags) the keyword rules see in the clause apply to what it names.
        cues = {m for seen in detect_intents(clause, rules, flags) for m in seen.modifiers}
        found[name] = score_intent(rules, name, clause.strip(), position, ("classifier",), cues)
    return list(found.values()) or None


def with_agent_availability(
    intents: Sequence[DetectedIntent], rules: IntentRules, unavailable: Iterable[str]
) -> list[DetectedIntent]:
    """The intents, rescored with the ``agent_unavailable`` modifier for each one named in
    ``unavailable`` (its agent cannot answer now: breaker open). The seed ranks by "agent
    capacity and availability status" too; the points are data like every modifier's, and
    a rule set without the modifier leaves the scores as they are. An emergency is exempt:
    it is answered now, by its agent or its fallback, never queued behind other work."""
    down = set(unavailable)
    if AGENT_UNAVAILABLE not in rules.modifiers or not down:
        return list(intents)
    return [
        score_intent(
            rules,
            found.intent,
            found.clause,
            found.position,
            found.matched,
            {*found.modifiers, AGENT_UNAVAILABLE},
        )
        if found.intent in down and not is_emergency(found, rules)
        else found
        for found in intents
    ]


def is_emergency(intent: DetectedIntent, rules: IntentRules) -> bool:
    """An intent whose base weight alone reaches the cap (the seed's emergency_financial,
    100): it is never held back by a clarification question."""
    return intent.base_weight >= rules.score_cap


def priority_key(intent: DetectedIntent) -> tuple[int, int, int, str]:
    """Sort key implementing the tie rule: score, base weight (both descending), position, name."""
    return (-intent.score, -intent.base_weight, intent.position, intent.intent)


def prioritize(
    intents: Sequence[DetectedIntent], rules: IntentRules, clarification_margin: int
) -> Prioritization:
    """Order intents by the tie rule and pick the primary, or ask the user when the top two
    conflict and score within ``clarification_margin`` of each other (0 never asks)."""
    ordered = tuple(sorted(intents, key=priority_key))
    if not ordered:
        return Prioritization(intents=(), primary=None, secondaries=(), clarification=None)
    top = ordered[0]
    agents = rules.intent_agents

    def too_close(other: DetectedIntent) -> bool:
        # At the cap, scores no longer tell intents apart; their base weights still do, and
        # the tie rule already put the higher one first.
        capped = top.score >= rules.score_cap and other.score >= rules.score_cap
        if capped and top.base_weight != other.base_weight:
            return False
        return top.score - other.score < clarification_margin and _conflict(agents, top, other)

    if (
        clarification_margin > 0
        and len(ordered) >= 2
        and not is_emergency(top, rules)
        and too_close(ordered[1])
    ):
        close = [other for other in ordered[1:] if too_close(other)]
        options = (top, *close)
        clarification = Clarification(options=options, question=_question(options))
        return Prioritization(
            intents=ordered, primary=None, secondaries=(), clarification=clarification
        )
    return Prioritization(intents=ordered, primary=top, secondaries=ordered[1:], clarification=None)


def _conflict(agents: Mapping[str, str], one: DetectedIntent, other: DetectedIntent) -> bool:
    """Two intents conflict when different agents serve them; an unserved intent never does."""
    first, second = agents.get(one.intent), agents.get(other.intent)
    return first is not None and second is not None and first != second


def _question(options: Sequence[DetectedIntent]) -> str:
    """A question naming every option by its intent name, in priority order."""
    names = [option.intent.replace("_", " ") for option in options]
    if len(names) == 2:
        listed = f"{names[0]} or {names[1]}"
    else:
        listed = f"{', '.join(names[:-1])}, or {names[-1]}"
    return f"Do you want to start with {listed}?"


def score_intent(
    rules: IntentRules,
    intent: str,
    clause: str,
    position: int,
    matched: tuple[str, ...],
    modifiers: set[str],
) -> DetectedIntent:
    """The seed's calculateIntentPriority: base (or default) weight + modifier points, capped
    (and never below 0: a modifier may take points away, as agent_unavailable does)."""
    base = rules.weight(intent)
    applied = tuple(sorted(modifiers))
    score = min(base + sum(map(rules.modifiers.__getitem__, applied)), rules.score_cap)
    score = max(score, 0)
    # Positional: this runs once per detected intent, on the hot path.
    return DetectedIntent(intent, clause, position, matched, base, applied, score)


def _phrase_list(phrases: Sequence[str] | str) -> Sequence[str]:
    # A bare string is a Sequence[str] too; treat it as one phrase, not as its letters.
    return (phrases,) if isinstance(phrases, str) else phrases


def _compile(rules: IntentRules) -> _CompiledRules:
    """Matchers for every distinct keyword and cue phrase, filed under their longest word."""
    owners: dict[str, tuple[list[tuple[str, int]], list[str]]] = {}
    phrases: dict[str, tuple[str, ...]] = {}
    for intent, listed in rules.keywords.items():
        normalized: list[str] = []
        for phrase in _phrase_list(listed):
            text = normalize(phrase)
            if text and text not in normalized:
                owners.setdefault(text, ([], []))[0].append((intent, len(normalized)))
                normalized.append(text)
        phrases[intent] = tuple(normalized)
    for modifier, listed in rules.cues.items():
        if modifier not in rules.modifiers or modifier in SERVER_MODIFIERS:
            continue
        for phrase in _phrase_list(listed):
            text = normalize(phrase)
            if text and modifier not in owners.setdefault(text, ([], []))[1]:
                owners[text][1].append(modifier)

    by_word: dict[str, list[_Phrase]] = {}
    for text in sorted(owners):
        intents, modifiers = owners[text]
        longest_word = max(text.split(" "), key=len)
        by_word.setdefault(longest_word, []).append(
            _Phrase(_phrase_pattern(text), tuple(intents), tuple(modifiers))
        )
    return _CompiledRules(
        by_word=tuple((word, tuple(listed)) for word, listed in by_word.items()),
        phrases=phrases,
        intent_order={intent: index for index, intent in enumerate(phrases)},
    )


def _phrase_pattern(text: str) -> re.Pattern[str]:
    """A normalized phrase as a whole-word regex: any whitespace run between its words, and no
    word character right before or after it.

    The "not after a word character" test comes after the first word rather than before it, so
    the pattern starts with a literal and the engine can search for it quickly.
    """
    first, *rest = (re.escape(word) for word in text.split(" "))
    tail = "".join(rf"\s+{word}" for word in rest)
    return re.compile(rf"{first}(?<!\w{first}){tail}(?!\w)")
