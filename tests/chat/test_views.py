"""The chat page and the help-center pages, through the real middleware stack."""

import json
import re
import time

import pytest
from django.contrib.sessions.models import Session
from django.test import Client

from chat.models import Conversation, Turn
from chat.visitors import access, sessions
from chat.visitors.identity import hash_key
from chat.visitors.sessions import SessionStore
from helpcenter.models import Article

pytestmark = pytest.mark.django_db

IMG = "<img src=x onerror=alert(1)>"
BREAKOUT = "</script><script>alert(1)</script>"
HISTORY_SCRIPT = re.compile(r'<script id="history" type="application/json">(.*?)</script>', re.DOTALL)


def embedded_history(response):
    page = response.content.decode()
    found = HISTORY_SCRIPT.findall(page)
    assert len(found) == 1, "the page embeds the history exactly once"
    return json.loads(found[0])


# --- the session and its conversation --------------------------------------------------------


def test_the_chat_page_sets_the_session_cookie(client):
    response = client.get("/")

    assert response.status_code == 200
    assert "sessionid" in response.cookies
    assert response.cookies["sessionid"].value


def conversation_of(client) -> Conversation:
    """The conversation a first message from this browser would create."""
    return Conversation.objects.create(visitor_hash=hash_key(client.cookies["sessionid"].value))


def test_a_page_view_stores_no_conversation(client):
    client.get("/")
    Client().get("/")

    assert Conversation.objects.count() == 0


def test_a_second_visit_keeps_the_session_and_the_conversation(client):
    client.get("/")
    key = client.cookies["sessionid"].value
    conversation = conversation_of(client)
    Turn.objects.create(conversation=conversation, user_text="mine", model="gpt-4o-mini", status="completed")

    response = client.get("/")

    assert response.status_code == 200
    assert client.cookies["sessionid"].value == key
    assert [turn["user_text"] for turn in embedded_history(response)["turns"]] == ["mine"]
    assert Conversation.objects.get().pk == conversation.pk


def test_the_session_key_is_never_stored_only_its_keyed_hash(client):
    client.get("/")
    key = client.cookies["sessionid"].value
    conversation_of(client)

    stored = Conversation.objects.get().visitor_hash
    assert key not in stored
    assert stored == hash_key(key)
    assert len(stored) == 64


def test_a_cookie_for_a_vanished_session_gets_a_fresh_session(client):
    # An ordinary session (a staff login's, or one from before minted keys)
    # whose row is gone.
    stale = SessionStore()
    stale.create()
    client.cookies["sessionid"] = stale.session_key
    Session.objects.all().delete()

    response = client.get("/")

    assert response.status_code == 200
    assert client.cookies["sessionid"].value != stale.session_key
    assert sessions.minted_alive(client.cookies["sessionid"].value)


def test_page_views_write_no_session_row(client):
    for _ in range(20):
        Client().get("/")
    client.get("/")
    client.get("/")

    assert Session.objects.count() == 0
    key = client.cookies["sessionid"].value
    assert sessions.minted_alive(key)


@pytest.mark.parametrize(
    "cookie",
    [
        sessions.mint_key(now=time.time() - 15 * 24 * 3600),  # older than SESSION_COOKIE_AGE
        sessions.mint_key()[:-1] + "x",  # a forged tag
        "a" * 40,
        "short",
    ],
    ids=["expired", "forged", "made-up", "short"],
)
def test_a_minted_key_that_is_no_good_gets_a_fresh_one(client, cookie):
    client.cookies["sessionid"] = cookie

    client.get("/")

    fresh = client.cookies["sessionid"].value
    assert fresh != cookie
    assert sessions.minted_alive(fresh)


def test_a_visitor_who_started_over_gets_a_new_key_and_no_row(client):
    client.get("/")
    old = client.cookies["sessionid"].value
    access.forget_visitor(hash_key(old))

    client.get("/")

    assert client.cookies["sessionid"].value != old
    assert sessions.minted_alive(client.cookies["sessionid"].value)
    assert Session.objects.count() == 0


