"""The sources in the admin: a token that is stored encrypted and never
shown, and what the article list says of each article. The sync started as
an action, in a child process, is in test_sync_now.py."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from chat.roles import ensure_roles
from helpcenter.importers import secrets
from helpcenter.importers.sync import sync
from helpcenter.models import Article, Source


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser(username="root", password="pw")
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_a_source_added_in_the_admin_keeps_its_token_encrypted_and_never_shows_it(admin_client, zendesk):
    response = admin_client.post(
        reverse("admin:helpcenter_source_add"),
        {
            "name": "Acme",
            "kind": "zendesk",
            "location": zendesk.url + "/",
            "settings": '{"locales": ["en-us"]}',
            "token": "agent@acme.example/token:s3cr3t",
            "token_env": "",
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    source = Source.objects.get()
    assert source.location == zendesk.url  # kept without its trailing slash
    assert "s3cr3t" not in source.token_encrypted
    assert secrets.token_for(source) == "agent@acme.example/token:s3cr3t"
    page = admin_client.get(reverse("admin:helpcenter_source_change", args=[source.pk])).content.decode()
    assert "s3cr3t" not in page and source.token_encrypted not in page
    assert "Set (encrypted)" in page

    # Saving again without a token keeps it; "forget" drops it.
    form = {"name": "Acme", "settings": '{"locales": ["en-us"]}', "token": "", "token_env": ""}
    admin_client.post(reverse("admin:helpcenter_source_change", args=[source.pk]), form)
    source.refresh_from_db()
    assert secrets.token_for(source) == "agent@acme.example/token:s3cr3t"
    admin_client.post(reverse("admin:helpcenter_source_change", args=[source.pk]), {**form, "clear_token": "on"})
    source.refresh_from_db()
    assert source.token_encrypted == ""


@pytest.mark.django_db
def test_a_bad_location_is_a_clear_error_that_saves_nothing(admin_client, tmp_path):
    response = admin_client.post(
        reverse("admin:helpcenter_source_add"),
        {"name": "Site", "kind": "website", "location": str(tmp_path), "settings": "{}"},
    )

    assert response.status_code == 200
    assert "a website source is a URL" in response.content.decode()
    assert not Source.objects.exists()


@pytest.mark.django_db
def test_a_failed_sync_says_why_on_the_page(admin_client, tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "bad.md").write_text("---\n: : :\n---\n")
    source = Source.objects.create(kind="markdown", name="Docs", location=str(folder))
    with pytest.raises(Exception, match="front matter"):
        sync(source)

    page = admin_client.get(reverse("admin:helpcenter_source_changelist")).content.decode()

    assert "Failed: bad.md: its front matter is not valid YAML" in page


@pytest.mark.django_db
def test_the_article_list_shows_source_state_and_last_sync_and_imported_articles_are_read_only(
    client, zendesk, django_user_model
):
    ensure_roles()
    user = django_user_model.objects.create_user(username="sam", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    client.force_login(user)
    source = Source.objects.create(kind="zendesk", name="Acme Zendesk", location=zendesk.url)
    sync(source)
    Article.objects.create(title="Typed", slug="typed", body="Mine.")
    imported = Article.objects.get(title="Refund policy")

    listing = client.get(reverse("admin:helpcenter_article_changelist")).content.decode()
    assert "Acme Zendesk" in listing and "Typed in the admin" in listing
    assert "Published" in listing and "Unpublished" in listing  # the draft

    page = client.get(reverse("admin:helpcenter_article_change", args=[imported.pk])).content.decode()
    assert "Imported from Acme Zendesk: edit it there" in page
    assert 'name="body"' not in page  # read-only
    assert imported.source_url in page
    response = client.post(reverse("admin:helpcenter_article_change", args=[imported.pk]), {"published": ""})
    assert response.status_code == 302
    imported.refresh_from_db()
    assert imported.published is False and imported.title == "Refund policy"


@pytest.mark.django_db
def test_unanswered_questions_link_to_a_new_article_with_the_question(client, django_user_model):
    from chat.models import Conversation, Search, Turn

    ensure_roles()
    user = django_user_model.objects.create_user(username="sam", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="Support"))
    client.force_login(user)
    from helpcenter import search

    conversation = Conversation.objects.create(visitor_hash="v")
    turn = Turn.objects.create(conversation=conversation, user_text="Can I pay with PIX?", status="completed")
    Search.objects.create(turn=turn, query="pay with PIX", terms=search.normalised("pay with PIX"), matched=False)

    page = client.get(reverse("admin:chat_unansweredquestion_changelist")).content.decode()

    link = reverse("admin:helpcenter_article_add") + "?title=Can%20I%20pay%20with%20PIX%3F"
    assert f'href="{link}"' in page
    form = client.get(link).content.decode()
    assert 'value="Can I pay with PIX?"' in form


@pytest.mark.django_db
@pytest.mark.parametrize("role", ["Support", "Finance"])
def test_sources_are_the_superusers_and_no_lookup_reaches_a_token(client, django_user_model, role):
    ensure_roles()
    user = django_user_model.objects.create_user(username="staff", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    source = Source.objects.create(kind="zendesk", name="Acme", location="https://acme.zendesk.com")

    for url in (
        reverse("admin:helpcenter_source_changelist"),
        reverse("admin:helpcenter_source_add"),
        reverse("admin:helpcenter_source_change", args=[source.pk]),
    ):
        assert client.get(url).status_code == 403, url
    assert (
        client.post(
            reverse("admin:helpcenter_source_changelist"), {"action": "sync_now", "_selected_action": [source.pk]}
        ).status_code
        == 403
    )
    articles = reverse("admin:helpcenter_article_changelist")
    expected = 200 if role == "Support" else 403
    assert client.get(articles + f"?source__id__exact={source.pk}").status_code == expected
    # A lookup through the source to its token, or its state, is refused whole.
    for probe in ("source__token_encrypted__startswith=g", "source__state__icontains=etag", "source__token_env=X"):
        assert client.get(f"{articles}?{probe}").status_code in (400, 403), probe
    assert Source.objects.get().running_since is None  # no sync was started


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("given", "error"),
    [
        ("[]", "the settings are a JSON object"),
        ('{"max_page": 10}', "unknown setting &#x27;max_page&#x27;"),
        ('{"max_pages": "10"}', "the setting &#x27;max_pages&#x27; must be int"),
        ('{"concurrency": 0}', "the setting &#x27;concurrency&#x27; must be at least 1"),
        ('{"include_restricted": "yes"}', "the setting &#x27;include_restricted&#x27; must be bool"),
        ('{"max_pages": true}', "the setting &#x27;max_pages&#x27; must be int"),
    ],
)
def test_bad_settings_are_a_clear_error_that_saves_nothing(admin_client, given, error):
    response = admin_client.post(
        reverse("admin:helpcenter_source_add"),
        {"name": "Site", "kind": "website", "location": "https://acme.example/docs/", "settings": given},
    )

    assert response.status_code == 200
    assert error in response.content.decode()
    assert not Source.objects.exists()


@pytest.mark.django_db
def test_bad_settings_stored_anyway_fail_the_sync_clearly(tmp_path):
    from helpcenter.importers import SourceError

    source = Source.objects.create(kind="markdown", name="Docs", location=str(tmp_path), settings={"max_pages": "x"})

    with pytest.raises(SourceError, match="must be int"):
        sync(source)
    source.refresh_from_db()
    assert "must be int" in source.last_error and source.running_since is None
