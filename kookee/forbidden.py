"""The page a staff member gets for an admin URL of another role's (Support
opening Finance's ledger, say): the admin's own page, in its look and the
user's language, saying whose page it is, with the way back to the admin's
home. Anywhere else, and for anyone not staff, Django's plain 403 (the
admin's look would show a visitor the admin's name and menu)."""

from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _
from django.views import defaults

# The roles of chat/roles.py, each in a sentence of its own (a role's name
# inside a sentence does not translate well).
FOR_ROLE = {"Finance": _("This page is for Finance."), "Support": _("This page is for Support.")}


def permission_denied(request: HttpRequest, exception: Exception) -> HttpResponse:
    site = admin.site
    prefix = reverse(f"{site.name}:index")
    user = getattr(request, "user", None)
    if not (request.path.startswith(prefix) and user is not None and user.is_active and user.is_staff):
        return defaults.permission_denied(request, exception)
    request.current_app = site.name
    context = {
        **site.each_context(request),
        "title": gettext("You may not open this page"),
        "whose": whose(request, _model_of(site, request.path[len(prefix) :])),
    }
    return render(request, "admin/403.html", context, status=403)


def whose(request: HttpRequest, model: type[Model] | None) -> str:
    """Whose page it is: the roles (groups) that may view the model's pages,
    but the user's own; superusers' when no role may."""
    if model is None:
        return gettext("Your account may not open this page.")
    codenames = [f"{action}_{model._meta.model_name}" for action in ("view", "change")]
    content_type = ContentType.objects.get_for_model(model, for_concrete_model=False)
    roles = set(
        Group.objects.filter(permissions__content_type=content_type, permissions__codename__in=codenames)
        .values_list("name", flat=True)
        .distinct()
    )
    if not roles:
        return gettext("This page is for superusers.")
    others = sorted(roles - set(request.user.groups.values_list("name", flat=True)))
    if not others:
        return gettext("Your account may not open this page.")
    if len(others) == 1 and others[0] in FOR_ROLE:
        return str(FOR_ROLE[others[0]])
    return gettext("This page is for %(roles)s.") % {"roles": ", ".join(others)}


def _model_of(site: admin.AdminSite, rest: str) -> type[Model] | None:
    """The registered model an admin path (after the admin's prefix) is a page of: app/model/..."""
    parts = rest.split("/")
    if len(parts) < 2:
        return None
    try:
        model = apps.get_model(parts[0], parts[1])
    except (LookupError, ValueError):
        return None
    return model if site.is_registered(model) else None
