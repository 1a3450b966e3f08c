"""Handoff to a person in Chromium: the "Talk to a person" dialog, the
offline model's offer when the help center has no answer, the email given
afterwards, the widget; each request stored, and Support emailed."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App, chat
from tests.e2e.test_widget import customer_sites, open_widget, widget_server  # noqa: F401 (fixtures)
from tests.servers import daphne


@pytest.fixture(scope="module")
def mailbox(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mail")


@pytest.fixture(scope="module")
def app(tmp_path_factory, mailbox) -> Iterator[App]:
    # django-environ reads "filemail:///tmp/x" as the relative path tmp/x: an
    # absolute path takes a fourth slash.
    env = {**OFFLINE, "EMAIL_URL": f"filemail:///{mailbox}", "KOOKEE_HANDOFF_EMAILS": "support@example.com"}
    with daphne(tmp_path_factory.mktemp("handoff"), **env) as (address, database, process):
        yield App(f"http://{address}", database, process)


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
    dialog.get_by_label("Your email, so that they can reply (optional)").fill("ana@example.com")
    dialog.get_by_role("button", name="Ask for a person").click()

    expect(dialog).to_be_hidden()
    notice = page.locator("#handoff-notice")
    expect(notice).to_contain_text("Your request for a person was received")
    expect(notice).to_contain_text("reply by email")
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
    dialog.get_by_label("Your email, so that they can reply (optional)").fill("not-an-email@")
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
    notice.get_by_label("Your email, so that they can reply (optional)").fill("bia@example.com")
    notice.get_by_role("button", name="Add").click()
    expect(notice).to_contain_text("reply by email")
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


def _wait_for(condition, seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
