"""The admin's "view on site" redirect (/admin/r/<content type>/<id>/): it
names an object's public URL only to those who may view or change the object
in the admin. Anyone else gets the 404 of an object that does not exist."""

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import reverse

from billing.models import LedgerEntry
from billing.services import bill_once
from chat.models import Conversation, Turn
from chat.roles import ensure_roles
from helpcenter.models import Article

pytestmark = pytest.mark.django_db

SECRET_SLUG = "layoffs-announcement-draft"


@pytest.fixture
def draft() -> Article:
    return Article.objects.create(title="Draft", slug=SECRET_SLUG, body="Not yet.", published=False)


def shortcut(obj) -> str:
    content_type = ContentType.objects.get_for_model(obj)
    return reverse("admin:view_on_site", args=[content_type.pk, obj.pk])


def logged_in(
    django_user_model, role: str | None, *, is_staff: bool = True, permissions: tuple[str, ...] = ()
) -> Client:
    ensure_roles()
    user = django_user_model.objects.create_user(username=f"user-{role}", password="pw", is_staff=is_staff)
    if role:
        user.groups.add(Group.objects.get(name=role))
    user.user_permissions.set(Permission.objects.filter(codename__in=permissions))
    client = Client()
    client.force_login(user)
    return client


def test_finance_gets_a_404_for_an_unpublished_article(django_user_model, draft):
    finance = logged_in(django_user_model, "Finance")

    response = finance.get(shortcut(draft))

    assert response.status_code == 404
    assert SECRET_SLUG not in response.get("Location", "") + response.content.decode()


def test_finance_gets_the_same_404_for_an_article_that_does_not_exist(django_user_model, draft):
    finance = logged_in(django_user_model, "Finance")
    content_type = ContentType.objects.get_for_model(Article)
    missing = reverse("admin:view_on_site", args=[content_type.pk, draft.pk + 1000])

    assert finance.get(missing).status_code == finance.get(shortcut(draft)).status_code == 404


def test_staff_with_no_role_get_a_404(django_user_model, draft):
    assert logged_in(django_user_model, None).get(shortcut(draft)).status_code == 404


def test_support_is_redirected_to_the_article(django_user_model, draft):
    support = logged_in(django_user_model, "Support")

    response = support.get(shortcut(draft))

    assert response.status_code == 302
    assert response["Location"].endswith(f"/help/{SECRET_SLUG}/")


def test_a_user_who_may_only_view_articles_is_redirected(django_user_model, draft):
    reader = logged_in(django_user_model, None, permissions=("view_article",))

    assert reader.get(shortcut(draft)).status_code == 302


def test_a_superuser_is_redirected(admin_client, draft):
    response = admin_client.get(shortcut(draft))

    assert response.status_code == 302
    assert response["Location"].endswith(f"/help/{SECRET_SLUG}/")


@pytest.mark.parametrize("role", [None, "Support", "Finance"])
def test_users_who_are_not_staff_are_sent_to_the_admin_login(django_user_model, draft, role):
    client = logged_in(django_user_model, role, is_staff=False)
    url = shortcut(draft)

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={url}"


def test_anonymous_visitors_are_sent_to_the_admin_login(client, draft):
    url = shortcut(draft)

    response = client.get(url)

    assert response.status_code == 302
    assert response["Location"] == f"/admin/login/?next={url}"


def test_a_model_outside_the_admin_is_a_404_even_for_a_superuser(admin_client, django_user_model):
    # Users are in the admin; sessions are not, and no ContentType names a model.
    session_type = ContentType.objects.get(app_label="sessions", model="session")
    for url in (
        reverse("admin:view_on_site", args=[session_type.pk, "anything"]),
        reverse("admin:view_on_site", args=[987654, 1]),
        "/admin/r/not-a-number/1/",
        "/admin/r/1/2/3/",
    ):
        assert admin_client.get(url).status_code == 404, url


def test_an_object_with_no_public_page_is_a_404_for_those_who_may_view_it(django_user_model):
    # Finance may view ledger entries; they have no public page.
    turn = Turn.objects.create(conversation=Conversation.objects.create(visitor_hash="k"), model="gpt-4o-mini")
    bill_once(turn.id, model="gpt-4o-mini", input_tokens=1, output_tokens=1, estimated=False)
    finance = logged_in(django_user_model, "Finance")

    assert finance.get(shortcut(LedgerEntry.objects.get())).status_code == 404


@pytest.mark.django_db
def test_supports_menu_puts_the_queue_first_and_the_day_in_order(client, django_user_model):
    """Alphabetical, the requests for a person sat between developer lists."""
    ensure_roles()
    user = django_user_model.objects.create_user("sam", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    client.force_login(user)

    apps = client.get("/admin/").context["app_list"]

    assert [app["app_label"] for app in apps] == ["chat", "helpcenter"]
    assert [model["object_name"] for model in apps[0]["models"]][:6] == [
        "Handoff",
        "Conversation",
        "Feedback",
        "UnansweredQuestion",
        "SupportReport",
        "Search",
    ]
