"""The chat page in Chromium: what the visitor sees, and what the server
stored for it."""

from __future__ import annotations

import re

from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.provider import DONE, HTTPError, answer, finish, text, tool_round, usage


def ask(page, question: str) -> None:
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#send")).to_be_enabled()  # connected, and no answer streaming
    page.fill("#text", question)
    page.press("#text", "Enter")


def last_answer(page):
    return page.locator(".message--assistant").last


def turn_id(page) -> int:
    return int(last_answer(page).get_attribute("data-turn-id"))


def test_hi_gets_an_answer(offline_app, page):
    page.goto(offline_app.url)
    expect(page.locator("#send")).to_be_enabled()
    ask(page, "hi")
    expect(page.locator(".message--user .message__text")).to_have_text(["hi"])
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    assert "Kookee" in last_answer(page).locator(".message__text").inner_text()
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#text")).to_be_focused()


def test_stop_freezes_the_answer_as_stored(scripted_app, provider, page):
    hold, release = provider.gate()
    provider.queue([text("The long answer "), text("keeps streaming"), hold, text(" and never ends"), finish(), DONE])
    page.goto(scripted_app.url)
    ask(page, "Tell me everything")
    answer_text = last_answer(page).locator(".message__text")
    expect(answer_text).to_have_text("The long answer keeps streaming")
    expect(last_answer(page)).to_have_attribute("aria-busy", "true")
    button = page.locator("#send")
    expect(button).to_have_text("Stop")

    button.click()
    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")
    expect(last_answer(page).locator(".message__note")).to_have_text("Stopped.")
    expect(button).to_have_text("Send")
    release()  # were the provider still connected, more text would come now
    page.wait_for_timeout(300)
    expect(answer_text).to_have_text("The long answer keeps streaming")
    assert provider.requests[-1].hung_up_early
    assert scripted_app.turn(turn_id(page)) == ("interrupted", True, "The long answer keeps streaming")
    assert scripted_app.ledger_entries(turn_id(page)) == 1


def test_enter_sends_shift_enter_adds_a_line_escape_stops(scripted_app, provider, page):
    hold, _ = provider.gate()
    provider.queue([text("Streaming"), hold])
    page.goto(scripted_app.url)
    expect(page.locator("#send")).to_be_enabled()
    box = page.locator("#text")
    box.type("line one")
    box.press("Shift+Enter")
    box.type("line two")
    expect(box).to_have_value("line one\nline two")
    box.press("Enter")
    expect(page.locator(".message--user .message__text").last).to_have_text("line one\nline two")
    expect(last_answer(page).locator(".message__text")).to_have_text("Streaming")

    box.type("while it streams")
    box.press("Enter")  # sends nothing and stops nothing while an answer streams
    page.wait_for_timeout(200)
    expect(box).to_have_value("while it streams")
    assert last_answer(page).get_attribute("data-status") is None

    box.press("Escape")
    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")
    assert scripted_app.turn(turn_id(page)) == ("interrupted", True, "Streaming")


XSS = (
    'Look: <img src=x onerror="window.pwned=1;alert(1)"> and <script>window.pwned=2;alert(2)</script> '
    "[a link](javascript:window.pwned=3) <b onmouseover=alert(4)>bold?</b> **real bold**"
)


def test_markup_in_an_answer_is_shown_as_text_and_runs_nothing(scripted_app, provider, page):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    provider.queue(answer(XSS))
    page.goto(scripted_app.url)
    ask(page, "Show me some HTML")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")

    for _ in ("live", "after a reload"):
        rendered = last_answer(page).locator(".message__text")
        expect(rendered).to_contain_text('<img src=x onerror="window.pwned=1;alert(1)">')
        expect(rendered).to_contain_text("<script>window.pwned=2;alert(2)</script>")
        expect(rendered.locator("strong")).to_have_text("real bold")
        assert page.locator("#log img, #log script, #log b, #log [onerror], #log [onmouseover]").count() == 0
        assert rendered.locator("a").count() == 0  # the javascript: link is text
        page.mouse.move(200, 200)
        assert page.evaluate("window.pwned") is None
        assert dialogs == []
        page.reload()
        expect(last_answer(page)).to_have_attribute("data-status", "completed")


