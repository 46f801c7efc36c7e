"""Lesson keywords match whole words, with regex characters taken literally, and the
educational fallback answers with the lesson that matches most."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from app.coordination.fallbacks import (
    GENERIC_APOLOGY,
    FallbackContext,
    FallbackTemplate,
    Lesson,
    run_fallback,
    words,
)

LESSONS = (
    Lesson(topic="budgeting_basics", title="Budgets", keywords=("budget", "spending"), body="B"),
    Lesson(topic="retirement", title="Retirement", keywords=("401(k)", "pension"), body="R"),
)
TEMPLATE = FallbackTemplate(message="{title}: {body}", default_topic="budgeting_basics")
TEMPLATES = {"static_educational_content": TEMPLATE}


def test_keywords_count_as_whole_words_only() -> None:
    lesson = Lesson(topic="t", title="T", keywords=("budget", "401(k)", "interest"), body="b")
    assert lesson.hits(words("What is a BUDGET?")) == 1
    assert lesson.hits(words("budgeting tips")) == 0
    assert lesson.hits(words("How does a 401(k) earn interest?")) == 2
    assert lesson.hits(words("401k")) == 0


async def _no_profile() -> list[Any]:
    raise AssertionError("the educational fallback reads no memories")


async def _answer(
    text: str, templates: dict[str, FallbackTemplate] = TEMPLATES
) -> tuple[str, dict[str, Any]]:
    ctx = FallbackContext(
        strategy="static_educational_content",
        text=text,
        intent="ask_question",
        failed_agent="Educate_Customer_Agent",
        user_id=uuid4(),
        now=datetime.now(UTC),
        read_profile=_no_profile,
        lessons=LESSONS,
    )
    result = await run_fallback(ctx, templates)
    return result.text, result.data


async def test_the_lesson_with_most_keyword_hits_answers() -> None:
    text, data = await _answer("My 401(k) or my pension: which first? And my budget?")
    assert text == "Retirement: R"
    assert data == {"topic": "retirement", "matched_keywords": 2}


async def test_no_match_falls_back_to_the_templates_default_topic() -> None:
    text, data = await _answer("Tell me something")
    assert text == "Budgets: B"
    assert data == {"topic": "budgeting_basics", "matched_keywords": 0}


async def test_a_missing_template_gives_the_plain_apology() -> None:
    text, _ = await _answer("budget", templates={})
    assert text == GENERIC_APOLOGY
