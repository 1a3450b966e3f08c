"""An answer that outlives its tab, in Chromium: a reload picks it up live
where it was (turn.resume), a second tab follows it and may stop it for
both, and an interrupted answer says why and offers to continue."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import expect

from chat.engine.offline import CAPABILITIES_ANSWER, GREETING_ANSWER
from tests.e2e.conftest import App
from tests.e2e.test_chat_page import last_answer, turn_id
from tests.e2e.test_reconnect import SLOW
from tests.e2e.test_widget import _HostPage, customer_sites, open_widget  # noqa: F401 (fixture)
from tests.servers import daphne, free_port

# The offline model, slowed down: its answer to QUESTION (57 frames) takes
# about six seconds, time enough to reload or switch tabs halfway.
SLOW_OFFLINE = {"KOOKEE_OFFLINE_TOKENS_PER_SECOND": "10", "KOOKEE_OFFLINE_FIRST_TOKEN_MS": "20"}
QUESTION = "What can you do?"
HALFWAY = "For example"  # in the answer's second paragraph
ANSWER_MS = 15_000  # expect's default (5 s) is shorter than a whole answer
STILL_WRITING = "This answer was still being written when we last heard from the server. Checking again…"

# Every note and status the page shows, however briefly, from its first script on.
RECORD_NOTES = """
window.seen = { notes: [], statuses: [] };
new MutationObserver(() => {
  for (const note of document.querySelectorAll(".message__note")) window.seen.notes.push(note.textContent);
  for (const item of document.querySelectorAll(".message[data-status]")) window.seen.statuses.push(item.dataset.status);
}).observe(document, { subtree: true, childList: true, characterData: true, attributes: true });
"""

GROWS_WHILE_LIVE = """([selector, length]) => {
  const answer = [...document.querySelectorAll(selector)].pop();
  const text = answer.querySelector(".message__text").textContent;
  return answer.getAttribute("aria-busy") === "true" && text.length > length;
}"""


@pytest.fixture(scope="module")
def slow_app(tmp_path_factory) -> Iterator[App]:
    with daphne(tmp_path_factory.mktemp("slow"), **SLOW_OFFLINE) as (address, database, process):
        yield App(f"http://{address}", database, process)


def ask(root, question: str) -> None:
    """Asks, on the chat page or in the widget's frame."""
    expect(root.locator("#send")).to_have_text("Send")
    expect(root.locator("#send")).to_be_enabled()
    root.locator("#text").fill(question)
    root.locator("#text").press("Enter")


def shown(root):
    return root.locator(".message--assistant").last.locator(".message__text")


def questions(root):
    return root.locator(".message--user .message__text")


def follows_live(root, frame=None) -> None:
    """The last answer streams here: Stop is offered, nothing is said about
    it, and its text grows."""
    expect(root.locator("#send")).to_have_text("Stop")
    expect(root.locator("#send")).to_be_enabled()
    answer = root.locator(".message--assistant").last
    expect(answer).to_have_attribute("aria-busy", "true")
    expect(answer.locator(".message__note")).to_have_count(0)
    length = len(shown(root).text_content())
    (frame or root).wait_for_function(GROWS_WHILE_LIVE, arg=[".message--assistant", length])


def stop_reason(app: App, turn: int) -> str:
    [(reason,)] = app.rows("select stop_reason from chat_turn where id = ?", turn)
    return reason


