"""What a visitor meets before they write: the live version's name (the
chat's heading), greeting (the first bubble, not a turn) and starter
questions, rendered into the chat page and the widget's frame in the
browser's language, as text."""

import pytest
from bs4 import BeautifulSoup
from django.test import Client

from chat.assistant import versions
from chat.models import Conversation, Turn
from chat.visitors.identity import hash_key

pytestmark = pytest.mark.django_db

PAGES = ["/", "/embed/"]
EMPTY_HINT = "Ask anything about Kookee: feedback boards, the roadmap, the widget, billing."
STARTERS_EN = ["How do I install the widget?", "Can I change my plan?", "Where is the roadmap?"]
STARTERS_PT = ["Como instalo o widget?", "Posso mudar de plano?"]


def publish(**values) -> None:
    versions.publish(versions.save_draft(values, "test"), "test")


def face_of(client, path: str, language: str = "en") -> dict:
    response = client.get(path, HTTP_ACCEPT_LANGUAGE=language)
    assert response.status_code == 200
    page = BeautifulSoup(response.content, "html.parser")
    welcome = page.find(id="empty")
    greeting = welcome.find(class_="chat__greeting")
    hint = welcome.find(class_="chat__empty")
    starters = welcome.find(id="starters")
    return {
        "html": response.content.decode(),
        "heading": page.find(id="chat-title").get_text(),
        "label": greeting.find("h2").get_text() if greeting else None,
        "greeting": greeting.find(class_="chat__greeting-text").get_text() if greeting else None,
        "hint": hint.get_text() if hint else None,
        "list": starters,
        "starters": [button.get_text() for button in starters.find_all("button")] if starters else [],
        "buttons": starters.select("li > button[type=button]") if starters else [],
    }


@pytest.mark.parametrize("path", PAGES)
def test_nothing_published_shows_the_products_heading_and_hint(client, path):
    face = face_of(client, path)
    assert face["heading"] == "Kookee help"
    assert face["hint"] == EMPTY_HINT
    assert face["greeting"] is None and face["list"] is None
    assert "chat__starter" not in face["html"]


@pytest.mark.parametrize("path", PAGES)
def test_the_name_greeting_and_starters_in_english(client, path):
    publish(name_en="Ana", greeting_en="Hi! I'm Ana.\nAsk me about Kookee.", starters_en=STARTERS_EN)
    face = face_of(client, path)
    assert face["heading"] == "Ana"
    assert face["label"] == "Ana said:"
    assert face["greeting"] == "Hi! I'm Ana.\nAsk me about Kookee."  # its line break kept (shown pre-wrap)
    assert face["hint"] is None  # the greeting replaces it
    assert face["list"]["aria-label"] == "Suggested questions"
    assert face["starters"] == STARTERS_EN
    # Real buttons, each in the list's items, disabled until the socket is ready (static/chat/chat.js).
    assert len(face["buttons"]) == len(STARTERS_EN)
    assert all(button.has_attr("disabled") for button in face["buttons"])


@pytest.mark.parametrize("path", PAGES)
def test_the_name_greeting_and_starters_in_portuguese(client, path):
    publish(
        name_en="Ana",
        greeting_en="Hi! I'm Ana.",
        starters_en=STARTERS_EN,
        name_pt_br="Ana Clara",
        greeting_pt_br="Olá! Sou a Ana Clara.",
        starters_pt_br=STARTERS_PT,
    )
    face = face_of(client, path, "pt-BR,pt;q=0.9")
    assert '<html lang="pt-br">' in face["html"]
    assert face["heading"] == "Ana Clara"
    assert face["greeting"] == "Olá! Sou a Ana Clara."
    assert face["starters"] == STARTERS_PT
    # The same version, for an English browser: its English.
    english = face_of(client, path, "en-US,en;q=0.9")
    assert (english["heading"], english["greeting"], english["starters"]) == ("Ana", "Hi! I'm Ana.", STARTERS_EN)


