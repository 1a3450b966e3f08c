"""The admin's bases, and its lookup policy: a changelist filters only by
the parameters its own list filters and date hierarchy offer. (Search and
ordering are not lookups: they reach only the admin's own search fields and
sortable columns.)

Django's default `lookup_allowed` accepts any lookup on the model's own
fields, so `?visitor_hash__startswith=ab` on a list turns its row count into
an oracle: one character at a time, anyone who may open the list reads a
hash, a key or a cost the page never shows them. Every other parameter is
refused with DisallowedModelAdminLookup, a 400, whatever its value.

Every app's ModelAdmin builds on these; kookee/admin.py puts the policy on
django.contrib.auth's admins too, and guards "view on site".
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.db.models import Field
from django.http import HttpRequest

# The parameters a date hierarchy's links use (see ChangeList.get_filters).
DATE_HIERARCHY_PARTS = ("year", "month", "day")
# Years Python's dates can hold with the next month or year, in any time
# zone (year 1 east of UTC overflowed on SQLite); the ledger's range too.
MIN_YEAR, MAX_YEAR = 1900, 9998


class OfferedLookupsOnly:
    """A ModelAdmin mixin: only the lookups its filters offer are allowed."""

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        if lookup not in self.offered_lookups(request):
            return False
        if self.date_hierarchy and lookup == f"{self.date_hierarchy}__year":
            # Django builds the next year's (or month's) first day from it:
            # 9999 overflowed into a 500.
            return value.isascii() and value.isdigit() and MIN_YEAR <= int(value) <= MAX_YEAR
        return True

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
            yield from (f"{self.date_hierarchy}__{part}" for part in DATE_HIERARCHY_PARTS)

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
