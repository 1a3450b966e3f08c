"""The page a staff member gets for another role's admin URL (kookee/forbidden.py):
the admin's own, styled, saying whose page it is, with the way back to the
admin's home. Elsewhere, and for anyone not staff, Django's plain 403."""

import pytest
from django.contrib.auth.models import AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.test import Client, RequestFactory

from chat.roles import ensure_roles
from kookee import forbidden

pytestmark = pytest.mark.django_db

ADMIN_CSS = "/static/admin/css/base.css"


def staff(django_user_model, role: str | None, **language) -> Client:
    ensure_roles()
    user = django_user_model.objects.create_user(username=f"user-{role}", password="pw", is_staff=True)
    if role:
        user.groups.add(Group.objects.get(name=role))
    client = Client(**language)
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("role", "url", "whose"),
    [
        ("Support", "/admin/billing/ledgerentry/", "This page is for Finance."),
        ("Support", "/admin/billing/ledgerentry/monthly/", "This page is for Finance."),
        ("Finance", "/admin/chat/supportreport/", "This page is for Support."),
        ("Finance", "/admin/chat/conversation/", "This page is for Support."),
        ("Support", "/admin/helpcenter/source/", "This page is for superusers."),
        ("Support", "/admin/auth/user/", "This page is for superusers."),
    ],
)
def test_another_roles_page_says_whose_it_is_in_the_admins_look(django_user_model, role, url, whose):
    response = staff(django_user_model, role).get(url)

    assert response.status_code == 403
    page = response.content.decode()
    assert whose in page
    assert ADMIN_CSS in page  # the admin's stylesheet: not a bare page
    assert 'id="site-name"' in page
    assert 'href="/admin/"' in page  # the way back to the admin's home


def test_in_portuguese_it_is_the_admins_page_too(django_user_model):
    response = staff(django_user_model, "Support", HTTP_ACCEPT_LANGUAGE="pt-br").get("/admin/billing/ledgerentry/")

    assert response.status_code == 403
    page = response.content.decode()
    assert '<html lang="pt-br"' in page and ADMIN_CSS in page
    assert "403 Forbidden" not in page


def test_a_plain_403_for_anyone_not_staff_and_outside_the_admin(django_user_model):
    user = django_user_model.objects.create_user(username="visitor", password="pw")
    member = django_user_model.objects.create_user(username="member", password="pw", is_staff=True)
    factory = RequestFactory()
    for path, who in [("/admin/billing/ledgerentry/", user), ("/admin/", AnonymousUser()), ("/help/x/", member)]:
        request = factory.get(path)
        request.user = who

        response = forbidden.permission_denied(request, PermissionDenied())

        assert response.status_code == 403
        page = response.content.decode()
        assert "403 Forbidden" in page and ADMIN_CSS not in page, path


def test_the_project_uses_it():
    from kookee import urls

    assert urls.handler403 is forbidden.permission_denied
