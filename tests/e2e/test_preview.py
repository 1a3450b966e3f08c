"""The admin's Preview page in Chromium, as Support uses it on a 1,366 x 768
laptop: the chat page itself speaking as the draft (its guidance in the
system prompt, its name, greeting and starters), under a panel saying it is
not live and what the draft changes; streaming, sources and Stop as on the
chat page; billed as preview, its conversation marked preview, its searches
not recorded; "New conversation" comes back with a new preview key. Finance
may not open it, and visitors still meet the published version."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.e2e.conftest import TIMEOUT_MS, App
from tests.e2e.test_finance_pages import log_in
from tests.provider import DONE, Pause, answer, chunk, finish, text, tool_round, usage
from tests.servers import ROOT

pytestmark = pytest.mark.slow

LAPTOP = {"width": 1366, "height": 768}
PREVIEW = "/admin/chat/assistantversion/preview/"
STARTER = "How do I cancel my subscription?"
USERS = {"sam": ("kookee-support", "Support"), "fran": ("kookee-finance", "Finance")}
# `manage.py setup_roles` first, in the same process (a second one took two seconds).
SEED = f"""
from django.core.management import call_command
call_command("setup_roles")
from django.contrib.auth.models import Group, User
from chat.assistant import versions
for username, (password, role) in {USERS!r}.items():
    User.objects.create_user(username, f"{{username}}@example.com", password, is_staff=True).groups.add(
        Group.objects.get(name=role)
    )
live = versions.save_draft({{"guidance": "Live words.", "name_en": "Kiki"}}, "e2e")
versions.publish(live, "e2e")
versions.save_draft(
    {{"guidance": "Draft words.", "name_en": "Lulu", "greeting_en": "Hi, I am Lulu.", "starters_en": [{STARTER!r}]}},
    "e2e",
)
"""
# What the draft changes since the published version, as the panel lists it.
CHANGES = [
    ("guidance", "Live words.", "Draft words."),
    ("name (English)", "Kiki", "Lulu"),
    ("greeting (English)", "", "Hi, I am Lulu."),
    ("starter questions (English)", "", STARTER),
]
SEARCH = tool_round([("call_1", "search_help_center", {"query": "cancel my subscription"})])
ANSWER = "Go to Settings → Billing ([how](/help/cancel-subscription/))."


def manage(app: App, *arguments: str) -> None:
    """A manage.py command on the served app's database."""
    environment = {**os.environ, "DATABASE_URL": f"sqlite:///{app.database}", "OPENAI_API_KEY": ""}
    subprocess.run(
        [sys.executable, "manage.py", *arguments], cwd=ROOT, env=environment, check=True, capture_output=True
    )


@pytest.fixture(scope="module")
def app(scripted_app) -> App:
    """The app with the scripted model; the roles, a Support and a Finance user, Kiki live and Lulu drafted."""
    manage(scripted_app, "shell", "-c", SEED)
    return scripted_app


@pytest.fixture
def laptop(browser) -> Iterator:
    """A new browser (its own session) at 1,366 x 768, signed in as `username`
    or a visitor; no script error on any of its pages."""
    contexts, errors = [], []

    def open_as(app: App, username: str | None = None):
        context = browser.new_context(viewport=LAPTOP, locale="en-US")
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(error))
        if username:
            log_in(page, app, username, USERS[username][0])
        return page

    yield open_as
    for context in contexts:
        context.close()
    assert errors == []


def last_answer(page):
    return page.locator(".message--assistant").last


def turn_id(page) -> int:
    return int(last_answer(page).get_attribute("data-turn-id"))


def system_of(request) -> str:
    [system] = [m["content"] for m in request.body["messages"] if m["role"] == "system"]
    return system


def ask(page, question: str) -> None:
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#send")).to_be_enabled()  # connected, and no answer streaming
    page.locator("#text").fill(question)
    page.locator("#text").press("Enter")
    expect(page.locator(".message--user .message__text").last).to_have_text(question)


def stored(app: App, turn: int) -> tuple[bool, bool, int]:
    """The turn's conversation's preview flag, its ledger entry's, and how many searches it recorded."""
    [(conversation, entry)] = app.rows(
        "select c.preview, l.preview from chat_turn t join chat_conversation c on c.id = t.conversation_id"
        " join billing_ledgerentry l on l.turn_id = t.id where t.id = ?",
        turn,
    )
    [(searches,)] = app.rows("select count(*) from chat_search where turn_id = ?", turn)
    return bool(conversation), bool(entry), searches


