"""The help center's admin, since the articles moved from chat: Support edits
them at their new address, and the old one sends there."""

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command

from chat.roles import ensure_roles
from helpcenter.models import Article

pytestmark = pytest.mark.django_db


@pytest.fixture
def support(client, django_user_model):
    ensure_roles()
    user = django_user_model.objects.create_user(username="sam", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    client.force_login(user)
    return user


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("/admin/chat/helparticle/", "/admin/helpcenter/article/"),
        ("/admin/chat/helparticle/?published__exact=1", "/admin/helpcenter/article/?published__exact=1"),
        ("/admin/chat/helparticle/add/", "/admin/helpcenter/article/add/"),
        ("/admin/chat/helparticle/7/change/", "/admin/helpcenter/article/7/change/"),
    ],
)
def test_the_old_admin_urls_redirect_to_the_new_ones(client, old, new):
    response = client.get(old)

    assert response.status_code == 301
    assert response["Location"] == new


def test_support_edits_articles_at_the_new_address(client, support):
    article = Article.objects.create(title="Refunds", slug="refunds", body="Within 14 days.")
    assert support.has_perm("helpcenter.change_article")
    assert not support.has_perm("chat.change_helparticle")

    old = client.get(f"/admin/chat/helparticle/{article.pk}/change/", follow=True)
    assert old.redirect_chain == [(f"/admin/helpcenter/article/{article.pk}/change/", 301)]
    assert old.status_code == 200

    response = client.post(
        f"/admin/helpcenter/article/{article.pk}/change/",
        {"title": "Refunds", "slug": "refunds", "body": "Within 30 days.", "published": "on", "locale": "en"},
    )
    assert response.status_code == 302
    assert Article.objects.get(pk=article.pk).body == "Within 30 days."


def test_the_demo_loader_keeps_its_name_and_fills_the_moved_table(client):
    call_command("load_demo_help_center", verbosity=0)

    assert Article.objects.count() >= 25
    assert Article._meta.db_table == "chat_helparticle"
    assert client.get("/help/").status_code == 200


def test_a_source_embedding_after_its_sync_says_so(client, django_user_model):
    from django.utils import timezone

    from helpcenter.models import Source

    client.force_login(django_user_model.objects.create_superuser(username="root", password="pw"))
    Source.objects.create(
        kind="markdown",
        name="Docs",
        location="/srv/docs",
        running_since=timezone.now(),
        progress_done=3,
        progress_total=10,
        progress_embedding=True,
    )
    Source.objects.create(
        kind="markdown",
        name="Notes",
        location="/srv/notes",
        running_since=timezone.now(),
        progress_done=4,
        progress_total=9,
    )

    page = client.get("/admin/helpcenter/source/").content.decode()

    assert "Embedding: 3 of 10 sections" in page
    assert "Syncing: 4 of 9" in page