def test_a_reload_shows_the_history(scripted_app, provider, page):
    hold, _ = provider.gate()
    provider.queue(answer("A **bold** claim, see [the article](/help/cancel-subscription/)."), [text("Cut"), hold])
    page.goto(scripted_app.url)
    ask(page, "First question")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    ask(page, "Second question")
    expect(last_answer(page).locator(".message__text")).to_have_text("Cut")
    page.keyboard.press("Escape")
    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")

    page.reload()
    expect(page.locator(".message--user .message__text")).to_have_text(["First question", "Second question"])
    answers = page.locator(".message--assistant")
    expect(answers).to_have_count(2)
    expect(answers.first.locator("strong")).to_have_text("bold")
    link = answers.first.locator(".message__text a")
    expect(link).to_have_attribute("href", f"{scripted_app.url}/help/cancel-subscription/")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(answers.nth(1)).to_have_attribute("data-status", "interrupted")
    expect(answers.nth(1).locator(".message__note")).to_have_text("Stopped.")


def test_tool_progress_then_only_the_sources_the_answer_used(scripted_app, provider, page):
    hold, release = provider.gate()
    provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "cancel my subscription"})]),
        [hold, *answer("Go to Settings → Billing ([how](/help/cancel-subscription/)).")],
    )
    page.goto(scripted_app.url)
    ask(page, "How do I cancel?")
    progress = last_answer(page).locator(".message__tool")
    expect(progress).to_have_text("Searching the help center…")
    expect(progress).to_be_visible()
    release()
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(progress).to_be_hidden()

    searched = provider.requests[-1].body["messages"][-1]["content"]
    assert searched.count('"url"') > 1  # the search returned several articles...
    sources = last_answer(page).locator(".message__sources a")
    expect(sources).to_have_text(["Cancelling your subscription"])  # ...the answer used one
    # To the section the search matched, on the article's page.
    expect(sources).to_have_attribute(
        "href", re.compile(re.escape(f"{scripted_app.url}/help/cancel-subscription/#") + r"[\w-]+$")
    )
    page.reload()
    expect(page.locator(".message--assistant").last.locator(".message__sources a")).to_have_text(
        ["Cancelling your subscription"]
    )


def test_cut_off_and_failed_answers_say_so_and_a_failed_one_can_be_retried(scripted_app, provider, page):
    provider.queue(
        [text("Half an ans"), finish("length"), usage(10, 4), DONE],
        [HTTPError(400, {"error": {"message": "bad request", "type": "invalid_request_error"}})],
        answer("Second time lucky."),
    )
    page.goto(scripted_app.url)
    ask(page, "A long one")
    expect(last_answer(page)).to_have_attribute("data-status", "truncated")
    expect(last_answer(page).locator(".message__note")).to_contain_text("Cut off")

    ask(page, "Try this")
    failed = page.locator(".message--assistant").nth(1)
    expect(failed).to_have_attribute("data-status", "failed")
    expect(failed.locator(".message__note")).to_contain_text("could not take this request")
    failed.get_by_role("button", name="Retry").click()
    expect(page.locator(".message--user .message__text").last).to_have_text("Try this")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(last_answer(page).locator(".message__text")).to_have_text("Second time lucky.")
    expect(failed).to_have_attribute("data-status", "failed")  # the failure stays on record


def test_accessible_with_no_violations_and_usable_on_a_phone(offline_app, context, page):
    page.goto(offline_app.url)
    ask(page, "How do I cancel my subscription?")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(page.locator("#log")).to_have_attribute("aria-live", "polite")
    expect(page.get_by_role("textbox", name="Your question")).to_be_visible()
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()

    # Keyboard only: Tab reaches the log, the question box, then the button.
    page.keyboard.press("Tab")
    focused = [page.evaluate("document.activeElement.id")]
    for _ in range(12):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.id"))
    assert "text" in focused and "log" in focused

    phone = context.new_page()
    phone.set_viewport_size({"width": 375, "height": 667})
    phone.goto(offline_app.url)
    expect(phone.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
    assert phone.evaluate("document.documentElement.scrollWidth") <= 375  # nothing runs off the side
    for control in ("#text", "#send"):
        box = phone.locator(control).bounding_box()
        assert box["y"] + box["height"] <= 667 and box["x"] >= 0 and box["x"] + box["width"] <= 375
    results = Axe().run(phone)
    assert results.violations_count == 0, results.generate_report()
