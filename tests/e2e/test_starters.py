"""The team's greeting and starter questions in Chromium, on the chat page
and in the widget on a customer's page, in English and in Brazilian
Portuguese: shown before the visitor writes, a starter sent as their
message (mouse or keyboard), gone with the first turn and back for a new
conversation; the greeting never sent; axe finds nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.e2e.conftest import TIMEOUT_MS, App
from tests.e2e.test_widget import customer_sites, widget_server  # noqa: F401 (a fixture)
from tests.provider import answer
from tests.servers import ROOT

pytestmark = pytest.mark.slow

FACE = {
    "name_en": "Ana",
    "greeting_en": "Hi, I'm Ana!\nAsk me anything about Kookee.",
    "starters_en": ["How do I install the widget?", "Can I change my plan?", "Where is the roadmap?"],
    "name_pt_br": "Ana Clara",
    "greeting_pt_br": "Olá, sou a Ana Clara!\nPergunte o que quiser sobre a Kookee.",
    "starters_pt_br": ["Como instalo o widget?", "Posso mudar de plano?"],
}
LANGUAGES = {
    # locale: (the columns' suffix, the bubble's name, the frame's title)
    "en-US": ("en", "Help", "Kookee help chat"),
    "pt-BR": ("pt_br", "Ajuda", "Chat de ajuda da Kookee"),
}


def publish(database: Path, values: dict) -> None:
    """A version published in the served app's database, as Support would (`manage.py shell`)."""
    code = (
        "import json, os; from chat.assistant import versions; "
        "versions.publish(versions.save_draft(json.loads(os.environ['KOOKEE_FACE']), 'e2e'), 'e2e')"
    )
    environment = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "OPENAI_API_KEY": "",
        "KOOKEE_FACE": json.dumps(values),
    }
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=environment, check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory, customer_sites, provider_thread) -> Iterator[App]:  # noqa: F811
    """The app with the scripted model, which the first customer site may embed, and the team's version live."""
    env = {"OPENAI_BASE_URL": provider_thread.url, "OPENAI_API_KEY": "test-key", "KOOKEE_PROVIDER_RETRIES": "0"}
    with widget_server(tmp_path_factory.mktemp("starters"), customer_sites[0], **env) as served:
        publish(served.database, FACE)
        yield served


@pytest.fixture(params=list(LANGUAGES))
def visitor(request, browser):
    """A page in a browser that speaks the language."""
    context = browser.new_context(locale=request.param, viewport={"width": 1024, "height": 760})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page, request.param
    context.close()
    assert errors == []


def the_face(locale: str) -> tuple[str, str, list[str]]:
    suffix = LANGUAGES[locale][0]
    return FACE[f"name_{suffix}"], FACE[f"greeting_{suffix}"], FACE[f"starters_{suffix}"]


def open_widget(page, locale: str):
    _, bubble, title = LANGUAGES[locale]
    page.get_by_role("button", name=bubble, exact=True).click()
    return page.frame_locator(f"iframe[title='{title}']")


def embedded_frame(page):
    """The widget's frame, for axe (which runs in one frame at a time)."""
    [frame] = [frame for frame in page.frames if "/embed/" in frame.url]
    return frame


def user_messages_sent(provider, since: int) -> list[list[str]]:
    """The roles of each model request made since `since`, and the last user message of each."""
    return [
        ([m["role"] for m in request.body["messages"]], request.body["messages"][-1]["content"])
        for request in provider.requests[since:]
    ]


