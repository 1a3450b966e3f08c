"""The support report's volume: conversations and turns per day of a
period, or per week when the period is longer than a month, listing only
the days (or weeks) that had any. A month of mostly zeros hid the few days
that mattered; a quarter by day was 90 rows. Weeks run seven days from the
period's first day (the last one cut at its end), so that each is whole and
says its own first and last day."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date, datetime, timedelta, tzinfo
from typing import Any

# The longest period counted by day (a month); longer ones are counted by week.
MAX_DAYS_BY_DAY = 31


def by_week(first: date, last: date) -> bool:
    return (last - first).days + 1 > MAX_DAYS_BY_DAY


def rows(first: date, last: date, turns: Iterable[tuple[datetime, int]], zone: tzinfo) -> list[dict[str, Any]]:
    """Each day (or week) with a turn, in order: its first and last day, its
    conversations and turns, and its turns as a share of the busiest (for a
    bar). `turns` are (start, conversation id)."""
    span = 7 if by_week(first, last) else 1
    found: dict[int, dict[str, Any]] = {}
    for started, conversation in turns:
        index = (started.astimezone(zone).date() - first).days // span
        entry = found.setdefault(index, {"turns": 0, "conversations": set()})
        entry["turns"] += 1
        entry["conversations"].add(conversation)
    busiest = max((entry["turns"] for entry in found.values()), default=0)
    return [
        {
            "first": first + timedelta(days=index * span),
            "last": min(first + timedelta(days=index * span + span - 1), last),
            "conversations": len(entry["conversations"]),
            "turns": entry["turns"],
            "bar": round(100 * entry["turns"] / busiest),
        }
        for index, entry in sorted(found.items())
    ]
