"""Lesson keywords match whole words, with regex characters taken literally."""

from __future__ import annotations

from app.coordination.fallbacks import Lesson, words


def test_keywords_count_as_whole_words_only() -> None:
    lesson = Lesson(topic="t", title="T", keywords=("budget", "401(k)", "interest"), body="b")
    assert lesson.hits(words("What is a BUDGET?")) == 1
    assert lesson.hits(words("budgeting tips")) == 0
    assert lesson.hits(words("How does a 401(k) earn interest?")) == 2
    assert lesson.hits(words("401k")) == 0


def test_lessons_compare_by_their_data() -> None:
    one = Lesson(topic="t", title="T", keywords=("a",), body="b")
    assert one == Lesson(topic="t", title="T", keywords=("a",), body="b")
