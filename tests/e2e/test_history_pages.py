"""A long conversation comes in pages, in Chromium: the latest on load, older
ones on request, and reconnecting fills in what was missed without
repeating or reordering what is shown."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App, chat
from tests.servers import daphne

QUESTIONS = [f"question {n}" for n in range(1, 6)]


@pytest.fixture(scope="module")
def paged_app(tmp_path_factory) -> Iterator[App]:
    folder = tmp_path_factory.mktemp("paged")
    with daphne(folder, KOOKEE_HISTORY_PAGE_TURNS="2", **OFFLINE) as (address, database, process):
        yield App(f"http://{address}", database, process)


def shown(page):
    return page.locator(".message--user .message__text")


def test_earlier_messages_load_in_order_and_keep_the_reading_position(paged_app, context, page):
    page.set_viewport_size({"width": 1024, "height": 500})  # the log scrolls
    page.goto(paged_app.url)
    for question in QUESTIONS:
        chat(page, question)
    expect(shown(page)).to_have_text(QUESTIONS)  # this page saw them all: nothing to load

    page.reload()
    expect(page.locator("#send")).to_be_enabled()
    expect(shown(page)).to_have_text(QUESTIONS[-2:])
    earlier = page.get_by_role("button", name="Show earlier messages")
    page.evaluate("document.getElementById('log').scrollTop = 0")
    expect(earlier).to_be_in_viewport()
    top = shown(page).first.bounding_box()["y"]
    earlier.click()
    expect(shown(page)).to_have_text(QUESTIONS[-4:])
    # What the visitor was reading has not moved: the page grew above it.
    assert abs(page.get_by_text("question 4", exact=True).bounding_box()["y"] - top) <= 1
    earlier.click()
    expect(shown(page)).to_have_text(QUESTIONS)
    expect(earlier).to_be_hidden()
    expect(page.locator("#log")).to_be_focused()  # not lost with the button
    expect(page.locator(".message--assistant[data-status='completed']")).to_have_count(5)

    # A reconnect looks at the latest page again: nothing repeated or moved.
    context.set_offline(True)
    expect(page.locator("#connection")).to_have_text("Connection lost. Reconnecting…")
    context.set_offline(False)
    expect(page.locator("#connection")).to_have_text("")
    chat(page, "question 6")
    expect(shown(page)).to_have_text([*QUESTIONS, "question 6"])


def test_a_reconnect_after_more_than_a_page_elsewhere_leaves_no_gap(paged_app, browser, context, page):
    page.goto(paged_app.url)
    for question in QUESTIONS[:3]:
        chat(page, question)
    context.set_offline(True)
    expect(page.locator("#connection")).to_have_text("Connection lost. Reconnecting…")

    # Meanwhile the same visitor chats on, in another window.
    other = browser.new_context()
    try:
        other.add_cookies(context.cookies())
        elsewhere = other.new_page()
        elsewhere.goto(paged_app.url)
        for question in ("question 4", "question 5", "question 6"):
            chat(elsewhere, question)
    finally:
        other.close()

    # The latest page does not reach what this window shows: it starts again
    # from that page rather than show 1, 2, 3, 5, 6.
    context.set_offline(False)
    expect(shown(page)).to_have_text(["question 5", "question 6"])
    earlier = page.get_by_role("button", name="Show earlier messages")
    earlier.click()
    expect(shown(page)).to_have_text([f"question {n}" for n in range(3, 7)])
    earlier.click()
    expect(shown(page)).to_have_text([f"question {n}" for n in range(1, 7)])
