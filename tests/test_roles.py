"""The staff roles: what Support and Finance can open in the admin, and
what they cannot. (The finance pages are tested in tests/billing/: test_admin.py,
test_ledger_filters.py, test_price_admin.py, test_exports.py and test_reports.py.)"""

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from billing.services import bill_once
from chat.models import Conversation, Generation, ToolCall, Turn
from chat.roles import ensure_roles
from helpcenter.models import Article

pytestmark = pytest.mark.django_db


@pytest.fixture
def records():
    conversation = Conversation.objects.create(visitor_hash="k")
    turn = Turn.objects.create(
        conversation=conversation, user_text="SECRET-VISITOR", assistant_text="SECRET-MODEL", model="gpt-4o-mini"
    )
    now = timezone.now()
    generation = Generation.objects.create(turn=turn, round=1, started_at=now, ended_at=now)
    call = ToolCall.objects.create(generation=generation, name="search_help_center", arguments="{}")
    article = Article.objects.create(title="Refunds", slug="refunds", body="Within 14 days.")
    bill_once(turn.id, model="gpt-4o-mini", input_tokens=10, output_tokens=5, estimated=False)
    return {
        "chat/conversation": conversation,
        "chat/turn": turn,
        "chat/generation": generation,
        "chat/toolcall": call,
        "helpcenter/article": article,
    }


def staff(django_user_model, role):
    ensure_roles()
    user = django_user_model.objects.create_user(username=role.lower(), password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=role))
    return user


def support_pages(records):
    for name, obj in records.items():
        yield f"/admin/{name}/"
        yield f"/admin/{name}/{obj.pk}/change/"


def test_roles_are_created_idempotently():
    ensure_roles()
    ensure_roles()
    assert sorted(Group.objects.values_list("name", flat=True)) == ["Finance", "Support"]
    assert Group.objects.get(name="Support").permissions.count() == 19
    assert Group.objects.get(name="Finance").permissions.count() == 7


def test_no_role_may_erase_transcripts():
    ensure_roles()
    for group in Group.objects.all():
        assert not group.permissions.filter(codename="erase_turn").exists(), group.name


def test_support_reads_transcripts_and_edits_the_help_center(client, django_user_model, records):
    client.force_login(staff(django_user_model, "Support"))
    for url in support_pages(records):
        assert client.get(url).status_code == 200, url
    response = client.post(
        f"/admin/helpcenter/article/{records['helpcenter/article'].pk}/change/",
        {"title": "Refund policy", "slug": "refunds", "body": "Within 30 days.", "published": "on", "locale": "en"},
    )
    assert response.status_code == 302
    assert Article.objects.get().body == "Within 30 days."


def test_support_cannot_change_transcripts(client, django_user_model, records):
    client.force_login(staff(django_user_model, "Support"))
    turn = records["chat/turn"]
    response = client.post(f"/admin/chat/turn/{turn.pk}/change/", {"assistant_text": "rewritten"})
    assert response.status_code == 403
    assert Turn.objects.get().assistant_text == "SECRET-MODEL"
    assert client.get(f"/admin/chat/turn/{turn.pk}/delete/").status_code == 403


def test_support_sees_no_prices(client, django_user_model, records):
    client.force_login(staff(django_user_model, "Support"))
    page = client.get("/admin/chat/conversation/").content.decode()
    assert "field-tokens_and_cost" not in page and "USD" not in page
    assert "field-tokens" in page
    for url in ("/admin/billing/ledgerentry/", "/admin/billing/price/"):
        assert client.get(url).status_code == 403, url


def test_finance_cannot_open_any_transcript_page(client, django_user_model, records):
    client.force_login(staff(django_user_model, "Finance"))
    for url in support_pages(records):
        response = client.get(url)
        assert response.status_code == 403, url
        assert "SECRET-" not in response.content.decode()
    index = client.get("/admin/").content.decode()
    assert "/admin/chat/" not in index
    assert "/admin/billing/ledgerentry/" in index


def test_superusers_see_everything_including_cost(admin_client, records):
    for url in support_pages(records):
        assert admin_client.get(url).status_code == 200, url
    assert "field-tokens_and_cost" in admin_client.get("/admin/chat/conversation/").content.decode()


@pytest.mark.parametrize("role", [None, "Support", "Finance"])
def test_the_admin_needs_staff_status(client, django_user_model, records, role):
    user = django_user_model.objects.create_user(username="visitor", password="pw", is_staff=False)
    if role:
        ensure_roles()
        user.groups.add(Group.objects.get(name=role))
    client.force_login(user)
    for url in ["/admin/", *support_pages(records)]:
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"], url


def test_finance_reads_what_embeddings_cost_and_support_does_not(client, django_user_model, records):
    from billing.models import EmbeddingEntry
    from billing.services import bill_embedding

    bill_embedding(EmbeddingEntry.Purpose.INDEXING, "text-embedding-3-small", 1234, passages=32)
    bill_embedding(EmbeddingEntry.Purpose.SEARCH, "text-embedding-3-small", 7, turn_id=records["chat/turn"].pk)
    client.force_login(staff(django_user_model, "Finance"))
    page = client.get("/admin/billing/embeddingentry/")
    assert page.status_code == 200
    text = page.content.decode()
    assert "1,234" in text and "text-embedding-3-small" in text
    assert "indexing the help center" in text and "a visitor&#x27;s search" in text
    entry = EmbeddingEntry.objects.get(purpose="search")
    assert client.get(f"/admin/billing/embeddingentry/{entry.pk}/change/").status_code == 200
    assert client.post(f"/admin/billing/embeddingentry/{entry.pk}/delete/").status_code == 403
    client.force_login(staff(django_user_model, "Support"))
    assert client.get("/admin/billing/embeddingentry/").status_code == 403
