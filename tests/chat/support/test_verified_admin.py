"""Support sees who a verified visitor is (the person the customer's site
signed a token for: chat/visitors/verified.py): on the conversation list and
its transcript (chat/admin/conversations.py), on the queue of requests for a
person and a request's page (chat/support/handoff_admin.py). Marked
"Verified", read-only, escaped; an anonymous visitor has no such mark. The
lists filter by it and search the verified id; who may see it is who may
read the transcript."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from chat.models import Conversation, Turn
from chat.support import erasure
from tests.chat.support.test_handoff_admin import QUEUE, request_for_a_person, staff
from tests.chat.test_admin import result_rows

pytestmark = pytest.mark.django_db

CONVERSATIONS = reverse("admin:chat_conversation_changelist")
PERSON = {
    "verified_id": "user-4217",
    "verified_name": "Ana Souza",
    "verified_email": "ana@example.com",
    "verified_attributes": {"plan": "pro", "seats": 5, "trial": False},
}
BADGE = 'class="kk-badge kk-badge--verified"'


def conversation_of(person: dict | None = None, question: str = "Refund?") -> Conversation:
    conversation = Conversation.objects.create(visitor_hash="v", **(person or {}))
    Turn.objects.create(conversation=conversation, status="completed", user_text=question, model="m")
    return conversation


def transcript(client, conversation) -> str:
    response = client.get(reverse("admin:chat_conversation_change", args=[conversation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def request_page(client, handoff) -> str:
    response = client.get(reverse("admin:chat_handoff_change", args=[handoff.pk]))
    assert response.status_code == 200
    return response.content.decode()


def listed(client, url: str) -> set[int]:
    response = client.get(url)
    assert response.status_code == 200, url
    return {o.pk for o in response.context["cl"].result_list}


@pytest.fixture
def support(django_user_model):
    return staff(django_user_model, "sam", "Support")


@pytest.fixture
def finance(django_user_model):
    return staff(django_user_model, "fiona", "Finance")


@pytest.fixture(params=["Support", "superuser"])
def reader(request, django_user_model, admin_client):
    """Who reads transcripts and requests: Support, and a superuser."""
    if request.param == "superuser":
        return admin_client
    return staff(django_user_model, "sam", "Support")


# --- the transcript and the conversation list ---------------------------------------------------


def test_the_transcript_says_who_the_verified_visitor_is(reader):
    page = transcript(reader, conversation_of(PERSON))

    assert BADGE in page and "Verified" in page
    assert "user-4217" in page and "Ana Souza" in page
    assert '<a href="mailto:ana@example.com">ana@example.com</a>' in page
    assert "plan: pro; seats: 5; trial: false" in page  # the token's attributes, as signed


def test_the_conversation_list_marks_verified_visitors(reader):
    verified, anonymous = conversation_of(PERSON), conversation_of()

    listed = reader.get(CONVERSATIONS)
    rows = {row["pk"]: row["flags"] for row in result_rows(listed)}

    # Among the flags, one short mark (the list fits a 1,400 px screen): the name and email in its tooltip.
    assert rows[str(verified.pk)] == "✓Verifieduser-4217"
    assert 'title="Your site signed who this visitor is. Ana Souza, ana@example.com"' in listed.content.decode()
    assert rows[str(anonymous.pk)] == "-"


def test_an_anonymous_conversation_has_no_verified_mark(reader):
    conversation = conversation_of()

    page = transcript(reader, conversation)

    assert BADGE not in page
    assert '<span class="kk-reason kk-anonymous">Anonymous</span>' in page
    assert BADGE not in reader.get(CONVERSATIONS).content.decode()


def test_a_verified_person_with_only_an_id_shows_the_id(reader):
    conversation = conversation_of({"verified_id": "42"})

    page = transcript(reader, conversation)
    [row] = result_rows(reader.get(CONVERSATIONS))

    assert BADGE in page and '<code class="kk-verified-id">42</code>' in page
    assert "mailto:" not in page
    assert row["flags"] == "✓Verified42"


def test_an_erased_conversation_shows_no_person(reader):
    conversation = conversation_of(PERSON)
    erasure.erase_conversations([conversation.pk], by="test")

    page = transcript(reader, conversation)
    [row] = result_rows(reader.get(CONVERSATIONS))

    assert BADGE not in page
    for value in ("user-4217", "Ana Souza", "ana@example.com", "seats"):
        assert value not in page
    assert row["flags"] == "-"


def test_what_the_token_said_is_shown_escaped(reader):
    script = "<script>alert(1)</script>"
    conversation = conversation_of(
        {
            "verified_id": f"id{script}",
            "verified_name": f"Eve{script}",
            "verified_email": 'eve@example.com"><script>',
            "verified_attributes": {script: script},
        }
    )

    for page in (transcript(reader, conversation), reader.get(CONVERSATIONS).content.decode()):
        assert script not in page
        assert "<script>alert" not in page
        assert "Eve&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "eve@example.com&quot;&gt;&lt;script&gt;" in page


def test_a_long_verified_id_is_cut_in_the_list_and_whole_on_the_transcript(reader):
    long_id = "u" * 200
    conversation = conversation_of({"verified_id": long_id})

    [row] = result_rows(reader.get(CONVERSATIONS))

    assert row["flags"] == "✓Verified" + "u" * 13 + "…"
    assert f">{long_id}</code>" in transcript(reader, conversation)


def test_the_conversation_list_filters_verified_and_anonymous(reader):
    verified, anonymous = conversation_of(PERSON), conversation_of()
    other = conversation_of({"verified_id": "user-7"})

    assert listed(reader, CONVERSATIONS + "?verified=yes") == {verified.pk, other.pk}
    assert listed(reader, CONVERSATIONS + "?verified=no") == {anonymous.pk}
    assert listed(reader, CONVERSATIONS) == {verified.pk, anonymous.pk, other.pk}
    page = reader.get(CONVERSATIONS).content.decode()
    assert "?verified=yes" in page and "?verified=no" in page  # offered in the filters


def test_the_conversation_list_searches_the_verified_id_exactly_and_the_email(reader):
    verified = conversation_of(PERSON)
    longer = conversation_of({"verified_id": "user-42170"}, question="Other")
    said = conversation_of(question="Where is user-4217?")  # found by its words, as before

    assert listed(reader, CONVERSATIONS + "?q=user-4217") == {verified.pk, said.pk}
    assert listed(reader, CONVERSATIONS + "?q=USER-4217") == {verified.pk, said.pk}
    assert listed(reader, CONVERSATIONS + "?q=user-42170") == {longer.pk}
    assert listed(reader, CONVERSATIONS + "?q=ana@example") == {verified.pk}


@pytest.mark.parametrize("query", ["?verified_id=user-4217", "?verified_id__startswith=u", "?verified_email=x"])
def test_the_lists_take_no_lookup_on_the_verified_fields(reader, query):
    request_for_a_person(conversation=conversation_of(PERSON))

    assert reader.get(CONVERSATIONS + query).status_code == 400
    assert reader.get(QUEUE + query.replace("?", "?conversation__")).status_code == 400


def test_the_conversation_list_takes_the_same_queries_with_verified_visitors(admin_client, django_assert_num_queries):
    for _ in range(2):
        conversation_of()
    admin_client.get(CONVERSATIONS)
    with CaptureQueriesContext(connection) as anonymous:
        admin_client.get(CONVERSATIONS)
    for n in range(10):
        conversation_of({**PERSON, "verified_id": f"user-{n}"})

    with django_assert_num_queries(len(anonymous.captured_queries)):
        response = admin_client.get(CONVERSATIONS)
    assert len(result_rows(response)) == 12


def test_the_transcript_takes_the_same_queries_for_a_verified_visitor(admin_client, django_assert_num_queries):
    anonymous, verified = conversation_of(), conversation_of(PERSON)
    transcript(admin_client, anonymous)
    with CaptureQueriesContext(connection) as queries:
        transcript(admin_client, anonymous)

    with django_assert_num_queries(len(queries.captured_queries)):
        transcript(admin_client, verified)


# --- the queue of requests for a person and a request's page ---------------------------------------


def test_a_request_says_who_the_verified_visitor_is(reader):
    handoff = request_for_a_person(conversation=conversation_of(PERSON), email="ana.personal@example.com")

    page = request_page(reader, handoff)

    assert BADGE in page
    assert "user-4217" in page and "Ana Souza" in page
    assert '<a href="mailto:ana@example.com">ana@example.com</a>' in page
    assert "ana.personal@example.com" in page  # the address given with the request stays beside it
    assert "plan: pro" in page


def test_the_queue_marks_verified_visitors(reader):
    verified = request_for_a_person(conversation=conversation_of(PERSON))
    anonymous = request_for_a_person()

    queue = reader.get(QUEUE)
    rows = {row["pk"]: row["contact"] for row in result_rows(queue)}

    # With the email the visitor gave (here none), one short mark: the name and email in its tooltip.
    assert rows[str(verified.pk)] == "✓Verifieduser-4217"
    assert 'title="Your site signed who this visitor is. Ana Souza, ana@example.com"' in queue.content.decode()
    assert rows[str(anonymous.pk)] == "-"
    assert BADGE not in request_page(reader, anonymous)


def test_the_queue_filters_and_searches_verified_visitors(reader):
    verified = request_for_a_person(conversation=conversation_of(PERSON))
    anonymous = request_for_a_person()

    assert listed(reader, QUEUE + "?verified=yes") == {verified.pk}
    assert listed(reader, QUEUE + "?verified=no") == {anonymous.pk}
    assert listed(reader, QUEUE + "?q=user-4217") == {verified.pk}
    assert listed(reader, QUEUE + "?q=user-42") == set()  # the id exactly
    assert listed(reader, QUEUE + "?q=ana@example") == {verified.pk}


def test_the_queue_takes_the_same_queries_with_verified_visitors(support, django_assert_num_queries):
    for _ in range(2):
        request_for_a_person()
    support.get(QUEUE)
    with CaptureQueriesContext(connection) as anonymous:
        support.get(QUEUE)
    for n in range(10):
        request_for_a_person(conversation=conversation_of({**PERSON, "verified_id": f"user-{n}"}))

    with django_assert_num_queries(len(anonymous.captured_queries)):
        assert len(listed(support, QUEUE)) == 12


# --- who may ------------------------------------------------------------------------------------


def test_finance_sees_no_verified_person(finance):
    conversation = conversation_of(PERSON)
    handoff = request_for_a_person(conversation=conversation)

    for url in (
        CONVERSATIONS,
        CONVERSATIONS + "?verified=yes",
        reverse("admin:chat_conversation_change", args=[conversation.pk]),
        QUEUE,
        reverse("admin:chat_handoff_change", args=[handoff.pk]),
    ):
        response = finance.get(url)
        assert response.status_code == 403, url
        page = response.content.decode()
        assert "user-4217" not in page and "Ana Souza" not in page and "ana@example.com" not in page


@pytest.mark.parametrize("who", ["anonymous", "not staff"])
def test_outsiders_are_sent_to_the_login(client, django_user_model, who):
    conversation = conversation_of(PERSON)
    if who == "not staff":
        user = django_user_model.objects.create_user(username="visitor", is_staff=False)
        client.force_login(user)

    for url in (CONVERSATIONS, reverse("admin:chat_conversation_change", args=[conversation.pk]), QUEUE):
        response = client.get(url)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_nobody_edits_the_verified_person(reader):
    conversation = conversation_of(PERSON)
    handoff = request_for_a_person(conversation=conversation)
    forged = {
        "verified_id": "mallory",
        "verified_name": "Mallory",
        "verified_email": "mallory@example.com",
        "verified_attributes": "{}",
    }

    page = transcript(reader, conversation)
    reader.post(reverse("admin:chat_conversation_change", args=[conversation.pk]), forged)
    reader.post(reverse("admin:chat_handoff_change", args=[handoff.pk]), forged)

    assert 'name="verified_' not in page and 'name="verified_' not in request_page(reader, handoff)
    conversation.refresh_from_db()
    assert {name: getattr(conversation, name) for name in PERSON} == PERSON
