"""Actions in Chromium: the assistant calls the customer's own API (the shop
of tests/shop_api.py) for a verified visitor. A change waits for the
visitor's yes on a card in the answer, on the chat page and in the widget;
what runs shows its title meanwhile."""

from __future__ import annotations

import gettext
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.e2e.conftest import App, copy_database
from tests.e2e.shop import API_SECRET, ENV, import_shop, running_shop, token_for, tool_result, wait_for
from tests.provider import answer, tool_round
from tests.servers import ROOT, daphne, free_port, sites

pytestmark = pytest.mark.slow

CANCEL = ("c1", "cancelOrder", {"order_id": "A-1001", "reason": "ordered twice"})
QUESTION = "Cancel my order A-1001, I ordered twice"
FRAME = "iframe[title='Kookee help chat']"


# --- the customer's site, for the widget ---------------------------------------------------------

HOST_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Acme store</title></head>
<body><h1>Acme store</h1><label>Search the store <input id="store-search"></label>
<script>window.KookeeChat = {{ q: [["identify", "{token}"]] }};</script>
<script src="{kookee}/static/chat/widget.js" async></script></body></html>"""


class _HostPage(BaseHTTPRequestHandler):
    kookee = ""
    token = ""

    def do_GET(self) -> None:
        body = HOST_PAGE.format(kookee=_HostPage.kookee, token=_HostPage.token).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def site() -> Iterator[str]:
    with sites(_HostPage, 1) as [origin]:
        yield origin


# --- the app, its actions, the shop ----------------------------------------------------------------


@pytest.fixture(scope="module")
def shop():
    with running_shop(slow_seconds=1.5) as api:
        yield api


@pytest.fixture(scope="module")
def imported() -> list[Path]:
    """The first served app's database just after the shop's import: the
    module's next server starts from a copy of it (importing again took two
    seconds)."""
    return []


def served(tmp_path, provider_thread, shop, site: str, imported: list[Path], **env: str) -> Iterator[App]:
    """The app on localhost (another site than the customer's), the scripted
    model, the shop's actions imported."""
    if imported:
        copy_database(imported[0], tmp_path / "db.sqlite3")
    port = free_port()
    environment = {
        "OPENAI_BASE_URL": provider_thread.url,
        "OPENAI_API_KEY": "test-key",
        "KOOKEE_PROVIDER_RETRIES": "0",
        "KOOKEE_EMBED_ORIGINS": site,
        **ENV,
        **env,
    }
    with daphne(tmp_path, port=port, **environment) as (_, database, process):
        if not imported:
            import_shop(database, shop.url)
            snapshot = tmp_path / "imported" / "db.sqlite3"
            copy_database(database, snapshot)
            imported.append(snapshot)
        yield App(f"http://localhost:{port}", database, process)


@pytest.fixture(scope="module")
def app(tmp_path_factory, provider_thread, shop, site, imported) -> Iterator[App]:
    yield from served(tmp_path_factory.mktemp("actions"), provider_thread, shop, site, imported)


@pytest.fixture(autouse=True)
def fresh_shop(shop):
    shop.requests.clear()
    shop.cancelled.clear()
    yield


def signed_in(page, app: App, sub: str = "user-42") -> None:
    """The chat page, its visitor verified as the customer's user `sub`."""
    page.goto(app.url + "/")
    expect(page.locator("#send")).to_be_enabled()
    page.evaluate("token => KookeeChat.identify(token)", token_for(sub, "Ana"))
    expect(page.locator("#chat[data-identified='true']")).to_have_count(1)


def ask(root, question: str) -> None:
    expect(root.locator("#send")).to_have_text("Send")
    expect(root.locator("#send")).to_be_enabled()
    root.locator("#text").fill(question)
    root.locator("#text").press("Enter")


def last_answer(root):
    return root.locator(".message--assistant").last


def card_of(root, title: str = "Cancelling your order"):
    return root.get_by_role("group", name=title)


def expect_open_card(card) -> None:
    expect(card).to_be_visible()
    expect(card.locator("dt")).to_have_text(["order_id", "reason"])
    expect(card.locator("dd")).to_have_text(["A-1001", "ordered twice"])
    expect(card).not_to_contain_text("customer_id")  # filled from the verified identity: never the visitor's to read
    expect(card).not_to_contain_text("user-42")
    expect(card.get_by_role("button", name="Confirm")).to_be_enabled()
    expect(card.get_by_role("button", name="Cancel")).to_be_enabled()


def expect_settled(card, said: str) -> None:
    expect(card.locator(".message__action-status")).to_have_text(said)
    expect(card.get_by_role("button", name="Confirm")).to_be_disabled()
    expect(card.get_by_role("button", name="Cancel")).to_be_disabled()


# --- on the chat page ------------------------------------------------------------------------------


def test_a_change_runs_after_the_visitors_yes(app, provider, shop, page):
    provider.queue(tool_round([CANCEL]), answer("Your order A-1001 is cancelled."))
    signed_in(page, app)
    ask(page, QUESTION)
    card = card_of(page)
    expect_open_card(card)
    expect(card.locator(".message__action-title")).to_have_text("Cancelling your order")
    # The card says what would be done: not "Cancelling your order…" as though it were under way.
    expect(last_answer(page).locator(".message__tool")).to_be_hidden()
    page.wait_for_timeout(300)
    assert shop.requests == []  # nothing before the yes
    # The visitor was in the chat (they had just asked): the focus is on
    # Confirm, and the keyboard answers.
    expect(card.get_by_role("button", name="Confirm")).to_be_focused()
    page.keyboard.press("Enter")

    expect_settled(card, "Confirmed")
    expect(page.locator("#text")).to_be_focused()  # not lost with the disabled button
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(last_answer(page).locator(".message__text")).to_have_text("Your order A-1001 is cancelled.")
    expect_settled(card, "Confirmed")  # the end of the turn does not take it back
    [seen] = shop.requests
    assert (seen.method, seen.path) == ("POST", "/orders/A-1001/cancel")
    assert seen.body == {"reason": "ordered twice", "customer_id": "user-42"}
    assert seen.headers["authorization"] == f"Bearer {API_SECRET}"
    assert tool_result(provider.requests[-1])["result"] == {"id": "A-1001", "status": "cancelled"}


MARKUP = '<img src=x onerror="window.pwned=1"> <b>twice</b>'


def test_a_no_sends_nothing(app, provider, shop, page):
    # Whatever the model wrote is shown as text.
    markup = ("c1", "cancelOrder", {"order_id": "A-1001", "reason": MARKUP})
    provider.queue(tool_round([markup]), answer("All right, I left it as it is."))
    signed_in(page, app)
    ask(page, QUESTION)
    card = card_of(page)
    expect(card.locator("dd")).to_have_text(["A-1001", MARKUP])
    assert card.locator("img, b").count() == 0
    assert page.evaluate("window.pwned") is None
    card.get_by_role("button", name="Cancel").click()
    expect_settled(card, "Cancelled")
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect(last_answer(page).locator(".message__text")).to_have_text("All right, I left it as it is.")
    expect(last_answer(page).locator(".message__tool")).to_be_hidden()
    expect_settled(card, "Cancelled")
    assert shop.requests == []
    assert tool_result(provider.requests[-1])["declined"] is True


def test_after_a_stop_the_card_says_nothing_was_done(app, provider, shop, page):
    provider.queue(tool_round([CANCEL]), answer("never asked for"))
    signed_in(page, app)
    ask(page, QUESTION)
    card = card_of(page)
    expect_open_card(card)
    page.locator("#send").click()  # Stop
    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")
    expect_settled(card, "No answer: nothing was done.")
    page.wait_for_timeout(300)
    assert shop.requests == []
    assert app.rows("select outcome from chat_actioncall order by id")[-1:] == [("cancelled",)]


def test_a_question_asked_again_after_a_reconnect_is_one_card_still_open(app, provider, shop, context, page):
    provider.queue(tool_round([CANCEL]), answer("Done."))
    signed_in(page, app)
    ask(page, QUESTION)
    card = card_of(page)
    expect_open_card(card)

    context.set_offline(True)
    expect(page.locator("#connection")).to_have_text("Connection lost. Reconnecting…")
    # No socket to answer on: the card waits.
    expect(card.get_by_role("button", name="Confirm")).to_be_disabled()
    context.set_offline(False)  # back within the turn's grace: the server asks this tab again
    expect(page.locator("#connection")).to_have_text("")
    expect(page.locator(".message__action")).to_have_count(1)
    expect_open_card(card)
    card.get_by_role("button", name="Confirm").click()
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect_settled(card, "Confirmed")
    assert [seen.path for seen in shop.requests] == ["/orders/A-1001/cancel"]


def test_the_window_that_answers_tells_the_others(app, provider, shop, context):
    """Two tabs of one visitor both show the question; the one answered in
    the other never says that nothing was done."""
    provider.queue(tool_round([CANCEL]), answer("Done."))
    first, second = context.new_page(), context.new_page()
    signed_in(first, app)
    second.goto(app.url + "/")
    expect(second.locator("#send")).to_be_enabled()
    ask(first, QUESTION)
    expect_open_card(card_of(first))
    expect_open_card(card_of(second))
    card_of(first).get_by_role("button", name="Confirm").click()
    expect_settled(card_of(second), "Confirmed")
    expect(last_answer(second)).to_have_attribute("data-status", "completed")
    expect_settled(card_of(second), "Confirmed")
    assert [seen.method for seen in shop.requests] == ["POST"]


def test_a_slow_action_shows_its_title_while_it_runs(app, provider, shop, page):
    provider.queue(tool_round([("r1", "slowReport", {})]), answer("Your report is ready."))
    signed_in(page, app)
    ask(page, "My report, please")
    progress = last_answer(page).locator(".message__tool")
    expect(progress).to_have_text("Preparing your report…")
    expect(progress).to_be_visible()
    assert page.locator(".message__action").count() == 0  # a GET asks nobody
    wait_for(lambda: shop.requests)
    expect(last_answer(page)).to_have_attribute("data-status", "completed")  # the shop answers after 1.5 s
    expect(progress).to_be_hidden()
    assert tool_result(provider.requests[-1])["result"] == {"slow": True}


def test_no_accessibility_violations_with_a_card_shown(app, provider, shop, page):
    provider.queue(tool_round([CANCEL]), answer("never asked for"))
    signed_in(page, app)
    ask(page, QUESTION)
    card = card_of(page)
    expect_open_card(card)
    expect(page.locator("#announcer")).to_have_text("Please confirm or cancel: Cancelling your order")
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()
    page.locator("#send").click()
    expect_settled(card, "No answer: nothing was done.")
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


@pytest.fixture(scope="module")
def hasty(tmp_path_factory, provider_thread, shop, site, imported) -> Iterator[App]:
    """The app with a second to answer an action's question."""
    folder = tmp_path_factory.mktemp("hasty")
    yield from served(folder, provider_thread, shop, site, imported, KOOKEE_ACTION_CONFIRM_SECONDS="1")


def test_a_question_left_unanswered_is_over_when_the_action_gives_up(hasty, provider, shop, page):
    hold, release = provider.gate()
    provider.queue(tool_round([CANCEL]), [hold, *answer("You did not confirm, so nothing changed.")])
    signed_in(page, hasty)
    ask(page, QUESTION)
    card = card_of(page)
    expect_open_card(card)
    # The action's time runs out while the answer goes on: the card says so at once.
    expect_settled(card, "No answer: nothing was done.")
    assert last_answer(page).get_attribute("data-status") is None  # still streaming
    expect(last_answer(page).locator(".message__tool")).to_be_hidden()
    release()
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    expect_settled(card, "No answer: nothing was done.")
    assert shop.requests == []
    assert tool_result(provider.requests[-1])["declined"] is True


# --- in the widget ---------------------------------------------------------------------------------


def test_the_card_in_the_widget_asks_without_taking_the_host_pages_focus(app, provider, shop, site, page):
    _HostPage.kookee, _HostPage.token = app.url, token_for("user-42", "Ana")
    hold, release = provider.gate()
    provider.queue([hold, *tool_round([CANCEL])], answer("Your order A-1001 is cancelled."))
    page.goto(site + "/")
    page.get_by_role("button", name="Help", exact=True).click()
    chat = page.frame_locator(FRAME)
    expect(chat.locator("#chat[data-identified='true']")).to_have_count(1)
    ask(chat, QUESTION)
    expect(chat.locator("#send")).to_have_text("Stop")
    # The visitor goes back to the store's page while the assistant thinks.
    page.get_by_label("Search the store").focus()
    release()

    card = card_of(chat)
    expect_open_card(card)
    page.wait_for_timeout(200)
    expect(page.get_by_label("Search the store")).to_be_focused()
    expect(card.get_by_role("button", name="Confirm")).not_to_be_focused()
    card.get_by_role("button", name="Confirm").click()
    expect_settled(card, "Confirmed")
    expect(last_answer(chat)).to_have_attribute("data-status", "completed")
    expect(last_answer(chat).locator(".message__text")).to_have_text("Your order A-1001 is cancelled.")
    [seen] = shop.requests
    assert (seen.method, seen.path, seen.body["customer_id"]) == ("POST", "/orders/A-1001/cancel", "user-42")


# --- in Brazilian Portuguese -----------------------------------------------------------------------


def portuguese(text: str) -> str:
    """The page's catalog's translation of one of its strings, if it has one."""
    folder = ROOT / "locale"
    with open(folder / "pt_BR" / "LC_MESSAGES" / "djangojs.mo", "rb") as mo:
        return gettext.GNUTranslations(mo).gettext(text)


def test_the_card_speaks_portuguese(app, provider, shop, browser):
    words = {text: portuguese(text) for text in ("Confirm", "Cancel", "Confirmed")}
    if any(text == translated for text, translated in words.items()):
        pytest.skip("the card's words are not translated yet (locale/pt_BR/LC_MESSAGES/djangojs.po)")
    context = browser.new_context(locale="pt-BR")
    try:
        page = context.new_page()
        provider.queue(tool_round([CANCEL]), answer("Pedido cancelado."))
        page.goto(app.url + "/")
        expect(page.locator("html")).to_have_attribute("lang", "pt-br")
        page.evaluate("token => KookeeChat.identify(token)", token_for("user-42", "Ana"))
        expect(page.locator("#chat[data-identified='true']")).to_have_count(1)
        expect(page.locator("#send")).to_be_enabled()
        page.locator("#text").fill("Cancele meu pedido A-1001")
        page.locator("#text").press("Enter")
        card = card_of(page)
        expect(card.get_by_role("button", name=words["Cancel"], exact=True)).to_be_enabled()
        card.get_by_role("button", name=words["Confirm"], exact=True).click()
        expect(card.locator(".message__action-status")).to_have_text(words["Confirmed"])
        expect(page.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
        assert [seen.path for seen in shop.requests] == ["/orders/A-1001/cancel"]
    finally:
        context.close()