def open_preview(page, app: App) -> None:
    page.goto(app.url + PREVIEW)
    expect(page.locator("#send")).to_be_enabled()  # connected: its first history came


def test_the_preview_speaks_as_the_draft_and_is_billed_as_preview(app, provider, laptop):
    page = laptop(app, "sam")
    open_preview(page, app)

    # The panel: not live, and what the draft changes from the published version.
    panel = page.get_by_role("complementary", name="Preview: not live")
    expect(panel).to_be_visible()
    expect(panel).to_contain_text("Visitors still meet the published version.")
    rows = panel.get_by_role("table", name="What the draft changes").locator("tbody tr")
    expect(rows).to_have_count(len(CHANGES))
    for index, cells in enumerate(CHANGES):
        expect(rows.nth(index).locator("th, td")).to_have_text(list(cells))
    # The chat, as the draft's: its name, its greeting, its starter.
    expect(page.get_by_role("heading", level=1)).to_have_text("Lulu")
    expect(page.locator("#greeting .chat__greeting-text")).to_have_text("Hi, I am Lulu.")
    starter = page.locator("#starters").get_by_role("button", name=STARTER)
    expect(starter).to_be_enabled()

    # A starter: a search, then an answer that streams, linking an article of the demo help center.
    hold, release = provider.gate()
    provider.queue(
        SEARCH,
        [
            chunk(delta={"role": "assistant", "content": ""}),
            text("Go to Settings → Billing "),
            hold,
            text("([how](/help/cancel-subscription/))."),
            finish(),
            usage(10, 5),
            DONE,
        ],
    )
    before = len(provider.requests)
    starter.click()
    expect(page.locator(".message--user .message__text")).to_have_text([STARTER])
    streaming = last_answer(page)
    expect(streaming.locator(".message__text")).to_have_text("Go to Settings → Billing")
    expect(streaming).to_have_attribute("aria-busy", "true")
    expect(page.locator("#send")).to_have_text("Stop")
    release()
    expect(streaming).to_have_attribute("data-status", "completed")
    expect(streaming.locator(".message__text")).to_have_text("Go to Settings → Billing (how).")
    sources = streaming.locator(".message__sources a")
    expect(sources).to_have_text(["Cancelling your subscription"])
    expect(sources).to_have_attribute("href", re.compile(re.escape(f"{app.url}/help/cancel-subscription/#")))

    # Both of the turn's model calls carried the draft's guidance, never the live one's.
    calls = provider.requests[before:]
    assert len(calls) == 2
    assert '"url"' in calls[1].body["messages"][-1]["content"]  # the search did return articles
    for call in calls:
        assert "Draft words." in system_of(call) and "Live words." not in system_of(call)
    # Billed as preview, in a preview conversation; its search is no visitor's unanswered question.
    assert stored(app, turn_id(page)) == (True, True, 0)


@pytest.mark.parametrize("how", ["the Stop button", "Escape"])
def test_stop_ends_a_preview_answer_interrupted(app, provider, laptop, how):
    page = laptop(app, "sam")
    open_preview(page, app)
    words = [f"word{n} " for n in range(60)]
    paced = [chunk(delta={"role": "assistant", "content": ""})]
    for word in words:
        paced += [text(word), Pause(0.2)]  # twelve seconds of answer
    provider.queue([*paced, finish(), usage(10, 60), DONE])
    before = len(provider.requests)
    ask(page, "Tell me everything")
    shown = last_answer(page).locator(".message__text")
    expect(shown).to_contain_text("word2")
    expect(page.locator("#send")).to_have_text("Stop")

    if how == "Escape":
        page.keyboard.press("Escape")
    else:
        page.locator("#send").click()

    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")
    expect(last_answer(page).locator(".message__note")).to_have_text("Stopped.")
    expect(page.locator("#send")).to_have_text("Send")
    cut = shown.inner_text()
    page.wait_for_timeout(600)  # were the answer still coming, three more words by now
    expect(shown).to_have_text(cut)
    assert "word2" in cut and "word59" not in cut
    assert provider.requests[before].hung_up_early
    status, interrupted, saved = app.turn(turn_id(page))
    assert (status, interrupted) == ("interrupted", True)
    assert saved.split() == cut.split()  # what the page shows is what was stored
    assert stored(app, turn_id(page)) == (True, True, 0)


