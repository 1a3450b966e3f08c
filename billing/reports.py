"""Usage reports for finance: totals, cost per day, a monthly summary per model.

Each report takes a ledger queryset that is already filtered (the admin's
changelist queryset) and runs exactly one query on it.
"""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import BigIntegerField, Count, DateField, F, Max, Min, Q, QuerySet, Sum
from django.db.models.functions import Cast, Coalesce, Round, TruncDate, TruncMonth

from billing.days import day_start, zone

# LedgerEntry.cost has 8 decimal places. SQLite sums decimals as floats, which
# can drift in the last place over many rows; summing whole hundred-millionths
# keeps every total exact on every backend.
_COST_UNITS = 10**8


def _cost_units() -> Sum:
    return Sum(Cast(Round(F("cost") * _COST_UNITS), BigIntegerField()))


# Summed per row and period; `cost` is the priced entries' cost, and
# `unpriced` counts the entries it leaves out.
COUNTS = ("turns", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "estimated_turns")


def _figures() -> dict[str, Any]:
    return {
        "turns": Count("pk"),
        "input_tokens": Coalesce(Sum("input_tokens"), 0),
        "cached_input_tokens": Coalesce(Sum("cached_input_tokens"), 0),
        "output_tokens": Coalesce(Sum("output_tokens"), 0),
        "reasoning_tokens": Coalesce(Sum("reasoning_tokens"), 0),
        "cost_units": Coalesce(_cost_units(), 0),
        "estimated_turns": Count("pk", filter=Q(estimated=True)),
        "unpriced": Count("pk", filter=Q(cost__isnull=True)),
    }


def _finish(row: dict[str, Any]) -> dict[str, Any]:
    """Turns the raw sums of a row into the figures finance reads."""
    row["cost"] = Decimal(int(row.pop("cost_units"))).scaleb(-8)
    row["estimated_share"] = row["estimated_turns"] / row["turns"] if row["turns"] else 0.0
    return row


def totals(entries: QuerySet) -> dict[str, Any]:
    """Turns, tokens (with their cached and reasoning parts), the priced
    entries' cost, how many are unpriced, and the share estimated."""
    return _finish(entries.aggregate(**_figures()))


def daily(entries: QuerySet, first: date, last: date) -> list[dict[str, Any]]:
    """One row per day from first to last (inclusive, days with no usage at
    zero): cost, tokens in and out."""
    rows = (
        entries.filter(created_at__gte=day_start(first), created_at__lt=day_start(last + timedelta(days=1)))
        .order_by()
        .annotate(day=TruncDate("created_at", tzinfo=zone()))
        .values("day")
        .annotate(**_figures())
    )
    by_day = {row["day"]: _finish(row) for row in rows}
    days = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        days.append(by_day.get(day, {"day": day, **_zero_total()}))
    return days


def monthly(entries: QuerySet) -> list[dict[str, Any]]:
    """Months, newest first, each with its rows per model and its total."""
    rows = (
        entries.order_by()
        .annotate(month=TruncMonth("created_at", output_field=DateField(), tzinfo=zone()))
        .values("month", "model")
        .annotate(**_figures())
        .order_by("-month", "model")
    )
    months: list[dict[str, Any]] = []
    for row in rows:
        if not months or months[-1]["month"] != row["month"]:
            months.append({"month": row["month"], "models": [], "total": _zero_total()})
        months[-1]["models"].append(_finish(row))
        _add(months[-1]["total"], row)
    for month in months:
        total = month["total"]
        total["estimated_share"] = total["estimated_turns"] / total["turns"] if total["turns"] else 0.0
    return months


def by_conversation(entries: QuerySet, limit: int) -> list[dict[str, Any]]:
    """The `limit` costliest conversations, each with its figures (and its
    public id: never a text)."""
    rows = (
        entries.order_by()
        .values(conversation=F("turn__conversation__public_id"))
        .annotate(**_figures(), first=Min("created_at"), last=Max("created_at"))
        .order_by("-cost_units", "-turns", "conversation")[:limit]
    )
    return [_finish(row) for row in rows]


def _zero_total() -> dict[str, Any]:
    return {**dict.fromkeys(COUNTS, 0), "unpriced": 0, "cost": Decimal(0), "estimated_share": 0.0}


def _add(total: dict[str, Any], row: dict[str, Any]) -> None:
    for key in (*COUNTS, "unpriced", "cost"):
        total[key] += row[key]
