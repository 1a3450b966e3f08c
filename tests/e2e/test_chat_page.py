"""The chat page in Chromium: what the visitor sees and what the server stored."""

from __future__ import annotations

import re

from playwright.sync_api import expect

from tests.provider import HTTPError, Pause, answer, finish, text, tool_round

LAST_ANSWER = ".message--assistant >> nth=-1"


def ask(page, question: str) -> None:
    page.fill("#text", question)
    page.press("#text", "Enter")


def last_answer(page):
    return page.locator(LAST_ANSWER)


def turn_id(page) -> int:
    return int(last_answer(page).get_attribute("data-turn-id"))


def test_hi_gets_an_answer(offline_app, page):
    page.goto(offline_app.url)
    expect(page.locator("#send")).to_be_enabled()
    ask(page, "hi")
    expect(page.locator(".message--user")).to_have_text(["You said:hi"])
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    assert "Kookee" in last_answer(page).locator(".message__text").inner_text()
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#text")).to_be_focused()
