"""Usage reports for finance: totals, cost per day, a monthly summary per model.

Each report takes a ledger queryset that is already filtered (the admin's
changelist queryset) and runs exactly one query on it.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import BigIntegerField, Count, DateField, F, Q, QuerySet, Sum
from django.db.models.functions import Cast, Coalesce, Round, TruncDate, TruncMonth
from django.utils import timezone

# LedgerEntry.cost has 8 decimal places. SQLite sums decimals as floats, which
# can drift in the last place over many rows; summing whole hundred-millionths
# keeps every total exact on every backend.
_COST_UNITS = 10**8


def _cost_units() -> Sum:
    return Sum(Cast(Round(F("cost") * _COST_UNITS), BigIntegerField()))


def _figures() -> dict[str, Any]:
    return {
        "turns": Count("pk"),
        "input_tokens": Coalesce(Sum("input_tokens"), 0),
        "output_tokens": Coalesce(Sum("output_tokens"), 0),
        "cost_units": Coalesce(_cost_units(), 0),
        "estimated_turns": Count("pk", filter=Q(estimated=True)),
    }


def _finish(row: dict[str, Any]) -> dict[str, Any]:
    """Turns the raw sums of a row into the figures finance reads."""
    row["cost"] = Decimal(int(row.pop("cost_units"))).scaleb(-8)
    row["estimated_share"] = row["estimated_turns"] / row["turns"] if row["turns"] else 0.0
    return row


def totals(entries: QuerySet) -> dict[str, Any]:
    """Turns, tokens in and out, cost and the share of estimated entries."""
    return _finish(entries.aggregate(**_figures()))


def day_start(day: date) -> datetime:
    """Midnight starting `day` in the site's time zone."""
    return timezone.make_aware(datetime.combine(day, time.min))


def daily(entries: QuerySet, first: date, last: date) -> list[dict[str, Any]]:
    """One row per day from first to last (inclusive, days with no usage at
    zero): cost, tokens in and out."""
    rows = (
        entries.filter(created_at__gte=day_start(first), created_at__lt=day_start(last + timedelta(days=1)))
        .order_by()
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(**_figures())
    )
    by_day = {row["day"]: _finish(row) for row in rows}
    days = []
    for offset in range((last - first).days + 1):
        day = first + timedelta(days=offset)
        zero = {"day": day, "turns": 0, "input_tokens": 0, "output_tokens": 0, "cost": Decimal(0)}
        days.append(by_day.get(day, zero))
    return days


def monthly(entries: QuerySet) -> list[dict[str, Any]]:
    """Months, newest first, each with its rows per model and its total."""
    rows = (
        entries.order_by()
        .annotate(month=TruncMonth("created_at", output_field=DateField()))
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


def _zero_total() -> dict[str, Any]:
    return {"turns": 0, "input_tokens": 0, "output_tokens": 0, "cost": Decimal(0), "estimated_turns": 0}


def _add(total: dict[str, Any], row: dict[str, Any]) -> None:
    for key in ("turns", "input_tokens", "output_tokens", "cost", "estimated_turns"):
        total[key] += row[key]
