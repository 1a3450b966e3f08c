"""Rating answers in Chromium: thumbs up, thumbs down with a comment, the
rating kept across a reload; stored as the visitor gave it."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.e2e.conftest import chat
from tests.provider import DONE, finish, text


def rating_of(app, turn_id):
    return app.rows("select rating, comment from chat_feedback where turn_id = ?", turn_id)


def test_a_visitor_rates_an_answer_up_then_down_with_a_comment(offline_app, page):
    page.goto(offline_app.url)
    chat(page, "hi")
    answer = page.locator(".message--assistant").last
    turn_id = int(answer.get_attribute("data-turn-id"))
    up = answer.get_by_role("button", name="Helpful", exact=True)
    down = answer.get_by_role("button", name="Not helpful")
    expect(up).to_have_attribute("aria-pressed", "false")

    up.click()
    expect(up).to_have_attribute("aria-pressed", "true")
    expect(answer.locator(".message__rating-status")).to_have_text("Thanks for your feedback.")
    assert rating_of(offline_app, turn_id) == [("up", "")]

    down.click()
    expect(down).to_have_attribute("aria-pressed", "true")
    expect(up).to_have_attribute("aria-pressed", "false")
    comment = answer.get_by_label("What was missing or wrong? (optional)")
    expect(comment).to_be_focused()
    comment.fill("It did not say where the export button is.")
    answer.get_by_role("button", name="Send").click()
    expect(answer.locator(".message__rating-status")).to_have_text("Thanks: your comment was sent.")
    expect(answer.locator(".message__comment")).to_have_count(0)
    assert rating_of(offline_app, turn_id) == [("down", "It did not say where the export button is.")]

    page.reload()
    answer = page.locator(".message--assistant").last
    expect(answer.get_by_role("button", name="Not helpful")).to_have_attribute("aria-pressed", "true")


def test_an_answer_still_streaming_has_no_rating_buttons(scripted_app, provider, page):
    hold, release = provider.gate()
    provider.queue([text("Partly"), hold, text(" done."), finish(), DONE])
    page.goto(scripted_app.url)
    expect(page.locator("#send")).to_be_enabled()  # connected: before that, Enter leaves the text in the box
    page.fill("#text", "Tell me")
    page.press("#text", "Enter")
    answer = page.locator(".message--assistant").last
    expect(answer.locator(".message__text")).to_have_text("Partly")
    expect(answer.locator(".message__rating")).to_have_count(0)
    release()
    expect(answer).to_have_attribute("data-status", "completed")
    expect(answer.locator(".message__rating")).to_have_count(1)