@pytest.mark.parametrize("path", PAGES)
def test_portuguese_falls_back_to_english_for_blank_fields(client, path):
    publish(name_en="Ana", greeting_en="Hi! I'm Ana.", starters_en=STARTERS_EN, greeting_pt_br="Olá!")
    face = face_of(client, path, "pt-BR")
    assert face["heading"] == "Ana"
    assert face["greeting"] == "Olá!"
    assert face["starters"] == STARTERS_EN


@pytest.mark.parametrize("path", PAGES)
def test_a_blank_name_keeps_the_products_heading(client, path):
    publish(greeting_en="Welcome.")
    face = face_of(client, path)
    assert face["heading"] == "Kookee help"
    assert face["label"] == "Kookee said:"
    assert face["greeting"] == "Welcome."
    assert face["list"] is None
    # In Portuguese, the product's own words, translated.
    portuguese = face_of(client, path, "pt-BR")
    assert portuguese["heading"] == "Ajuda da Kookee"
    assert portuguese["greeting"] == "Welcome."


@pytest.mark.parametrize("path", PAGES)
def test_starters_without_a_greeting_go_under_the_hint(client, path):
    publish(starters_en=["What does it cost?"])
    face = face_of(client, path)
    assert face["hint"] == EMPTY_HINT
    assert face["greeting"] is None
    assert face["starters"] == ["What does it cost?"]


@pytest.mark.parametrize("path", PAGES)
def test_markup_is_shown_as_text(client, path):
    publish(
        name_en="<b>Ana</b>",
        greeting_en='<script>alert(1)</script> <img src=x onerror="alert(2)"> [a link](javascript:alert(3))',
        starters_en=['<script>alert("starter")</script>', "</button><b>bold</b>"],
    )
    face = face_of(client, path)
    html = face["html"]
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert face["heading"] == "<b>Ana</b>"
    assert face["label"] == "<b>Ana</b> said:"
    assert face["greeting"] == '<script>alert(1)</script> <img src=x onerror="alert(2)"> [a link](javascript:alert(3))'
    assert face["starters"] == ['<script>alert("starter")</script>', "</button><b>bold</b>"]


@pytest.mark.parametrize("path", PAGES)
def test_the_page_keeps_its_policy_with_no_inline_script_or_style(client, path):
    publish(name_en="Ana", greeting_en="Hi!", starters_en=STARTERS_EN)
    response = client.get(path)
    assert "script-src 'self';" in response["Content-Security-Policy"]
    assert "style-src 'self';" in response["Content-Security-Policy"]
    page = BeautifulSoup(response.content, "html.parser")
    assert page.select("[style]") == []
    assert page.find("style") is None
    assert all(script.get("src") or script.get("type") == "application/json" for script in page.find_all("script"))


def test_only_the_published_version_is_shown(client):
    publish(name_en="Ana", greeting_en="Live words.")
    versions.save_draft({"name_en": "Bia", "greeting_en": "Draft words."}, "test")  # not published
    face = face_of(client, "/")
    assert (face["heading"], face["greeting"]) == ("Ana", "Live words.")


def test_above_a_history_the_welcome_is_hidden_until_a_new_conversation(client):
    publish(greeting_en="Hi!", starters_en=STARTERS_EN)
    client.get("/")
    conversation = Conversation.objects.create(visitor_hash=hash_key(client.cookies["sessionid"].value))
    Turn.objects.create(conversation=conversation, user_text="mine", model="gpt-4o-mini", status="completed")
    page = BeautifulSoup(client.get("/").content, "html.parser")
    # Still in the page, for "New conversation" (static/chat/chat.js shows it again), but not shown meanwhile.
    assert page.find(id="empty").has_attr("hidden")
    assert page.find(class_="chat__greeting-text").get_text() == "Hi!"
    assert not BeautifulSoup(Client().get("/").content, "html.parser").find(id="empty").has_attr("hidden")
