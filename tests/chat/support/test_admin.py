"""Support reads visitors' ratings: in transcripts, as filters, and in a
review queue (chat/support/admin.py) of the answers with the articles each used."""

import json
import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from chat.models import Conversation, Feedback, Generation, ToolCall, Turn
from chat.roles import ensure_roles

pytestmark = pytest.mark.django_db


def staff(django_user_model, name, group):
    ensure_roles()
    user = django_user_model.objects.create_user(username=name, password="a-long-test-password", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def support(django_user_model):
    return staff(django_user_model, "sam", "Support")


@pytest.fixture
def finance(django_user_model):
    return staff(django_user_model, "fiona", "Finance")


def rated_turn(rating=None, comment="", question="How do I export?", answer="See [Exporting](/help/export/)."):
    conversation = Conversation.objects.create(visitor_hash="v")
    turn = Turn.objects.create(
        conversation=conversation, status="completed", user_text=question, assistant_text=answer, model="m"
    )
    generation = Generation.objects.create(turn=turn, round=1, started_at=turn.started_at, ended_at=turn.started_at)
    result = {"articles": [{"id": 1, "title": "Exporting", "url": "/help/export/", "snippet": "..."}]}
    ToolCall.objects.create(generation=generation, name="search_help_center", result=json.dumps(result))
    if rating:
        Feedback.objects.create(turn=turn, rating=rating, comment=comment)
    return turn


def test_the_review_queue_lists_ratings_with_the_articles_used(support):
    down = rated_turn("down", "It did not say where the button is.")
    rated_turn("up")

    response = support.get(reverse("admin:chat_feedback_changelist") + "?rating=down")

    page = response.content.decode()
    assert response.status_code == 200
    assert [f.turn_id for f in response.context["cl"].result_list] == [down.pk]
    assert "It did not say where the button is." in page
    assert '<a href="/help/export/">Exporting</a>' in page
    # The transcript, at the turn: not "Turn 15".
    assert reverse("admin:chat_conversation_change", args=[down.conversation_id]) + f"#turn-{down.pk}" in page


def test_the_queue_takes_the_same_queries_for_few_and_many(support, django_assert_max_num_queries):
    for _ in range(3):
        rated_turn("down")
    support.get(reverse("admin:chat_feedback_changelist"))
    for _ in range(20):
        rated_turn("down")
    with django_assert_max_num_queries(12):
        support.get(reverse("admin:chat_feedback_changelist"))


def test_the_transcript_shows_the_rating_and_comment(support):
    turn = rated_turn("down", "Wrong <b>board</b>")

    page = support.get(reverse("admin:chat_conversation_change", args=[turn.conversation_id])).content.decode()

    assert re.search(r'kk-rating--down"><svg class="kk-thumb"[^>]*>.*?</svg> Thumbs down</span>', page)
    assert "<q>Wrong &lt;b&gt;board&lt;/b&gt;</q>" in page


@pytest.mark.parametrize(("query", "expected"), [("down", ["down"]), ("up", ["up"]), ("none", [None])])
def test_turns_and_conversations_filter_by_rating(support, query, expected):
    turns = {rating: rated_turn(rating) for rating in ("down", "up", None)}

    listed_turns = support.get(reverse("admin:chat_turn_changelist") + f"?rating={query}").context["cl"].result_list
    listed_conversations = (
        support.get(reverse("admin:chat_conversation_changelist") + f"?rating={query}").context["cl"].result_list
    )

    assert [t.pk for t in listed_turns] == [turns[r].pk for r in expected]
    assert [c.pk for c in listed_conversations] == [turns[r].conversation_id for r in expected]


def test_nobody_edits_a_visitors_rating(support, admin_client):
    feedback = rated_turn("down", "meh").feedback
    for client in (support, admin_client):
        url = reverse("admin:chat_feedback_change", args=[feedback.pk])
        assert client.post(url, {"rating": "up", "comment": ""}).status_code == 403
        assert client.get(reverse("admin:chat_feedback_delete", args=[feedback.pk])).status_code == 403
    assert Feedback.objects.values_list("rating", "comment").get() == ("down", "meh")


def test_finance_sees_no_ratings(finance):
    rated_turn("down", "private words")

    assert finance.get(reverse("admin:chat_feedback_changelist")).status_code == 403


def test_support_assigns_and_reviews_ratings_from_the_queue(support):
    conversation = Conversation.objects.create(visitor_hash="v")
    turns = [
        Turn.objects.create(conversation=conversation, user_text=f"q{n}", status="completed", model="m")
        for n in range(2)
    ]
    first, second = (Feedback.objects.create(turn=turn, rating="down") for turn in turns)
    queue = reverse("admin:chat_feedback_changelist")

    support.post(queue, {"action": "assign_to_me", "_selected_action": [first.pk]})
    support.post(queue, {"action": "mark_reviewed", "_selected_action": [second.pk]})

    first.refresh_from_db()
    second.refresh_from_db()
    assert first.assignee is not None and first.reviewed_at is None
    assert second.reviewed_at is not None and second.reviewed_by == first.assignee
    # The queue shows what is left to review, unless asked for more.
    assert [f.pk for f in support.get(queue).context["cl"].result_list] == [first.pk]
    assert [f.pk for f in support.get(queue + "?review=done").context["cl"].result_list] == [second.pk]
    assert [f.pk for f in support.get(queue + "?review=mine").context["cl"].result_list] == [first.pk]
    # The rating itself stays the visitor's: its page is view-only.
    page = support.get(reverse("admin:chat_feedback_change", args=[first.pk]))
    assert page.status_code == 200 and b'name="_save"' not in page.content


def test_a_new_rating_is_to_be_reviewed_again():
    from chat.support.feedback import save_feedback

    conversation = Conversation.objects.create(visitor_hash="v")
    turn = Turn.objects.create(conversation=conversation, user_text="q", status="completed", model="m")
    rating = Feedback.objects.create(turn=turn, rating="down", reviewed_at=timezone.now())

    save_feedback("v", turn.pk, "up", "")

    rating.refresh_from_db()
    assert (rating.rating, rating.reviewed_at) == ("up", None)
