"""A source's "Sync now", from its own page as from the list, and what the
last sync did: a column of the list, and a message to whoever started it
once it ends (helpcenter/sync_results.py). The sync itself runs here, in the
test's process, to its end: the admin's child process is test_sync_now.py's."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from chat.roles import ensure_roles
from helpcenter import admin as helpcenter_admin
from helpcenter.importers.sync import acquire, sync
from helpcenter.models import Source

pytestmark = pytest.mark.django_db

RESULT = "2 added, 0 updated, 0 unchanged, 0 unpublished"


@pytest.fixture
def admin_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_superuser(username="root", password="pw"))
    return client


@pytest.fixture
def in_process(monkeypatch):
    """The admin's sync, run to its end before the page answers: the lease
    taken (Busy at once, as the real one), then the whole sync."""

    def sync_here(source):
        run_id = acquire(source)
        try:
            sync(source, run_id)
        except Exception:
            pass  # recorded on the source, as the child's would be

    monkeypatch.setattr(helpcenter_admin, "sync_in_background", sync_here)


@pytest.fixture
def docs(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "refunds.md").write_text("# Getting a refund\n\nWrite to us within 30 days.\n")
    (folder / "invoices.md").write_text("# Downloading invoices\n\nOpen Billing, then Invoices.\n")
    return Source.objects.create(kind="markdown", name="Docs", location=str(folder))


def change_page(source):
    return reverse("admin:helpcenter_source_change", args=[source.pk])


def sync_button(source):
    return reverse("admin:helpcenter_source_sync", args=[source.pk])


def messages_of(response):
    return [(m.level_tag, str(m)) for m in response.context["messages"]]


def test_a_sources_page_has_a_sync_now_button_that_posts(admin_client, docs):
    page = admin_client.get(change_page(docs)).content.decode()

    form = page[page.index(f'action="{sync_button(docs)}"') - 200 :]
    assert '<form method="post"' in form and "csrfmiddlewaretoken" in form[:600]
    assert ">Sync now</button>" in form[:800]


def test_the_button_syncs_and_says_the_result_once_it_ends(admin_client, docs, in_process):
    response = admin_client.post(sync_button(docs), follow=True)

    assert response.redirect_chain == [(change_page(docs), 302)]
    assert messages_of(response) == [
        ("success", "Syncing Docs: this page shows how far it is."),
        ("success", f"Docs synced: {RESULT}."),
    ]
    again = admin_client.get(change_page(docs))
    assert messages_of(again) == [], "said once"
    assert RESULT in again.content.decode()  # the page's own "last result"


def test_the_list_action_says_the_result_too(admin_client, docs, in_process):
    response = admin_client.post(
        reverse("admin:helpcenter_source_changelist"),
        {"action": "sync_now", "_selected_action": [docs.pk]},
        follow=True,
    )

    assert ("success", f"Docs synced: {RESULT}.") in messages_of(response)


def test_the_list_shows_each_sources_last_result(admin_client, docs, in_process, tmp_path):
    Source.objects.create(kind="markdown", name="Never synced", location=str(tmp_path))
    admin_client.post(sync_button(docs))

    page = admin_client.get(reverse("admin:helpcenter_source_changelist")).content.decode()

    assert f'<td class="field-last_result_shown">{RESULT}</td>' in page
    assert '<td class="field-last_result_shown">-</td>' in page  # the admin's empty value


def test_a_sync_that_fails_says_why(admin_client, tmp_path, in_process):
    source = Source.objects.create(kind="markdown", name="Gone", location=str(tmp_path / "nowhere"))

    response = admin_client.post(sync_button(source), follow=True)

    assert ("error", f"Gone: the sync failed: {tmp_path / 'nowhere'} is not a folder") in messages_of(response)


def test_a_second_click_while_it_runs_is_told_at_once(admin_client, docs):
    acquire(docs)  # a sync of it runs: the real "Sync now" takes no second lease

    response = admin_client.post(sync_button(docs), follow=True)

    assert messages_of(response) == [("warning", "Docs is already syncing.")]
    assert 'action="' + sync_button(docs) + '"' not in response.content.decode(), "no button while it runs"


def test_only_a_post_syncs(admin_client, docs, in_process):
    assert admin_client.get(sync_button(docs)).status_code == 405
    docs.refresh_from_db()
    assert docs.synced_at is None


def test_only_superusers_sync(client, django_user_model, docs, in_process):
    ensure_roles()
    support = django_user_model.objects.create_user(username="sam", password="pw", is_staff=True)
    support.groups.add(Group.objects.get(name="Support"))
    client.force_login(support)

    assert client.post(sync_button(docs)).status_code == 403
    docs.refresh_from_db()
    assert docs.synced_at is None
