"""The project's admin site: django.contrib.auth's admins under the lookup
policy of base/admin.py, and a "view on site" redirect that names only
objects the user may see in the admin."""

from __future__ import annotations

from collections.abc import Callable

from django.contrib import admin
from django.contrib.auth import admin as auth_admin
from django.contrib.auth.models import Group, User
from django.contrib.contenttypes import views as contenttype_views
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path

from base.admin import OfferedLookupsOnly


# django.contrib.auth's admins, unchanged but for the policy: a superuser's
# user list would otherwise answer ?password__startswith=.
class UserAdmin(OfferedLookupsOnly, auth_admin.UserAdmin):
    pass


class GroupAdmin(OfferedLookupsOnly, auth_admin.GroupAdmin):
    pass


admin.site.unregister([User, Group])
admin.site.register(User, UserAdmin)
admin.site.register(Group, GroupAdmin)


# --- the menu, in the order of Support's day, then Finance's --------------------------------

# Django lists apps and their models alphabetically: the queue of visitors
# waiting for a person sat between lists for developers. Support's work
# comes first, in the order it is done; then the help center, the money,
# and the accounts. What is not named keeps its alphabetical place after.
MENU = {
    "chat": ["handoff", "conversation", "feedback", "unansweredquestion", "supportreport", "search", "turn"],
    "helpcenter": ["article", "source"],
    "billing": [],
    "auth": [],
}


def _ranked(names: list[str], name: str) -> tuple[int, str]:
    return (names.index(name) if name in names else len(names), name)


def ordered_app_list(site: admin.AdminSite) -> Callable[..., list[dict]]:
    alphabetical = site.get_app_list

    def get_app_list(request: HttpRequest, app_label: str | None = None) -> list[dict]:
        apps = alphabetical(request, app_label)
        for app in apps:
            models = MENU.get(app["app_label"], [])
            app["models"].sort(key=lambda model: _ranked(models, model["object_name"].lower()))
        return sorted(apps, key=lambda app: _ranked(list(MENU), app["app_label"]))

    return get_app_list


admin.site.get_app_list = ordered_app_list(admin.site)  # type: ignore[method-assign]


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
