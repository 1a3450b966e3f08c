"""The log follows new answers, on a laptop and on a phone: after each of
eight answers with Sources and a rating row, the end of the latest answer is
in view; a visitor who scrolled up to read is left where they are."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import TIMEOUT_MS, chat

pytestmark = pytest.mark.slow

VIEWPORTS = {
    "laptop": {"viewport": {"width": 1366, "height": 768}},
    "phone": {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True},
}
# Questions the demo help center answers, so that each answer has Sources.
QUESTIONS = [
    "How do I install the feedback widget?",
    "How do I merge duplicate posts?",
    "How do I cancel my plan?",
    "Can I export my feedback data?",
    "How do I change my billing email?",
    "How do I set up single sign-on?",
    "How do I moderate posts?",
    "How do I invite my team?",
]


def end_in_view(page) -> bool:
    """Whether the latest answer's bottom edge is inside the log's visible box."""
    return page.evaluate(
        """() => {
          const log = document.getElementById("log");
          const answers = log.querySelectorAll(".message--assistant");
          const last = answers[answers.length - 1].getBoundingClientRect();
          const box = log.getBoundingClientRect();
          return last.bottom <= box.bottom + 1 && last.bottom > box.top;
        }"""
    )


@pytest.mark.parametrize("device", VIEWPORTS)
def test_the_log_follows_eight_answers(browser, offline_app, device):
    context = browser.new_context(**VIEWPORTS[device])
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    try:
        page.goto(offline_app.url)
        with_sources = 0
        for question in QUESTIONS:
            chat(page, question)
            last = page.locator(".message--assistant").last
            expect(last.locator(".message__rating")).to_be_visible()
            with_sources += last.locator(".message__sources").count()
            # The rating row is the last thing added: the scroll took it in.
            assert end_in_view(page), f"{device}: the answer to {question!r} ended below the fold"
        assert with_sources >= 4, "the answers had Sources (what pushed them below the fold)"
        # The thumbs are drawn (inline SVG), not emoji that need an emoji font.
        assert page.locator(".message__rate svg").count() == 2 * len(QUESTIONS)
        assert not [c for c in page.locator("#log").inner_text() if c in "\U0001f44d\U0001f44e"]
        height, top = page.evaluate("() => [log.scrollHeight, log.scrollTop]")
        assert top > 0 and height > page.viewport_size["height"]

        # Scrolled up to read: the next answer does not pull the visitor down.
        page.evaluate("() => { log.scrollTop = 0; }")
        page.wait_for_timeout(100)  # the scroll event
        chat(page, "How do I cancel my plan?")
        assert page.evaluate("() => log.scrollTop") == 0
    finally:
        context.close()
