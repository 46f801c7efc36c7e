"""Rule-based answers for when an agent is slow, failing, unconfigured or open-circuited.

One function per strategy of the seed's agentFallbackStrategies table. Wording and
parameters come from ``fallback_strategies.template`` (and ``educational_content``), so an
operator changes what users read without a deploy (each replica re-reads them with the
intent rules, within ``rules_cache_seconds``); the code only decides what to fill in.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

import msgspec

from app.common.jsontypes import JsonObject
from app.memories.schemas import Memory
from app.sessions.schemas import SHORT_TEXT_MAX, PendingAction
from app.sessions.state import clip

# Reads the user's profile memories under the access rules of whoever sent the message, and
# audits the read (MemoryService.read_user_category). It takes a pooled connection only when
# called: the one strategy that reads memories does, the others need no database.
ProfileReader = Callable[[], Awaitable[list[Memory]]]


@dataclass(frozen=True, slots=True)
class Lesson:
    """One stored lesson of ``educational_content``, its keywords compiled once."""

    topic: str
    title: str
    keywords: tuple[str, ...]
    body: str
    patterns: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Keywords are normalized as the question is (``words``), so "401(k)" meets "401 k".
        normalized = (words(k) for k in self.keywords)
        compiled = tuple(re.compile(rf"\b{re.escape(k)}\b") for k in normalized if k)
        object.__setattr__(self, "patterns", compiled)

    def hits(self, text: str) -> int:
        """How many of the keywords occur as whole words in ``text`` (made by ``words``)."""
        return sum(1 for pattern in self.patterns if pattern.search(text))


_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> str:
    """Lower-case words separated by single spaces: what keywords are matched against."""
    return " ".join(_WORD.findall(text.lower()))


class FallbackTemplate(msgspec.Struct, frozen=True):
    """A strategy's wording and parameters as stored (``fallback_strategies.template``);
    each strategy reads the members it needs, and ``{name}`` placeholders are filled in."""

    message: str = ""
    # direct_agent_routing: what is said when no specialist can be told from the message.
    unrouted: str = ""
    # manual_data_entry_prompt: the details the user is asked to enter.
    fields: list[str] = []
    # basic_budget_template: each part's share of the income in percent, and the keys of
    # the user's profile memories an income may be stored under.
    split: dict[str, float] = {}
    income_keys: list[str] = []
    # static_educational_content: the lesson given when no keyword matches.
    default_topic: str | None = None


@dataclass(frozen=True, slots=True)
class FallbackData:
    """The stored wording fallbacks answer with: every strategy's template and the lessons.
    Reference data, read together and cached briefly by the coordinator."""

    templates: dict[str, FallbackTemplate]
    lessons: tuple[Lesson, ...]


@dataclass(frozen=True, slots=True)
class FallbackContext:
    """What a fallback may use to answer."""

    strategy: str
    text: str
    intent: str | None
    failed_agent: str | None
    user_id: UUID
    now: datetime
    read_profile: ProfileReader
    # For direct_agent_routing: the agent the keyword rules would pick, if any.
    routed_agent: str | None = None
    routed_intent: str | None = None
    lessons: tuple[Lesson, ...] = ()


@dataclass(frozen=True, slots=True)
class FallbackResult:
    """A degraded but useful answer."""

    strategy: str
    text: str
    # The answer's output_data: each strategy's own.
    data: JsonObject = field(default_factory=dict)
    pending_action: PendingAction | None = None


class _Blanks(dict[str, object]):
    """format_map values: a placeholder with no value stays as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def fill(template: str, **values: object) -> str:
    """Fill ``{name}`` placeholders; unknown ones are left as they are."""
    return template.format_map(_Blanks(values))


def label(name: str | None) -> str:
    """``Make_Plan_Agent`` -> ``Make Plan Agent``; ``request_plan`` -> ``request plan``."""
    return (name or "").replace("_", " ").strip()


Strategy = Callable[[FallbackContext, FallbackTemplate], Awaitable[FallbackResult]]


async def keyword_based_intent_detection(
    ctx: FallbackContext, template: FallbackTemplate
) -> FallbackResult:
    """The classifier's fallback: the keyword rules already ran; say so."""
    return FallbackResult(ctx.strategy, fill(template.message, intent=ctx.intent))


async def direct_agent_routing(ctx: FallbackContext, template: FallbackTemplate) -> FallbackResult:
    """Skip the orchestrator: pass the request to the specialist the keyword rules point to
    (the coordinator then calls it), or, with nobody to pass it to, say so."""
    if ctx.routed_agent is None:
        text = template.unrouted
    else:
        text = fill(
            template.message,
            intent_label=label(ctx.routed_intent) or "your request",
            agent_label=label(ctx.routed_agent),
        )
    return FallbackResult(
        ctx.strategy,
        text,
        {"routed_intent": ctx.routed_intent, "routed_agent": ctx.routed_agent},
    )


