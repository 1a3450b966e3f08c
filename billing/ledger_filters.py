"""The ledger's list filters: dates typed in or picked from common ranges
(a value that names no day is the request's fault, a 400 that says which),
the billed turn's status, and priced or not. The usage ledger's and the
embeddings' admins (billing/admin.py) filter by them."""

from __future__ import annotations

import re
from datetime import date, timedelta

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from base.admin import MAX_YEAR, MIN_YEAR, BadFilterValue
from billing import days

# The chart's days, without a date filter; "Last 30 days" is as many.
CHART_DAYS = 30

# The days a date filter may name: wider than any ledger, and far enough
# inside date.min and date.max that the day after `until`, the chart's days
# before it and midnight in any time zone all exist.
FIRST_DAY, LAST_DAY = date(MIN_YEAR, 1, 1), date(MAX_YEAR, 12, 31)
ISO_DAY = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})")
# Enough of a refused value to recognise it by, in the 400's message.
SHOWN_CHARS = 40


class BadDate(BadFilterValue):
    """A date filter's value that names no day the ledger can count from.

    Deliberately not an IncorrectLookupParameters: for that, the list page
    redirects to ?e=1, whose page blames the database. Every list that uses
    the filter answers 400 instead (base/admin.py), as do the ledger's other
    pages, and says which value is wrong."""


def _parse_day(param: str, value: str) -> date:
    """`value` as a day between FIRST_DAY and LAST_DAY; BadDate otherwise."""
    shown = {"param": param, "value": repr(value if len(value) <= SHOWN_CHARS else value[:SHOWN_CHARS] + "…")}
    match = ISO_DAY.fullmatch(value)
    try:
        day = date(*map(int, match.groups())) if match else None
    except ValueError:  # 2026-02-30, 0000-01-01
        day = None
    if day is None:
        raise BadDate(gettext("%(param)s: %(value)s is not a date (YYYY-MM-DD).") % shown)
    if not FIRST_DAY <= day <= LAST_DAY:
        message = gettext("%(param)s: %(value)s is out of range (%(first)s to %(last)s).")
        raise BadDate(message % {**shown, "first": FIRST_DAY.isoformat(), "last": LAST_DAY.isoformat()})
    return day


# What a ledger page's filters can raise: each is the request's fault.
BAD_FILTER = (IncorrectLookupParameters, ValidationError, BadFilterValue)


class DateRangeFilter(admin.FieldListFilter):
    """From and to dates (both included, in the site's time zone), typed in or
    picked from a few common ranges."""

    template = "admin/billing/date_range_filter.html"

    def __init__(self, field, request, params, model, model_admin, field_path):
        self.param_since = f"{field_path}__date__gte"
        self.param_until = f"{field_path}__date__lte"
        super().__init__(field, request, params, model, model_admin, field_path)
        self.since = self._date(self.param_since)
        self.until = self._date(self.param_until)
        # The sidebar form sends the other filters and the ordering along.
        self.other_params = [
            (name, value)
            for name, values in request.GET.lists()
            if name not in (self.param_since, self.param_until, "p", "e")
            for value in values
        ]

    def _date(self, param: str) -> date | None:
        # Every value is parsed, though the last one counts: none is ignored unread.
        given = [_parse_day(param, value) for value in self.used_parameters.get(param) or [] if value]
        return given[-1] if given else None

    def expected_parameters(self) -> list[str]:
        return [self.param_since, self.param_until]

    def queryset(self, request, queryset):
        # A range on the column itself, not on its date: the index serves it.
        if self.since:
            queryset = queryset.filter(**{f"{self.field_path}__gte": days.day_start(self.since)})
        if self.until:
            queryset = queryset.filter(**{f"{self.field_path}__lt": days.day_start(self.until + timedelta(days=1))})
        return queryset

    def get_facet_counts(self, pk_attname, filtered_qs) -> dict:
        return {}

    def _ranges(self) -> list[tuple[str, date | None, date | None]]:
        today = days.today()
        month_start = today.replace(day=1)
        last_month_end = month_start - timedelta(days=1)
        return [
            (gettext("Any date"), None, None),
            (gettext("Today"), today, today),
            (gettext("Last 7 days"), today - timedelta(days=6), today),
            (gettext("Last 30 days"), today - timedelta(days=CHART_DAYS - 1), today),
            (gettext("This month"), month_start, today),
            (gettext("Last month"), last_month_end.replace(day=1), last_month_end),
            (gettext("This year"), today.replace(month=1, day=1), today),
        ]

    def choices(self, changelist):
        for title, since, until in self._ranges():
            params = {self.param_since: since.isoformat(), self.param_until: until.isoformat()} if since else {}
            yield {
                "selected": (self.since, self.until) == (since, until),
                "query_string": changelist.get_query_string(params, [self.param_since, self.param_until]),
                "display": title,
            }


class BilledTurnStatusFilter(admin.ChoicesFieldListFilter):
    """Ledger entries by the status of the turn they bill."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.title = gettext("turn status")


class PricedFilter(admin.SimpleListFilter):
    title = _("price")
    parameter_name = "priced"

    def lookups(self, request, model_admin):
        return [("yes", gettext("Priced")), ("no", gettext("Unpriced"))]

    def queryset(self, request, queryset):
        if self.value() in ("yes", "no"):
            return queryset.filter(cost__isnull=self.value() == "no")
        return queryset
