"""Handoff to a person in Chromium: the "Talk to a person" dialog, the
offline model's offer when the help center has no answer, the email given
afterwards, the widget; each request stored, and Support emailed."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App, chat
from tests.e2e.test_widget import customer_sites, open_widget, widget_server  # noqa: F401 (fixtures)
from tests.servers import ROOT, daphne


@pytest.fixture(scope="module")
def mailbox(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mail")


@pytest.fixture(scope="module")
def app(tmp_path_factory, mailbox) -> Iterator[App]:
    # django-environ reads "filemail:///tmp/x" as the relative path tmp/x: an
    # absolute path takes a fourth slash.
    env = {**OFFLINE, "EMAIL_URL": f"filemail:///{mailbox}", "KOOKEE_HANDOFF_EMAILS": "support@example.com"}
    # Every test here asks from 127.0.0.1: more requests than a network's hourly share.
    env["KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK"] = "50"
    with daphne(tmp_path_factory.mktemp("handoff"), **env) as (address, database, process):
        yield App(f"http://{address}", database, process)


# Support answers in the chat; an email address also gets the reply if the visitor is gone by then.
EMAIL_LABEL = "Your email, so that the reply reaches you if you are not here (optional)"
IN_THE_CHAT = "Someone from our support team will reply here, in this chat."
WITH_EMAIL = "Someone from our support team will reply here, in this chat, and by email if you are not here to read it."


def handoffs(app: App) -> list[tuple]:
    return app.rows(
        "select h.source, h.reason, h.email, h.status, c.source_url from chat_handoff h"
        " join chat_conversation c on c.id = h.conversation_id order by h.id"
    )


def emails(mailbox: Path) -> list[str]:
    return [path.read_text() for path in sorted(mailbox.glob("*.log"))]


def test_a_visitor_asks_for_a_person_and_support_is_emailed(app, mailbox, page):
    before = len(handoffs(app))
    page.goto(app.url)
    chat(page, "How do I cancel my plan?")
    page.get_by_role("button", name="Talk to a person").click()
    dialog = page.get_by_role("dialog", name="Talk to a person")
    dialog.get_by_label("What do you need help with? (optional)").fill("I was charged twice.")
    dialog.get_by_label(EMAIL_LABEL).fill("ana@example.com")
    dialog.get_by_role("button", name="Ask for a person").click()

    expect(dialog).to_be_hidden()
    notice = page.locator("#handoff-notice")
    expect(notice.locator("#handoff-text")).to_have_text(f"Your request for a person was received. {WITH_EMAIL}")
    assert handoffs(app)[before:] == [("visitor", "I was charged twice.", "ana@example.com", "open", "")]
    # The email goes out in the background: wait for it, with a bound.
    _wait_for(lambda: any("I was charged twice." in mail for mail in emails(mailbox)))
    [mail] = [mail for mail in emails(mailbox) if "I was charged twice." in mail]
    assert "To: support@example.com" in mail and "ana@example.com" in mail

    # A reload still shows the request, until Support closes it.
    page.reload()
    expect(page.locator("#handoff-notice")).to_contain_text("Your request for a person was received")


def test_a_bad_email_is_refused_in_the_dialog_and_nothing_is_stored(app, page):
    before = len(handoffs(app))
    page.goto(app.url)
    expect(page.get_by_role("button", name="Talk to a person")).to_be_enabled()
    page.get_by_role("button", name="Talk to a person").click()
    dialog = page.get_by_role("dialog", name="Talk to a person")
    dialog.get_by_label(EMAIL_LABEL).fill("not-an-email@")
    # The browser's own check stops it first; the server's refuses it too if it gets through.
    page.evaluate("document.getElementById('ask-person-form').noValidate = true")
    dialog.get_by_role("button", name="Ask for a person").click()
    expect(dialog.locator("#ask-person-error")).to_have_text("That email address is not valid.")
    expect(dialog).to_be_visible()
    assert len(handoffs(app)) == before


def test_the_assistant_offers_a_person_when_the_help_center_has_no_answer(app, page):
    before = len(handoffs(app))
    page.goto(app.url)
    chat(page, "Can I pay with bitcoin?")
    answer = page.locator(".message--assistant").last
    expect(answer).to_contain_text("The help center doesn't cover that")
    expect(answer).to_contain_text("Talk to a person")
    expect(answer.locator(".message__sources")).to_have_count(0)  # no article quoted

    chat(page, "yes please")
    expect(page.locator(".message--assistant").last).to_contain_text("our support team has your request")
    notice = page.locator("#handoff-notice")
    expect(notice).to_contain_text("Your request for a person was received")
    notice.get_by_label(EMAIL_LABEL).fill("bia@example.com")
    notice.get_by_role("button", name="Add").click()
    expect(notice).to_contain_text(WITH_EMAIL)
    expect(notice.locator("#handoff-email")).to_be_hidden()
    assert handoffs(app)[before:] == [("assistant", "Can I pay with bitcoin?", "bia@example.com", "open", "")]


def test_an_agents_name_cannot_reorder_the_text_around_it(app, page):
    # A name stored before names lost their format characters (or a
    # right-to-left one): isolated, so an override reverses nothing beside it.
    hostile = "Kim\u202e\u200bnimda"
    page.goto(app.url)
    page.get_by_role("button", name="Talk to a person").click()
    page.get_by_role("dialog", name="Talk to a person").get_by_role("button", name="Ask for a person").click()
    expect(page.locator("#handoff-notice")).to_contain_text("Your request for a person was received")
    [(handoff, conversation)] = app.rows("select id, conversation_id from chat_handoff order by id desc limit 1")
    with sqlite3.connect(app.database) as db:
        db.execute("update chat_handoff set status = 'claimed', agent_name = ? where id = ?", [hostile, handoff])
        db.execute(
            "insert into chat_message (conversation_id, handoff_id, kind, text, author, external_id, created_at,"
            " webhook_status) values (?, ?, 'agent', 'Refunded.', ?, '', datetime('now'), '')",
            [conversation, handoff, hostile],
        )

    page.reload()

    author = page.locator(".message--agent .message__author")
    expect(author.locator("bdi")).to_have_text(hostile)
    expect(author.locator("time")).to_be_visible()
    assert author.evaluate("h => [...h.childNodes].map(n => n.nodeName)") == ["BDI", "#text", "TIME"]
    expect(page.locator("#handoff-text bdi")).to_have_text(hostile)
    expect(page.locator("#handoff-text")).to_contain_text("from our support team is answering your messages.")
    assert "\u202e" not in page.locator("#text").get_attribute("placeholder")


def test_the_widget_hands_off_and_support_sees_the_page(tmp_path_factory, customer_sites, page):  # noqa: F811
    site = customer_sites[0]
    with widget_server(tmp_path_factory.mktemp("widget-handoff"), site) as kookee:
        page.goto(f"{site}/pricing?plan=growth#faq")
        open_widget(page)
        frame = page.frame_locator("iframe[title='Kookee help chat']")
        frame.get_by_role("button", name="Talk to a person").click()
        frame.get_by_role("button", name="Ask for a person").click()
        expect(frame.locator("#handoff-notice")).to_contain_text("Your request for a person was received")
        # The page it came from, without its query or fragment.
        assert handoffs(kookee) == [("visitor", "", "", "open", f"{site}/pricing")]


def test_the_visitor_is_told_the_reply_comes_here_and_by_email_only_if_they_are_gone(app, page):
    page.goto(app.url)
    chat(page, "How do I cancel my plan?")
    page.get_by_role("button", name="Talk to a person").click()
    dialog = page.get_by_role("dialog", name="Talk to a person")
    expect(dialog).to_contain_text(
        "Someone from our support team will read this conversation and reply here, in this chat."
    )
    dialog.get_by_role("button", name="Ask for a person").click()
    expect(dialog).to_be_hidden()

    # No address: the reply comes here.
    said = page.locator("#handoff-text")
    expect(said).to_have_text(f"Your request for a person was received. {IN_THE_CHAT}")
    # An address: here, and by email too if they are not here to read it.
    notice = page.locator("#handoff-notice")
    notice.get_by_label(EMAIL_LABEL).fill("caio@example.com")
    notice.get_by_role("button", name="Add").click()
    expect(said).to_have_text(f"Your request for a person was received. {WITH_EMAIL}")
    for text in (said.text_content(), page.locator("#ask-person").text_content()):
        assert "reply by email" not in text

    # Claimed by someone whose name the page does not have (yet): still here, in this chat.
    [(handoff,)] = app.rows("select id from chat_handoff where email = 'caio@example.com'")
    with sqlite3.connect(app.database) as db:
        db.execute("update chat_handoff set status = 'claimed', claimed_at = datetime('now') where id = ?", [handoff])
    page.reload()
    expect(said).to_have_text("A person from our support team has your request and will reply here, in this chat.")


SUPPORT_PASSWORD = "a-support-password"


@pytest.fixture(scope="module")
def sam(app) -> str:
    """Sam, a member of Support, in the served app's database: his username."""
    code = (
        "from django.contrib.auth.models import Group, User; "
        f"u = User.objects.create_user('sam', 'sam@example.com', '{SUPPORT_PASSWORD}', is_staff=True, "
        "first_name='Sam'); u.groups.add(Group.objects.get(name='Support'))"
    )
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{app.database}"}
    subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=environment, check=True)
    return "sam"