def wait_for(predicate, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def new_tab(context, url: str, errors: list):
    tab = context.new_page()
    tab.on("pageerror", lambda error: errors.append(error))
    tab.goto(url)
    expect(tab.locator("#send")).to_be_enabled()
    return tab


def test_a_reload_mid_answer_picks_it_up_live_where_it_was(slow_app, page):
    page.add_init_script(RECORD_NOTES)
    page.goto(slow_app.url)
    ask(page, QUESTION)
    expect(shown(page)).to_contain_text(HALFWAY)
    turn = turn_id(page)

    page.reload()
    follows_live(page)
    expect(questions(page)).to_have_text([QUESTION])
    expect(page.locator(".message--assistant")).to_have_count(1)
    assert turn_id(page) == turn

    expect(last_answer(page)).to_have_attribute("data-status", "completed", timeout=ANSWER_MS)
    assert slow_app.turn(turn) == ("completed", False, CAPABILITIES_ANSWER)
    # Never taken for an answer its server had lost, nor ended from the history.
    seen = page.evaluate("window.seen")
    assert STILL_WRITING not in seen["notes"]
    assert set(seen["statuses"]) == {"completed"}
    # Not a word missing or repeated: what the page followed is what was stored.
    live = shown(page).inner_html()
    page.reload()
    expect(last_answer(page)).to_have_attribute("data-status", "completed", timeout=ANSWER_MS)
    assert shown(page).inner_html() == live


def test_a_second_tab_follows_the_answer_and_a_stop_there_stops_it_in_both(slow_app, context, page):
    errors = []
    page.goto(slow_app.url)
    other = new_tab(context, slow_app.url, errors)
    ask(page, QUESTION)

    # Asked in the first tab, streaming in both; the second learns the question from the history.
    follows_live(other)
    expect(questions(other)).to_have_text([QUESTION])
    follows_live(page)
    other.locator("#send").click()  # Stop, in the tab that did not ask

    turn = turn_id(page)
    for tab in (page, other):
        answer = last_answer(tab)
        expect(answer).to_have_attribute("data-status", "interrupted")
        expect(answer.locator(".message__note")).to_have_text("Stopped.")
        expect(answer.get_by_role("button", name="Continue")).to_be_enabled()
        expect(tab.locator("#send")).to_have_text("Send")
        assert turn_id(tab) == turn
    status, interrupted, stored = slow_app.turn(turn)
    assert (status, interrupted, stop_reason(slow_app, turn)) == ("interrupted", True, "stopped")
    assert 0 < len(stored) < len(CAPABILITIES_ANSWER)
    # Both show what was stored, as a tab opened now shows it from the history.
    third = new_tab(context, slow_app.url, errors)
    expect(last_answer(third).locator(".message__note")).to_have_text("Stopped.")
    assert shown(page).inner_html() == shown(other).inner_html() == shown(third).inner_html()
    third.close()

    # Continue asks the same question again, and both tabs follow the new answer.
    last_answer(page).get_by_role("button", name="Continue").click()
    for tab in (page, other):
        expect(questions(tab)).to_have_text([QUESTION, QUESTION])
        expect(tab.locator(".message--assistant")).to_have_count(2)
    follows_live(other)
    for tab in (page, other):  # nothing can be asked again while an answer runs
        expect(tab.locator(".message--assistant").first.get_by_role("button", name="Continue")).to_be_disabled()
    for tab in (page, other):
        expect(last_answer(tab)).to_have_attribute("data-status", "completed", timeout=ANSWER_MS)
    again = turn_id(page)
    assert again != turn and turn_id(other) == again
    assert slow_app.turn(again) == ("completed", False, CAPABILITIES_ANSWER)
    assert shown(page).inner_html() == shown(other).inner_html()
    expect(page.locator(".message--assistant").first.get_by_role("button", name="Continue")).to_be_enabled()
    assert errors == []


def test_an_interrupted_answer_says_why_and_offers_to_continue(tmp_path, page):
    env = {"KOOKEE_RESUME_GRACE_SECONDS": "0.5", **SLOW_OFFLINE}
    port = free_port()
    with daphne(tmp_path, port=port, **env) as (address, database, process):
        app = App(f"http://{address}", database, process)
        page.goto(app.url)
        ask(page, QUESTION)
        expect(shown(page)).to_contain_text(HALFWAY)
        left = turn_id(page)

        # Every tab left, and the grace period ran out.
        page.goto("about:blank")
        wait_for(lambda: app.turn(left)[0] != "streaming")
        assert app.turn(left)[0] == "interrupted" and stop_reason(app, left) == "left"
        page.goto(app.url)
        first = page.locator(".message--assistant").first
        expect(first.locator(".message__note")).to_have_text("This answer stopped when the page was closed.")
        first.get_by_role("button", name="Continue").click()
        expect(questions(page)).to_have_text([QUESTION, QUESTION])
        expect(shown(page)).to_contain_text(HALFWAY)

        # The server restarts (SIGTERM, a deploy) while it answers again.
        restarted = turn_id(page)
        process.terminate()
        process.wait(10)
        assert stop_reason(app, restarted) == "shutdown"

    with daphne(tmp_path, port=port, **env):
        # Told live, or learnt from the history once back: either way, as a restart.
        expect(page.locator("#connection")).to_have_text("", timeout=SLOW)
        second = last_answer(page)
        expect(second).to_have_attribute("data-status", "interrupted")
        expect(second.locator(".message__note")).to_have_text(
            "The server restarted while this answer was being written."
        )
        expect(second.get_by_role("button", name="Continue")).to_be_enabled()
        expect(first.locator(".message__note")).to_have_text("This answer stopped when the page was closed.")


@contextmanager
def slow_widget_server(tmp_path, site: str) -> Iterator[App]:
    port = free_port()
    with daphne(tmp_path, port=port, KOOKEE_EMBED_ORIGINS=site, **SLOW_OFFLINE) as (_, database, process):
        _HostPage.kookee = f"http://localhost:{port}"  # another site than the customer's
        yield App(_HostPage.kookee, database, process)


def test_the_widget_reloaded_with_its_page_mid_answer_picks_it_up_in_place(tmp_path, customer_sites, page):  # noqa: F811
    with slow_widget_server(tmp_path, customer_sites[0]) as app:
        page.goto(customer_sites[0])
        widget = open_widget(page)
        ask(widget, "hi")
        expect(widget.locator(".message--assistant").last).to_have_attribute(
            "data-status", "completed", timeout=ANSWER_MS
        )
        ask(widget, QUESTION)
        expect(shown(widget)).to_contain_text(HALFWAY)

        # The frame's log starts empty: the resumed answer still comes after the earlier turn.
        page.reload()
        widget = open_widget(page)
        frame = next(f for f in page.frames if f != page.main_frame)
        follows_live(widget, frame)
        expect(questions(widget)).to_have_text(["hi", QUESTION])
        expect(widget.locator(".message--assistant").last).to_have_attribute(
            "data-status", "completed", timeout=ANSWER_MS
        )
        turn = int(widget.locator(".message--assistant").last.get_attribute("data-turn-id"))
        assert app.turn(turn) == ("completed", False, CAPABILITIES_ANSWER)
        assert app.rows("select assistant_text from chat_turn order by id")[0] == (GREETING_ANSWER,)