def test_a_key_minted_on_a_server_whose_clock_runs_a_little_ahead_is_good():
    assert sessions.minted_alive(sessions.mint_key(now=time.time() + 5))
    assert not sessions.minted_alive(sessions.mint_key(now=time.time() + 3600))


def test_a_minted_session_is_written_once_it_holds_something(client):
    client.get("/")
    key = client.cookies["sessionid"].value
    session = SessionStore(key)
    session["language"] = "pt-br"
    session.save()

    assert Session.objects.get().session_key == key
    assert SessionStore(key).load() == {"language": "pt-br"}


def test_the_production_cookie_is_host_only_and_secure(client, settings):
    # As DEBUG off sets them (tests/test_security.py checks the settings).
    settings.SESSION_COOKIE_NAME = "__Host-sessionid"
    settings.SESSION_COOKIE_SECURE = True

    response = client.get("/", secure=True)

    morsel = response.cookies["__Host-sessionid"]
    assert morsel["secure"] and morsel["path"] == "/" and not morsel["domain"]
    assert sessions.minted_alive(morsel.value)
    assert Session.objects.count() == 0


def test_a_revoked_session_gets_a_new_key_and_keeps_its_data(client):
    client.get("/")
    session = client.session
    session["kept"] = "yes"
    session.save()
    old = client.cookies["sessionid"].value
    Turn.objects.create(conversation=conversation_of(client), user_text="before", model="m", status="completed")
    access.forget_visitor(hash_key(old))

    response = client.get("/")

    new = client.cookies["sessionid"].value
    assert new != old
    assert client.session["kept"] == "yes"
    assert embedded_history(response) == {"turns": [], "messages": [], "more": False, "handoff": None}
    assert not Session.objects.filter(session_key=old).exists()


@pytest.mark.parametrize("path", ["/", "/embed/"])
def test_pages_with_a_visitor_secret_are_never_cached(client, path):
    response = client.get(path)

    directives = {d.strip() for d in response["Cache-Control"].split(",")}
    assert {"private", "no-store"} <= directives


# --- the history embedded in the page --------------------------------------------------------


def test_the_page_embeds_the_history_in_order(client):
    client.get("/")
    conversation = conversation_of(client)
    first = Turn.objects.create(
        conversation=conversation,
        user_text="How do I install the widget?",
        assistant_text="Paste the script tag.",
        status="completed",
        model="gpt-4o-mini",
    )
    second = Turn.objects.create(
        conversation=conversation,
        user_text=f"what about {IMG}?",
        assistant_text=f"Careful: {IMG} and {BREAKOUT} & more",
        status="interrupted",
        interrupted=True,
        stop_reason="stopped",
        model="gpt-4o-mini",
    )
    third = Turn.objects.create(conversation=conversation, user_text="still there?", model="gpt-4o-mini")
    # another visitor's turn stays out of this page
    Turn.objects.create(
        conversation=Conversation.objects.create(visitor_hash=hash_key("someone-else")),
        user_text="not mine",
        model="gpt-4o-mini",
    )

    response = client.get("/")

    assert response.status_code == 200
    turns = embedded_history(response)["turns"]
    # When each started: the page places Support's messages between them.
    assert [turn.pop("at") for turn in turns] == [t.started_at.isoformat() for t in (first, second, third)]
    assert turns == [
        {
            "turn_id": first.id,
            "user_text": "How do I install the widget?",
            "assistant_text": "Paste the script tag.",
            "status": "completed",
            "reason": None,
            "sources": [],
            "rating": None,
        },
        {
            "turn_id": second.id,
            "user_text": f"what about {IMG}?",
            "assistant_text": f"Careful: {IMG} and {BREAKOUT} & more",
            "status": "interrupted",
            "reason": "stopped",
            "sources": [],
            "rating": None,
        },
        {
            "turn_id": third.id,
            "user_text": "still there?",
            "assistant_text": "",
            "status": "streaming",
            "reason": None,
            "sources": [],
            "rating": None,
        },
    ]


