"""Small bar charts for the overview, drawn on the server as inline SVG.

No script and no style attribute (the console's CSP allows neither inline): the bars take
their colour from classes in console.css. Each chart names itself in ``<title>``, says what
it shows in words in ``<desc>`` (total, peak and when), and each bar carries its own
``<title>`` (a tooltip, and what a screen reader reads for it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import count
from typing import TYPE_CHECKING

from markupsafe import Markup, escape

if TYPE_CHECKING:
    from app.console.reads import Overview

WIDTH = 320
HEIGHT = 96
# Room for the y-axis labels on the left and the time labels below.
LEFT = 28
BOTTOM = 16
TOP = 6
_ids = count(1)


@dataclass(frozen=True, slots=True)
class Point:
    """One bucket: its start and its value."""

    at: datetime
    value: int


def _label(at: datetime, with_date: bool) -> str:
    return at.strftime("%m-%d %H:%M" if with_date else "%H:%M")


def bar_chart(title: str, points: Sequence[Point], tone: str = "plain") -> Markup:
    """An SVG bar chart of ``points`` (oldest first) with a 0 and a peak label on the y-axis
    and the first and last bucket's times on the x-axis. ``tone`` picks the bar class
    (``plain``, ``warn``, ``bad``)."""
    if tone not in ("plain", "warn", "bad"):
        raise ValueError(f"unknown tone {tone!r}")
    n = len(points)
    peak = max((p.value for p in points), default=0)
    total = sum(p.value for p in points)
    with_date = n > 1 and points[0].at.date() != points[-1].at.date()
    chart_id = f"chart-{next(_ids)}"
    if n == 0:
        summary = f"{title}: no data."
    elif total == 0:
        first, last = _label(points[0].at, with_date), _label(points[-1].at, with_date)
        summary = f"{title}: none from {first} to the end of {last}."
    else:
        busiest = max(points, key=lambda p: p.value)
        summary = (
            f"{title}: {total} in all from {_label(points[0].at, with_date)}, "
            f"at most {peak} in the interval from {_label(busiest.at, with_date)}."
        )
    plot_w = WIDTH - LEFT
    plot_h = HEIGHT - TOP - BOTTOM
    base = TOP + plot_h
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" aria-labelledby="{chart_id}-t {chart_id}-d">',
        f'<title id="{chart_id}-t">{escape(title)}</title>',
        f'<desc id="{chart_id}-d">{escape(summary)}</desc>',
        f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{WIDTH}" y2="{base}"/>',
        f'<text class="tick" x="{LEFT - 4}" y="{base}" text-anchor="end">0</text>',
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{peak}</text>',
    ]
    if n:
        slot = plot_w / n
        bar_w = max(slot * 0.8, 1.0)
        for i, p in enumerate(points):
            h = round(plot_h * p.value / peak, 1) if peak else 0
            x = round(LEFT + i * slot + (slot - bar_w) / 2, 1)
            parts.append(
                f'<rect class="bar bar-{tone}" x="{x}" y="{round(base - h, 1)}" '
                f'width="{round(bar_w, 1)}" height="{h}">'
                f"<title>{_label(p.at, with_date)}: {p.value}</title></rect>"
            )
        parts.append(
            f'<text class="tick" x="{LEFT}" y="{HEIGHT - 3}">'
            f"{_label(points[0].at, with_date)}</text>"
        )
        parts.append(
            f'<text class="tick" x="{WIDTH}" y="{HEIGHT - 3}" text-anchor="end">'
            f"{_label(points[-1].at, with_date)}</text>"
        )
    parts.append("</svg>")
    # Safe: the title and summary are escaped; everything else is numbers and times.
    return Markup("".join(parts))  # noqa: S704


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart of the overview: a heading and its SVG."""

    heading: str
    svg: Markup


def overview_charts(overview: Overview) -> list[Chart]:
    """The overview's four charts over its activity window."""
    buckets = overview.activity.buckets
    every = overview.activity.step
    minutes = int(every.total_seconds() // 60)
    per = f"per {minutes} min" if minutes < 60 else "per hour"

    def series(name: str) -> list[Point]:
        return [Point(b.bucket, int(getattr(b, name))) for b in buckets]

    return [
        Chart(f"Messages routed, {per}", bar_chart(f"Messages routed, {per}", series("decisions"))),
        Chart(f"Fallbacks, {per}", bar_chart(f"Fallbacks, {per}", series("fallbacks"), "warn")),
        Chart(f"Breaker trips, {per}", bar_chart(f"Breaker trips, {per}", series("trips"), "bad")),
        Chart(
            f"Tasks completed, {per}",
            bar_chart(f"Tasks completed, {per}", series("completed")),
        ),
        Chart(f"Tasks failed, {per}", bar_chart(f"Tasks failed, {per}", series("failed"), "bad")),
    ]
