"""The admin's bases, and its lookup policy: a changelist filters only by
the parameters its own list filters and date hierarchy offer. (Search and
ordering are not lookups: they reach only the admin's own search fields and
sortable columns.)

Django's default `lookup_allowed` accepts any lookup on the model's own
fields, so `?visitor_hash__startswith=ab` on a list turns its row count into
an oracle: one character at a time, anyone who may open the list reads a
hash, a key or a cost the page never shows them. Every other parameter is
refused with DisallowedModelAdminLookup, a 400, whatever its value.

A value an offered parameter cannot use is refused too, with a 400, never a
500 nor Django's ?e=1 redirect (whose page blames the database): a date or a
number its field cannot hold or Python's dates cannot count from, a date
hierarchy's day that does not exist, a NUL (PostgreSQL fails the query on
one). (Django's search form already drops a search with a NUL.)

Every app's ModelAdmin builds on these; kookee/admin.py puts the policy on
django.contrib.auth's admins too, and guards "view on site".
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date

from django.contrib import admin
from django.contrib.admin.utils import NotRelationField, get_fields_from_path
from django.core.exceptions import BadRequest, FieldDoesNotExist, ValidationError
from django.db import connections, router
from django.db.models import Field, IntegerField
from django.db.models.constants import LOOKUP_SEP
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.utils.translation import gettext

# Years Python's dates can hold with the next month or year, in any time
# zone (year 1 east of UTC overflowed on SQLite); the ledger's range too.
MIN_YEAR, MAX_YEAR = 1900, 9998
# The parameters a date hierarchy's links use (see ChangeList.get_filters),
# and the numbers each may be.
HIERARCHY_RANGES = {"year": (MIN_YEAR, MAX_YEAR), "month": (1, 12), "day": (1, 31)}
# The comparisons Django's field filters make with a value of the field's own
# type (`isnull` takes any value: Django reads it as true or false).
COMPARISONS = ("exact", "gt", "gte", "lt", "lte", "in")


class BadFilterValue(BadRequest):
    """A filter's value that names nothing the page can count from: the
    request's fault, a 400 that says which value is wrong."""


def bad_filter(reason: Exception) -> HttpResponseBadRequest:
    return HttpResponseBadRequest(gettext("Bad filter: %(reason)s") % {"reason": reason}, content_type="text/plain")


class OfferedLookupsOnly:
    """A ModelAdmin mixin: only the lookups its filters offer are allowed,
    with values they can use."""

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        if lookup not in self.offered_lookups(request) or "\x00" in value:  # PostgreSQL fails on a NUL
            return False
        part = self._hierarchy_part(lookup)
        if part:
            return _plain_number_in(value, *HIERARCHY_RANGES[part]) and self._hierarchy_day_exists(request)
        return _field_can_hold(self.model, lookup, value)

    def _hierarchy_part(self, lookup: str) -> str | None:
        if not self.date_hierarchy:
            return None
        prefix, _, part = lookup.rpartition(LOOKUP_SEP)
        return part if prefix == self.date_hierarchy and part in HIERARCHY_RANGES else None

    def _hierarchy_day_exists(self, request: HttpRequest) -> bool:
        """Django builds a datetime of the year, month and day (the last of
        each), then the next year, month or day: a day that does not exist
        (2026-02-30) was its ?e=1 page, a month of 20 digits a 500."""
        given = [request.GET.get(f"{self.date_hierarchy}__{part}") for part in HIERARCHY_RANGES]
        if given[0] is None:
            return True  # a month or a day alone is a plain lookup, checked above
        try:
            date(*(int(value or 1) for value in given))
        except (ValueError, OverflowError):
            return False
        return True

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)
        except BadFilterValue as e:
            return bad_filter(e)

    def offered_lookups(self, request: HttpRequest) -> frozenset[str]:
        # Per request: building field filters can query the database (their
        # choices), and lookup_allowed runs once per parameter and value.
        cache = request.__dict__.setdefault("_offered_lookups", {})
        if self not in cache:
            cache[self] = frozenset(self._offered_lookups(request))
        return cache[self]

    def _offered_lookups(self, request: HttpRequest) -> Iterable[str]:
        for list_filter in self.get_list_filter(request):
            yield from self._parameters_of(list_filter, request)
        if self.date_hierarchy:
            yield from (f"{self.date_hierarchy}__{part}" for part in HIERARCHY_RANGES)

    def _parameters_of(self, list_filter, request: HttpRequest) -> list[str]:
        """The parameters one list filter reads, built as ChangeList.get_filters
        builds it, with no parameters given."""
        if isinstance(list_filter, type) and issubclass(list_filter, admin.SimpleListFilter):
            return [list_filter.parameter_name]
        if callable(list_filter):  # another ListFilter class
            return list(list_filter(request, {}, self.model, self).expected_parameters())
        if isinstance(list_filter, (tuple, list)):
            field, filter_class = list_filter
        else:
            field, filter_class = list_filter, admin.FieldListFilter.create
        field_path = None
        if not isinstance(field, Field):
            field_path = field
            field = get_fields_from_path(self.model, field_path)[-1]
        spec = filter_class(field, request, {}, self.model, self, field_path=field_path)
        return list(spec.expected_parameters())


def _plain_number_in(value: str, low: int, high: int) -> bool:
    # ASCII digits only (int() takes " 12", "1_2" and other scripts' digits),
    # and not too many: int() refuses more than 4300 with a ValueError.
    return value.isascii() and value.isdigit() and len(value) <= 9 and low <= int(value) <= high


def _field_can_hold(model, lookup: str, value: str) -> bool:
    """Whether a field filter's value is one its field can hold: Django's
    filters refuse some with its ?e=1 redirect, and send others to the
    database, where a year 1 east of UTC or a 20-digit id overflowed."""
    field, comparison = _field_compared(model, lookup)
    if field is None:
        return True  # a filter's own parameter (a choice, a range): its filter parses it
    values = value.split(",") if comparison == "in" else [value]  # as Django splits it
    return all(_holds(field, one) for one in values)


def _field_compared(model, lookup: str) -> tuple[Field | None, str]:
    """The field a lookup compares (through relations) and how; (None, "")
    when it is not a comparison with a field's value."""
    path, comparison = lookup, "exact"
    if lookup.rpartition(LOOKUP_SEP)[2] in COMPARISONS:
        path, _, comparison = lookup.rpartition(LOOKUP_SEP)
    try:
        field = get_fields_from_path(model, path)[-1]
    except (FieldDoesNotExist, NotRelationField):
        return None, ""
    return getattr(field, "target_field", field), comparison  # a relation compares its key


def _holds(field: Field, value: str) -> bool:
    try:
        parsed = field.to_python(value)
    except (ValidationError, ValueError, TypeError, OverflowError):
        return False
    if isinstance(parsed, date):  # a datetime too
        return MIN_YEAR <= parsed.year <= MAX_YEAR
    if isinstance(field, IntegerField):
        return _in_the_columns_range(field, parsed)
    return True


def _in_the_columns_range(field: IntegerField, number: int) -> bool:
    # No row holds a number outside it; Django would send some of them to the
    # database (a list of them), which refuses them by failing the query.
    ops = connections[router.db_for_read(field.model)].ops
    low, high = ops.integer_field_range(field.get_internal_type())
    return (low is None or low <= number) and (high is None or number <= high)


class ModelAdmin(OfferedLookupsOnly, admin.ModelAdmin):
    """The base of every ModelAdmin in the project."""


class WrittenByTheApp:
    """A ModelAdmin mixin for rows the app writes and nobody edits,
    superusers included (the ledger, ratings, searches, pages of figures)."""

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
