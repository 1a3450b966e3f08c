"""The admin's lookup policy, for every ModelAdmin in the project and for
django.contrib.auth's: a changelist filters only by the parameters its own
list filters and date hierarchy offer. (Search and ordering are not lookups:
they reach only the admin's own search fields and sortable columns.)

Django's default `lookup_allowed` accepts any lookup on the model's own
fields, so `?visitor_hash__startswith=ab` on a list turns its row count into
an oracle: one character at a time, anyone who may open the list reads a
hash, a key or a cost the page never shows them. Every other parameter is
refused with DisallowedModelAdminLookup, a 400, whatever its value.

The same holds for the admin's "view on site" redirect (`urls`): it names
only objects the user may see in the admin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.auth import admin as auth_admin
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes import views as contenttype_views
from django.contrib.contenttypes.models import ContentType
from django.db.models import Field, Model
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path

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


# django.contrib.auth's admins, unchanged but for the policy: a superuser's
# user list would otherwise answer ?password__startswith=.
class UserAdmin(OfferedLookupsOnly, auth_admin.UserAdmin):
    pass


class GroupAdmin(OfferedLookupsOnly, auth_admin.GroupAdmin):
    pass


admin.site.unregister([User, Group])
admin.site.register(User, UserAdmin)
admin.site.register(Group, GroupAdmin)


# --- "view on site" ------------------------------------------------------------------------


def urls(site: admin.AdminSite) -> tuple[list[URLPattern | URLResolver], str, str]:
    """`site.urls`, but for its "view on site" redirect (r/<content type>/<id>/).

    Django's answers any staff member for any object with a URL, so the
    redirect's Location told Finance an unpublished help article's slug.
    Here it answers only who may view or change the object in this admin;
    anyone else gets the 404 of an object that does not exist."""
    patterns, app_name, name = site.urls
    guarded = path(
        "r/<path:content_type_id>/<path:object_id>/", site.admin_view(_view_on_site(site)), name="view_on_site"
    )
    return [guarded if getattr(p, "name", None) == "view_on_site" else p for p in patterns], app_name, name


def _view_on_site(site: admin.AdminSite) -> Callable[..., HttpResponse]:
    def view_on_site(request: HttpRequest, content_type_id: str, object_id: str) -> HttpResponse:
        if _viewable_object(site, request, content_type_id, object_id) is None:
            raise Http404
        return contenttype_views.shortcut(request, content_type_id, object_id)

    return view_on_site


def _viewable_object(site: admin.AdminSite, request: HttpRequest, content_type_id: str, object_id: str) -> Model | None:
    """The object, if it is in its admin's queryset and the user may view or
    change it there; None for a model outside this admin, as for no object."""
    try:
        model = ContentType.objects.get_for_id(int(content_type_id)).model_class()
    except (ContentType.DoesNotExist, ValueError):
        return None
    if model is None or not site.is_registered(model):
        return None
    model_admin = site.get_model_admin(model)
    if not model_admin.has_view_or_change_permission(request):
        return None
    obj = model_admin.get_object(request, object_id)
    if obj is None or not model_admin.has_view_or_change_permission(request, obj):
        return None
    return obj