def _log(page) -> list[str]:
    """The log's lines, in order: each turn's question and answer, Support's messages, the events."""
    return page.locator("#log").evaluate(
        "log => [...log.querySelectorAll('.message, .chat__event')].map(e =>"
        " e.classList.contains('chat__event') ? 'event: ' + e.textContent"
        " : e.classList.contains('message--agent') ? 'agent: ' + e.querySelector('.message__text').textContent"
        " : e.classList.contains('message--user') ? 'user: ' + e.querySelector('.message__text').textContent"
        " : 'assistant')"
    )


def test_who_joined_the_conversation_is_still_said_after_a_reload(app, sam, browser, page):
    page.goto(app.url)
    chat(page, "Why was I charged twice?")
    page.get_by_role("button", name="Talk to a person").click()
    page.get_by_role("dialog", name="Talk to a person").get_by_role("button", name="Ask for a person").click()
    expect(page.locator("#handoff-notice")).to_be_visible()
    [(handoff,)] = app.rows("select max(id) from chat_handoff")

    # Sam claims it in the admin (a browser of his own): the visitor's page says so at once.
    support = browser.new_context(viewport={"width": 1366, "height": 768})
    try:
        admin = support.new_page()
        admin.goto(f"{app.url}/admin/login/")
        admin.get_by_label("Username").fill(sam)
        admin.get_by_label("Password").fill(SUPPORT_PASSWORD)
        admin.get_by_role("button", name="Log in").click()
        admin.goto(f"{app.url}/admin/chat/handoff/{handoff}/change/")
        admin.get_by_role("button", name="Claim", exact=True).click()
        joined = "Sam from our support team joined the conversation."
        expect(page.locator(".chat__event")).to_have_text([joined])
        admin.get_by_label("Reply to the visitor").fill("Hi, Sam here. Refunded.")
        admin.get_by_role("button", name="Send to the visitor").click()
    finally:
        support.close()
    expect(page.locator(".message--agent .message__text")).to_have_text(["Hi, Sam here. Refunded."])
    live = _log(page)
    assert live == ["user: Why was I charged twice?", "assistant", f"event: {joined}", "agent: Hi, Sam here. Refunded."]

    # After a reload: the same line, in the same place.
    page.reload()
    expect(page.locator(".message--agent")).to_have_count(1)
    expect(page.locator(".chat__event")).to_have_text([joined])
    assert _log(page) == live
    # And after the socket comes back (a history again): still once.
    page.context.set_offline(True)
    expect(page.locator("#connection")).not_to_have_text("")
    page.context.set_offline(False)
    expect(page.locator("#send")).to_be_enabled()
    page.wait_for_timeout(300)
    assert _log(page) == live


def _wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