def check_starters(root, provider, locale: str, audit) -> None:
    """The whole story, on the chat page or in the widget's frame (`root`);
    `audit` runs axe on the document the chat is in."""
    name, greeting, starters = the_face(locale)
    welcome = root.locator("#empty")
    buttons = root.locator("#starters").get_by_role("button")

    # Before the visitor writes: the name, the greeting as the assistant's bubble, the starters.
    expect(root.get_by_role("heading", level=1)).to_have_text(name)
    expect(root.locator("#greeting .chat__greeting-text")).to_have_text(greeting)  # its line break kept
    expect(root.locator("#greeting h2")).to_have_text(f"{name} said:" if locale == "en-US" else re.compile(name))
    expect(buttons).to_have_text(starters)
    expect(root.locator("#starters")).to_have_attribute("aria-label", re.compile(r"\S"))
    if locale == "en-US":
        expect(root.get_by_role("list", name="Suggested questions").get_by_role("button")).to_have_text(starters)
    expect(buttons.first).to_be_enabled()  # once connected
    expect(root.locator(".message")).to_have_count(0)  # not a turn
    expect(root.locator("#restart")).to_be_disabled()  # nothing to start over from
    assert root.locator("#greeting").bounding_box()["y"] < buttons.first.bounding_box()["y"]
    results = audit()
    assert results.violations_count == 0, results.generate_report()

    # A click sends the starter as the visitor's message; the answer streams; the welcome goes.
    provider.queue(answer("You paste one script tag before </body>."))
    before = len(provider.requests)
    buttons.nth(1).click()
    expect(root.locator(".message--user .message__text")).to_have_text([starters[1]])
    answered = root.locator(".message--assistant").last
    expect(answered).to_have_attribute("data-status", "completed")
    expect(answered.locator(".message__text")).to_have_text("You paste one script tag before </body>.")
    # Exactly the message a typed question makes, and the greeting is no turn of it.
    assert user_messages_sent(provider, before) == [(["system", "user"], starters[1])]
    expect(welcome).to_have_count(0)
    expect(root.locator(".chat__starter")).to_have_count(0)

    # A new conversation: the greeting and the starters again.
    root.locator("#restart").click()
    root.locator("#confirm-restart button[value=restart]").click()
    expect(root.locator(".message")).to_have_count(0)
    expect(root.locator("#greeting .chat__greeting-text")).to_have_text(greeting)
    expect(buttons).to_have_text(starters)
    expect(buttons.first).to_be_enabled()

    # The keyboard: from the conversation, Tab reaches the first starter; Enter sends it.
    provider.queue(answer("Settings, then Widget."))
    before = len(provider.requests)
    root.locator("#log").focus()
    root.locator("#log").press("Tab")
    expect(buttons.first).to_be_focused()
    buttons.first.press("Enter")
    expect(root.locator(".message--user .message__text")).to_have_text([starters[0]])
    expect(root.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
    assert user_messages_sent(provider, before) == [(["system", "user"], starters[0])]
    expect(root.locator("#text")).to_be_focused()  # on to the question box
    expect(welcome).to_have_count(0)


def test_starters_on_the_chat_page(app, provider, visitor):
    page, locale = visitor
    page.goto(app.url)
    check_starters(page, provider, locale, lambda: Axe().run(page))

    # A reload comes with the conversation: no welcome above it, until a new conversation.
    page.reload()
    expect(page.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
    expect(page.locator("#greeting")).to_be_hidden()
    page.locator("#restart").click()
    page.locator("#confirm-restart button[value=restart]").click()
    expect(page.locator("#greeting")).to_be_visible()
    expect(page.locator(".chat__starter").first).to_be_visible()
    expect(page.locator(".chat__starter").first).to_be_enabled()


def test_starters_in_the_widget(app, customer_sites, provider, visitor):  # noqa: F811
    page, locale = visitor
    page.goto(customer_sites[0])
    chat = open_widget(page, locale)
    check_starters(chat, provider, locale, lambda: Axe().run(embedded_frame(page)))


def test_a_starter_waits_for_the_connection_and_sends_a_message_frame(app, visitor):
    """Disabled until the socket is ready (its first history), and while
    the question it sent waits for its turn; the frame is a typed question's."""
    page, locale = visitor
    sockets, frames = [], []

    def server(socket) -> None:  # the chat's socket, answered by the test instead of the app
        socket.on_message(lambda message: frames.append(json.loads(message)))
        sockets.append(socket)

    page.route_web_socket(re.compile(r".*/ws/chat/.*"), server)
    page.goto(app.url)
    _, _, starters = the_face(locale)
    buttons = page.locator("#starters").get_by_role("button")
    expect(buttons).to_have_text(starters)
    expect(page.locator("#send")).to_be_disabled()
    page.wait_for_timeout(300)
    assert sockets and all(buttons.nth(i).is_disabled() for i in range(len(starters)))  # open, not ready

    sockets[-1].send(json.dumps({"type": "history", "turns": [], "more": False}))
    expect(buttons.first).to_be_enabled()
    buttons.last.click()
    expect(buttons.first).to_be_disabled()  # asked: waiting for its turn
    assert frames[-1] == {"type": "message", "text": starters[-1]}
    assert [frame["type"] for frame in frames].count("message") == 1

    sockets[-1].send(json.dumps({"type": "turn.started", "turn_id": 1}))
    expect(page.locator(".message--user .message__text")).to_have_text([starters[-1]])
    expect(page.locator("#starters")).to_have_count(0)
