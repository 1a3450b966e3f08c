"""Transcripts a support agent reads at a glance: answers rendered as the
visitor saw them, readable tool calls, turns numbered per conversation."""

import json

import pytest
from django.urls import reverse

from chat.models import Conversation, Feedback, Generation, ToolCall, Turn

pytestmark = pytest.mark.django_db


def conversation_with(*turns):
    conversation = Conversation.objects.create(visitor_hash="v")
    made = []
    for question, answer in turns:
        made.append(
            Turn.objects.create(
                conversation=conversation, status="completed", user_text=question, assistant_text=answer, model="m"
            )
        )
    return conversation, made


def transcript(admin_client, conversation) -> str:
    return admin_client.get(reverse("admin:chat_conversation_change", args=[conversation.pk])).content.decode()


def test_an_answer_is_rendered_as_markdown_safely(admin_client):
    answer = (
        "**Open** [Boards](/help/boards/).\n\n- one\n- two\n\n<script>alert(1)</script> "
        "[bad](javascript:alert(1)) ![pixel](http://tracker.example/p.png)\n\n```\ncode\n```"
    )
    conversation, _ = conversation_with(("**my** question", answer))

    page = transcript(admin_client, conversation)

    assert "<strong>Open</strong>" in page
    assert '<a href="/help/boards/">Boards</a>' in page
    assert "<li>one</li>" in page
    assert "<pre><code>code\n</code></pre>" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert 'href="javascript:' not in page
    assert "<img" not in page.split('class="kk-transcript"')[1]
    # What the visitor typed is shown as typed.
    assert "**my** question" in page


def test_tool_calls_read_as_json_without_escapes(admin_client):
    conversation, [turn] = conversation_with(("q", "a"))
    generation = Generation.objects.create(turn=turn, round=1, started_at=turn.started_at, ended_at=turn.started_at)
    ToolCall.objects.create(
        generation=generation,
        name="search_help_center",
        arguments=json.dumps({"query": "import → export"}),
        result=json.dumps({"articles": [{"title": "Exportação de dados"}]}),
    )

    page = transcript(admin_client, conversation)

    assert "\\u2192" not in page and "\\u00e7" not in page
    assert "import → export" in page
    assert "Exportação de dados" in page


def test_turns_are_numbered_within_their_conversation(admin_client):
    conversation_with(("elsewhere", "x"), ("elsewhere too", "y"))
    conversation, turns = conversation_with(("first", "a"), ("second", "b"))

    page = transcript(admin_client, conversation)

    assert turns[0].pk > 2  # another conversation's turns came first
    assert ">Turn 1</a>" in page and ">Turn 2</a>" in page
    assert f">Turn {turns[0].pk}</a>" not in page and f">Turn {turns[1].pk}</a>" not in page


def test_the_conversation_list_shows_the_first_question_ratings_and_seconds(admin_client):
    conversation, turns = conversation_with(("How do I export my data?", "a"), ("And import?", "b"))
    Feedback.objects.create(turn=turns[0], rating="down")
    Feedback.objects.create(turn=turns[1], rating="up")

    page = admin_client.get(reverse("admin:chat_conversation_changelist")).content.decode()

    assert "How do I export my data?" in page
    assert 'kk-rating--down">1 down</span>' in page
    assert 'kk-rating--up">1 up</span>' in page
    started = conversation.created_at.strftime("%Y-%m-%d %H:%M:%S")
    assert started in page


def test_the_admin_says_kookee_chat_and_filters_in_plain_words(admin_client):
    index = admin_client.get(reverse("admin:index")).content.decode()
    turns = admin_client.get(reverse("admin:chat_turn_changelist")).content.decode()

    assert "Kookee chat" in index
    assert "Django administration" not in index
    assert "the model was called more often than its searches needed" in turns
