"""The overview's inline SVG bar charts (app/console/charts.py)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest

from app.console.charts import BOTTOM, HEIGHT, TOP, Point, bar_chart
from app.console.reads import window_bounds

SVG = "{http://www.w3.org/2000/svg}"
START = datetime(2026, 11, 24, 10, 0, tzinfo=UTC)


def _points(values: list[int], step: timedelta = timedelta(minutes=5)) -> list[Point]:
    return [Point(START + i * step, v) for i, v in enumerate(values)]


def _parse(svg: str) -> ET.Element:
    # Inline SVG in HTML has no namespace declaration; add one to parse it as XML.
    # Our own output, not untrusted input.
    namespaced = str(svg).replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1)
    return ET.fromstring(namespaced)  # noqa: S314


def test_bars_scale_to_the_peak_and_carry_their_values() -> None:
    svg = _parse(bar_chart("Messages", _points([0, 5, 10, 2])))
    bars = svg.findall(f"{SVG}rect")
    assert len(bars) == 4
    heights = [float(b.get("height", "")) for b in bars]
    plot_h = HEIGHT - TOP - BOTTOM
    assert heights == [0, plot_h / 2, plot_h, round(plot_h * 2 / 10, 1)]
    assert [b.findtext(f"{SVG}title") for b in bars] == [
        "10:00: 0",
        "10:05: 5",
        "10:10: 10",
        "10:15: 2",
    ]
    # Every bar stands on the axis.
    bases = {round(float(b.get("y", "")) + float(b.get("height", "")), 1) for b in bars}
    assert bases == {HEIGHT - BOTTOM}


def test_title_desc_and_axis_labels_say_what_it_shows() -> None:
    svg = _parse(bar_chart("Fallbacks", _points([1, 4, 0]), "warn"))
    assert svg.get("role") == "img"
    assert svg.findtext(f"{SVG}title") == "Fallbacks"
    desc = svg.findtext(f"{SVG}desc")
    assert desc == "Fallbacks: 5 in all from 10:00, at most 4 in the interval from 10:05."
    labelled = svg.get("aria-labelledby", "").split()
    assert [svg.find(f".//*[@id='{i}']") is not None for i in labelled] == [True, True]
    ticks = [t.text for t in svg.findall(f"{SVG}text")]
    assert ticks == ["0", "4", "10:00", "10:10"]
    assert all("bar-warn" in b.get("class", "") for b in svg.findall(f"{SVG}rect"))


def test_an_empty_window_draws_no_bar_taller_than_zero() -> None:
    svg = _parse(bar_chart("Trips", _points([0, 0, 0])))
    assert {b.get("height") for b in svg.findall(f"{SVG}rect")} == {"0"}
    assert svg.findtext(f"{SVG}desc") == "Trips: none from 10:00 to the end of 10:10."
    assert _parse(bar_chart("Nothing", [])).findtext(f"{SVG}desc") == "Nothing: no data."


def test_labels_name_the_date_when_the_window_spans_midnight() -> None:
    points = [
        Point(datetime(2026, 11, 24, 23, 0, tzinfo=UTC), 1),
        Point(datetime(2026, 11, 25, 0, 0, tzinfo=UTC), 2),
    ]
    ticks = [t.text for t in _parse(bar_chart("Tasks", points)).findall(f"{SVG}text")]
    assert ticks[-2:] == ["11-24 23:00", "11-25 00:00"]


def test_the_title_is_escaped_and_there_is_no_inline_style_or_script() -> None:
    svg = str(bar_chart('<b>"x"</b> & y', _points([3])))
    assert "<b>" not in svg
    assert "&lt;b&gt;" in svg
    assert not re.search(r"style=|<script|on\w+=", svg)


def test_unknown_tone_is_refused() -> None:
    with pytest.raises(ValueError, match="tone"):
        bar_chart("x", [], "loud")


def test_windows_are_whole_aligned_buckets_ending_after_now() -> None:
    now = datetime(2026, 11, 24, 10, 7, 30, tzinfo=UTC)
    since, until, step = window_bounds(now, "1h")
    assert (since, until, step) == (
        datetime(2026, 11, 24, 9, 10, tzinfo=UTC),
        datetime(2026, 11, 24, 10, 10, tzinfo=UTC),
        timedelta(minutes=5),
    )
    since, until, step = window_bounds(now, "24h")
    assert until == datetime(2026, 11, 24, 11, 0, tzinfo=UTC)
    assert until - since == timedelta(hours=24)
    assert step == timedelta(hours=1)
