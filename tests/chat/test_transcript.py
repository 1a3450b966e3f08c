"""Transcripts a support agent reads at a glance: answers rendered as the
visitor saw them, readable tool calls, turns numbered per conversation."""

import json
import re

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
    # Each with its thumb, drawn (chat/templatetags/icons.py): no emoji font needed.
    assert re.search(r'kk-rating--down"><svg class="kk-thumb"[^>]*>.*?</svg> 1 down</span>', page)
    assert re.search(r'kk-rating--up"><svg class="kk-thumb"[^>]*>.*?</svg> 1 up</span>', page)
    started = conversation.created_at.strftime("%Y-%m-%d %H:%M:%S")
    assert started in page


def test_the_admin_says_kookee_chat_and_filters_in_plain_words(admin_client):
    index = admin_client.get(reverse("admin:index")).content.decode()
    turns = admin_client.get(reverse("admin:chat_turn_changelist")).content.decode()

    assert "Kookee chat" in index
    assert "Django administration" not in index
    assert "the model was called more often than its searches needed" in turns


CUT_SHORT = "Merge them from the post's page: see **[Moderating posts: merging"


def test_an_answer_cut_short_reads_as_the_visitor_saw_it(admin_client):
    """A Stop mid-link: the chat showed bold text, not "**[" (chat/text.py, mended)."""
    conversation, [turn] = conversation_with(("How do I merge posts?", CUT_SHORT))
    Turn.objects.filter(pk=turn.pk).update(status="interrupted", interrupted=True, stop_reason="stopped")

    for page in (
        transcript(admin_client, conversation),
        admin_client.get(reverse("admin:chat_turn_change", args=[turn.pk])).content.decode(),
    ):
        assert "<strong>Moderating posts: merging</strong>" in page
        assert "**[Moderating" not in page


def test_the_turn_page_renders_the_answer_as_markdown(admin_client):
    _, [turn] = conversation_with(("q", "**Open** [Boards](/help/boards/).\n\n- one"))

    page = admin_client.get(reverse("admin:chat_turn_change", args=[turn.pk])).content.decode()

    assert '<strong>Open</strong> <a href="/help/boards/">Boards</a>' in page
    assert "<li>one</li>" in page
    assert "**Open**" not in page


def test_a_completed_answer_is_shown_as_written():
    from chat.templatetags.transcript import answer_markdown

    assert "<strong>" not in answer_markdown("2 **3", "completed")
    assert "<strong>3</strong>" in answer_markdown("2 **3", "interrupted")


def test_bold_in_an_answer_is_not_styled_as_the_speakers_label():
    """The labels ("Visitor", "Assistant") are the direct children; bold text
    in an answer (a link on a line of its own, in bold) stays text."""
    from pathlib import Path

    css = (Path(__file__).resolve().parents[2] / "static" / "chat" / "admin.css").read_text()
    assert ".kk-says > strong {" in css
    assert ".kk-says strong {" not in css