async def manual_data_entry_prompt(
    ctx: FallbackContext, template: FallbackTemplate
) -> FallbackResult:
    """Ask the user to enter their data themselves, listing the fields."""
    fields = list(template.fields)
    text = fill(template.message, field_list=", ".join(map(label, fields)))
    return FallbackResult(ctx.strategy, text, {"fields": fields})


async def generic_financial_advice_disclaimer(
    ctx: FallbackContext, template: FallbackTemplate
) -> FallbackResult:
    """General guidance with the disclaimer."""
    return FallbackResult(ctx.strategy, template.message)


def _monthly_income(profile: list[tuple[str | None, object]], keys: list[str]) -> float | None:
    for key, content in profile:
        if key in keys and isinstance(content, int | float) and not isinstance(content, bool):
            return float(content)
        if isinstance(content, dict):
            for name in keys:
                value = content.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                    return float(value)
    return None


async def basic_budget_template(ctx: FallbackContext, template: FallbackTemplate) -> FallbackResult:
    """A 50/30/20 budget, in amounts when the user's profile says what they earn."""
    split = dict(template.split)
    # Only what the caller may read: an income at a level it lacks the role for is not used.
    memories = sorted(await ctx.read_profile(), key=lambda m: m.updated_at, reverse=True)
    profile = [(m.key, m.content) for m in memories]
    income = _monthly_income(profile, template.income_keys)
    if income is None:
        parts = {name: f"{share:g}%" for name, share in split.items()}
        amounts: dict[str, float] | None = None
        note = ""
    else:
        amounts = {name: round(income * share / 100, 2) for name, share in split.items()}
        parts = {name: f"{amount:,.2f}" for name, amount in amounts.items()}
        note = f" for a monthly income of {income:,.2f}"
    text = fill(template.message, income_note=note, **parts)
    return FallbackResult(
        ctx.strategy,
        text,
        {"split_percent": split, "monthly_income": income, "amounts": amounts},
    )


async def change_confirmation_without_analysis(
    ctx: FallbackContext, template: FallbackTemplate
) -> FallbackResult:
    """Record the change request and queue its analysis for later."""
    request = ctx.text if len(ctx.text) <= 200 else ctx.text[:197] + "..."
    action = PendingAction(
        type=ctx.intent or "urgent_changes",
        description=clip(ctx.text, SHORT_TEXT_MAX),
        status="pending",
        created_at=ctx.now,
        reason=f"{ctx.failed_agent or 'the change agent'} was unavailable",
    )
    return FallbackResult(
        ctx.strategy,
        fill(template.message, request=request),
        {"recorded_request": ctx.text},
        pending_action=action,
    )


async def static_educational_content(
    ctx: FallbackContext, template: FallbackTemplate
) -> FallbackResult:
    """The stored lesson whose keywords best match the question."""
    text = words(ctx.text)
    best, best_hits = None, 0
    for lesson in ctx.lessons:
        hits = lesson.hits(text)
        if hits > best_hits:
            best, best_hits = lesson, hits
    if best is None:
        default = template.default_topic
        best = next((lesson for lesson in ctx.lessons if lesson.topic == default), None)
    if best is None:
        return FallbackResult(ctx.strategy, "Our education assistant is not available right now.")
    return FallbackResult(
        ctx.strategy,
        fill(template.message, title=best.title, body=best.body),
        {"topic": best.topic, "matched_keywords": best_hits},
    )


STRATEGIES: dict[str, Strategy] = {
    "keyword_based_intent_detection": keyword_based_intent_detection,
    "direct_agent_routing": direct_agent_routing,
    "manual_data_entry_prompt": manual_data_entry_prompt,
    "generic_financial_advice_disclaimer": generic_financial_advice_disclaimer,
    "basic_budget_template": basic_budget_template,
    "change_confirmation_without_analysis": change_confirmation_without_analysis,
    "static_educational_content": static_educational_content,
}

GENERIC_APOLOGY = (
    "The assistant for this request is not available right now. Your message has been "
    "recorded in the session and will be picked up when it is back."
)


async def run_fallback(
    ctx: FallbackContext, templates: dict[str, FallbackTemplate]
) -> FallbackResult:
    """Run the strategy named in ``ctx`` with its template from ``templates``; an unknown
    or missing one gives a plain apology."""
    strategy = STRATEGIES.get(ctx.strategy)
    template = templates.get(ctx.strategy) if strategy else None
    if strategy is None or template is None:
        return FallbackResult(ctx.strategy or "none", GENERIC_APOLOGY)
    return await strategy(ctx, template)