def test_the_embedded_history_cannot_break_out_of_its_script(client):
    client.get("/")
    Turn.objects.create(
        conversation=conversation_of(client),
        user_text=BREAKOUT,
        assistant_text=f"{IMG} {BREAKOUT}",
        status="completed",
        model="gpt-4o-mini",
    )

    page = client.get("/").content.decode()

    assert "</script><script>" not in page
    assert "<script>alert(1)" not in page
    assert "<img src=x" not in page
    # only the page's own scripts close: the translations, the chat, its history
    assert page.count("</script>") == 3


def test_an_empty_conversation_embeds_an_empty_history(client):
    assert embedded_history(client.get("/")) == {"turns": [], "messages": [], "more": False, "handoff": None}


def test_the_page_embeds_only_the_latest_page_of_history(client, settings):
    settings.KOOKEE_HISTORY_PAGE_TURNS = 2
    client.get("/")
    conversation = conversation_of(client)
    for n in range(5):
        Turn.objects.create(conversation=conversation, user_text=f"q{n}", model="m", status="completed")

    history = embedded_history(client.get("/"))

    assert [turn["user_text"] for turn in history["turns"]] == ["q3", "q4"]
    assert history["more"] is True


# --- help articles ---------------------------------------------------------------------------


def test_a_published_article_is_shown_escaped(client):
    Article.objects.create(
        title="Installing the widget",
        slug="install-widget",
        body="Paste the <b>script</b> tag before </body>.",
    )

    response = client.get("/help/install-widget/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "<h1>Installing the widget</h1>" in page
    assert "&lt;b&gt;script&lt;/b&gt;" in page
    assert "<b>script</b>" not in page


def test_an_unpublished_article_is_not_found(client):
    Article.objects.create(title="Draft", slug="draft", body="Not yet.", published=False)

    assert client.get("/help/draft/").status_code == 404


def test_an_unknown_article_is_not_found(client):
    Article.objects.create(title="Installing the widget", slug="install-widget", body="Paste it.")

    assert client.get("/help/no-such-article/").status_code == 404


# --- /help/: the help center for visitors -------------------------------------------------------


def help_links(page: str) -> list[str]:
    return re.findall(r'<li><a href="(/help/[^"]+)">', page)


def test_the_help_index_lists_every_published_article_by_title(client):
    Article.objects.create(title="Refund policy", slug="refund-policy", body="Within 14 days.")
    Article.objects.create(title="Installing the widget", slug="install-widget", body="Paste it.")
    Article.objects.create(title="A draft", slug="a-draft", body="Not yet.", published=False)

    response = client.get("/help/")

    assert response.status_code == 200
    assert help_links(response.content.decode()) == ["/help/install-widget/", "/help/refund-policy/"]
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_the_help_index_searches_as_the_assistant_does(client):
    Article.objects.create(title="Refund policy", slug="refund-policy", body="Refunds within 14 days.")
    Article.objects.create(title="Installing the widget", slug="install-widget", body="Paste the tag.")

    found = client.get("/help/", {"q": "how do refunds work"}).content.decode()
    nothing = client.get("/help/", {"q": "bitcoin"}).content.decode()

    assert help_links(found) == ["/help/refund-policy/"]
    assert "Refunds within 14 days." in found  # the snippet
    assert help_links(nothing) == []
    assert "No article answers that yet." in nothing


def test_a_help_search_is_shown_escaped_and_cut(client):
    page = client.get("/help/", {"q": f"{IMG}{'x' * 300}"}).content.decode()

    assert IMG not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "x" * 201 not in page  # the query is cut at 200 characters


def test_an_article_links_back_to_the_help_index(client):
    Article.objects.create(title="Refund policy", slug="refund-policy", body="Within 14 days.")

    page = client.get("/help/refund-policy/").content.decode()

    assert 'href="/help/"' in page and 'href="/"' in page
