"""The site's calendar: one day boundary, in TIME_ZONE, for everything that
counts by day or month (the token budgets, finance's daily chart, the
monthly summary and the date filters), whatever time zone a request has
activated."""

from __future__ import annotations

from datetime import date, datetime, time, tzinfo

from django.utils import timezone


def zone() -> tzinfo:
    return timezone.get_default_timezone()


def today() -> date:
    return timezone.localdate(timezone=zone())


def day_start(day: date) -> datetime:
    """Midnight starting `day` in the site's time zone."""
    return datetime.combine(day, time.min, tzinfo=zone())


def start_of_today() -> datetime:
    return day_start(today())
