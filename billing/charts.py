"""The daily cost chart's geometry: bars for cost on the left axis, a line for
tokens on the right. The admin template draws it as inline SVG, so the page
needs no script and nothing from the network."""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal
from typing import Any

from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.formats import number_format
from django.utils.translation import gettext, pgettext

WIDTH, HEIGHT = 960, 300
LEFT, RIGHT, TOP, BOTTOM = 84, 76, 44, 56
PLOT_WIDTH, PLOT_HEIGHT = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
TICKS = 4
MAX_DATE_LABELS = 10


def nice_ceiling(value: float) -> float:
    """The smallest 1, 2, 2.5 or 5 times a power of ten that is >= value."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if value <= step * power * (1 + 1e-9))


def _plain(value: float) -> str:
    # As many decimals as the tick needs, no more: 0.0025, 0.5, 12 (and not
    # the float noise of 0.07500000000000001).
    return format(Decimal(repr(round(value, 10))).normalize(), "f")


def _usd(value: float) -> str:
    return "$" + _shown(value)


def _shown(value: float) -> str:
    """A tick's value in the page's language (0,0025 in Portuguese)."""
    return number_format(Decimal(_plain(value)))


def _tokens(value: float) -> str:
    suffixes = (
        (1_000_000_000, pgettext("billions, as in 2B tokens", "B")),
        (1_000_000, pgettext("millions, as in 2M tokens", "M")),
        (1_000, pgettext("thousands, as in 2k tokens", "k")),
    )
    for size, suffix in suffixes:
        if value >= size:
            return _shown(value / size) + suffix
    return _shown(value)


def _day_label(day: date, first: date, last: date) -> str:
    # Translators: Django date formats (the date template filter's letters): "Jan 5", and "Jan 5, 2025".
    shape = gettext("M j") if first.year == last.year else gettext("M j, Y")
    return date_format(day, shape)


def daily_chart(days: list[dict[str, Any]]) -> dict[str, Any]:
    """Everything the template needs to draw `days` (reports.daily rows)."""
    first, last = days[0]["day"], days[-1]["day"]
    cost_max = nice_ceiling(float(max(d["cost"] for d in days)))
    tokens_max = nice_ceiling(float(max(d["input_tokens"] + d["output_tokens"] for d in days)))
    slot = PLOT_WIDTH / len(days)
    bar_width = max(slot * 0.7, 1.0)
    bars, points = [], []
    for i, d in enumerate(days):
        tokens = d["input_tokens"] + d["output_tokens"]
        height = float(d["cost"]) / cost_max * PLOT_HEIGHT
        bars.append(
            {
                "x": LEFT + i * slot + (slot - bar_width) / 2,
                "y": TOP + PLOT_HEIGHT - height,
                "width": bar_width,
                "height": height,
                "slot_x": LEFT + i * slot,
                "slot_width": slot,
                "day": d,
            }
        )
        points.append((LEFT + i * slot + slot / 2, TOP + PLOT_HEIGHT - tokens / tokens_max * PLOT_HEIGHT))
    every = math.ceil(len(days) / MAX_DATE_LABELS)
    return {
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": LEFT + PLOT_WIDTH,
        "top": TOP,
        "bottom": TOP + PLOT_HEIGHT,
        "plot_height": PLOT_HEIGHT,
        "timezone": timezone.get_current_timezone_name(),
        "middle_x": LEFT + PLOT_WIDTH / 2,
        "middle_y": TOP + PLOT_HEIGHT / 2,
        "first": first,
        "last": last,
        "empty": not any(d["turns"] for d in days),
        "bars": bars,
        "line": " ".join(f"{x:.1f},{y:.1f}" for x, y in points),
        "points": [{"x": x, "y": y} for x, y in points],
        "ticks": [
            {
                "y": TOP + PLOT_HEIGHT - i / TICKS * PLOT_HEIGHT,
                "cost": _usd(cost_max * i / TICKS),
                "tokens": _tokens(tokens_max * i / TICKS),
            }
            for i in range(TICKS + 1)
        ],
        "labels": [
            {"x": LEFT + i * slot + slot / 2, "text": _day_label(d["day"], first, last)}
            for i, d in enumerate(days)
            if i % every == 0
        ],
    }