def test_a_new_conversation_comes_back_with_a_new_preview_key(app, provider, laptop):
    page = laptop(app, "sam")
    open_preview(page, app)
    provider.queue(answer("First answer."))
    ask(page, "First question")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    first = turn_id(page)
    [(first_conversation, first_key)] = app.rows(
        "select c.id, c.visitor_hash from chat_turn t join chat_conversation c on c.id = t.conversation_id"
        " where t.id = ?",
        first,
    )

    page.locator("#restart").click()
    dialog = page.get_by_role("dialog", name="Start a new conversation?")
    expect(dialog).to_be_visible()
    # The page asks the Preview page (not the chat page) for a new key, then reconnects.
    with page.expect_request(lambda r: r.method == "HEAD" and r.url == app.url + PREVIEW) as renewed:
        dialog.get_by_role("button", name="Start over").click()
    assert renewed.value.response().status == 200
    expect(page.locator("#connection")).to_have_text("Started a new conversation.")
    expect(page.locator(".message")).to_have_count(0)
    expect(page.locator("#greeting .chat__greeting-text")).to_have_text("Hi, I am Lulu.")
    expect(page.get_by_role("heading", level=1)).to_have_text("Lulu")
    assert app.rows("select 1 from chat_revokedkey where visitor_hash = ?", first_key) == [(1,)]

    provider.queue(answer("Second answer."))
    before = len(provider.requests)
    ask(page, "Second question")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(last_answer(page).locator(".message__text")).to_have_text("Second answer.")
    expect(page.locator(".message--user .message__text")).to_have_text(["Second question"])
    # A conversation of its own, as preview, that knows nothing of the first.
    [(second_conversation, second_key, preview)] = app.rows(
        "select c.id, c.visitor_hash, c.preview from chat_turn t join chat_conversation c on c.id = t.conversation_id"
        " where t.id = ?",
        turn_id(page),
    )
    assert second_conversation != first_conversation and second_key != first_key and preview
    [call] = provider.requests[before:]
    assert [m["content"] for m in call.body["messages"] if m["role"] == "user"] == ["Second question"]
    assert "Draft words." in system_of(call)

    # A reload shows the new conversation only.
    page.reload()
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(page.locator(".message--user .message__text")).to_have_text(["Second question"])


def test_finance_may_not_preview_and_visitors_meet_the_live_version(app, provider, laptop):
    page = laptop(app, "fran")
    response = page.goto(app.url + PREVIEW)
    assert response.status == 403
    expect(page.locator("body")).to_contain_text(re.compile(r"You may not open this page|403 Forbidden"))
    expect(page.locator("#chat")).to_have_count(0)
    expect(page.locator("body")).not_to_contain_text("Draft words.")

    visitor = laptop(app)
    visitor.goto(app.url + "/")
    expect(visitor.get_by_role("heading", level=1)).to_have_text("Kiki")
    expect(visitor.locator("#greeting")).to_have_count(0)
    expect(visitor.locator("#starters")).to_have_count(0)
    expect(visitor.locator(".preview")).to_have_count(0)
    provider.queue(SEARCH, answer(ANSWER))
    before = len(provider.requests)
    ask(visitor, STARTER)
    expect(last_answer(visitor)).to_have_attribute("data-status", "completed")
    expect(last_answer(visitor).locator(".message__sources a")).to_have_text(["Cancelling your subscription"])
    calls = provider.requests[before:]
    assert len(calls) == 2
    for call in calls:
        assert "Live words." in system_of(call) and "Draft words." not in system_of(call)
    # A visitor's turn: not preview, and its search recorded (what the preview's is not).
    assert stored(app, turn_id(visitor)) == (False, False, 1)


def test_the_preview_page_passes_axe_and_fits_a_laptop(app, provider, laptop):
    page = laptop(app, "sam")
    open_preview(page, app)
    expect(page.locator("#starters").get_by_role("button").first).to_be_enabled()
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()

    provider.queue(SEARCH, answer(ANSWER))
    page.locator("#starters").get_by_role("button", name=STARTER).click()
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(last_answer(page).locator(".message__sources a")).to_have_count(1)
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()
    width = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
    assert width[0] <= width[1], width


def test_the_question_box_is_on_the_first_screen(app, laptop):
    page = laptop(app, "sam")
    open_preview(page, app)
    assert page.evaluate("scrollY") == 0
    for control in ("#text", "#send"):
        box = page.locator(control).bounding_box()
        assert box["y"] >= 0 and box["y"] + box["height"] <= LAPTOP["height"], (control, box)
