"""Who a conversation belongs to, in Chromium: a link cannot slip a visitor
into someone else's conversation, starting over leaves the old one behind
for good, and a widget token that is refused is replaced, never reused."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from chat.visitors import sessions
from tests.e2e.conftest import App, chat
from tests.e2e.test_chat_page import last_answer
from tests.e2e.test_widget import (  # noqa: F401 (customer_sites: a fixture)
    _HostPage,
    customer_sites,
    open_widget,
    stored_token,
    widget_server,
)

WIDGET_IDLE_SECONDS = 3


def start_over(chat_root) -> None:
    chat_root.get_by_role("button", name="New conversation").click()
    chat_root.get_by_role("button", name="Start over").click()
    expect(chat_root.locator(".message")).to_have_count(0)
    expect(chat_root.locator("#empty")).to_be_visible()
    expect(chat_root.locator("#connection")).to_have_text("Started a new conversation.")
    expect(chat_root.locator("#send")).to_be_enabled()


@pytest.fixture(scope="module")
def widget_app(tmp_path_factory, customer_sites) -> Iterator[App]:  # noqa: F811 (fixture)
    with widget_server(tmp_path_factory.mktemp("safety"), customer_sites[0]) as app:
        yield app


@pytest.fixture
def host_page(widget_app, customer_sites, page):  # noqa: F811 (fixture)
    """The customer's page, loading the widget from widget_app."""
    _HostPage.kookee = widget_app.url
    page.goto(customer_sites[0])
    return page


def test_a_top_level_embed_link_cannot_fix_the_conversation(widget_app, host_page, browser):
    # Someone chats in the widget, then sends a victim a link with their token.
    widget = open_widget(host_page)
    chat(widget, "the attacker's question")
    token = stored_token(host_page)
    conversation, _ = widget_app.conversation_of("the attacker's question")

    victim = browser.new_context()
    try:
        page = victim.new_page()
        sockets = []
        page.on("websocket", lambda socket: sockets.append(socket.url))
        page.goto(f"{widget_app.url}/embed/#token={token}")
        expect(page.locator("#send")).to_be_enabled()
        expect(page.locator("#empty")).to_be_visible()
        expect(page.locator(".message")).to_have_count(0)  # not the attacker's conversation
        chat(page, "the victim's secret")
        assert page.evaluate("location.hash") == ""  # nor a token to pass on
    finally:
        victim.close()

    assert sockets and all(token not in url for url in sockets)  # the server never saw it
    assert widget_app.questions(conversation) == ["the attacker's question"]
    victims, _ = widget_app.conversation_of("the victim's secret")
    assert victims != conversation
    host_page.reload()
    widget = open_widget(host_page)
    expect(widget.locator(".message--user .message__text")).to_have_text(["the attacker's question"])


def test_new_conversation_in_the_widget_replaces_the_hosts_token(widget_app, host_page):
    widget = open_widget(host_page)
    chat(widget, "an old question")
    first = stored_token(host_page)
    old, old_visitor = widget_app.conversation_of("an old question")
    assert old_visitor

    start_over(widget)  # the frame's own token was the page's: a fresh one is fetched
    second = stored_token(host_page)
    assert second and second != first
    chat(widget, "a new question")
    new, _ = widget_app.conversation_of("a new question")
    assert new != old
    # The old conversation is kept (support, billing) but belongs to nobody.
    assert widget_app.questions(old) == ["an old question"]
    assert widget_app.conversation_of("an old question")[1] == ""

    # The host page hands the new token to the next frame.
    host_page.reload()
    widget = open_widget(host_page)
    expect(widget.locator(".message--user .message__text")).to_have_text(["a new question"])
    assert stored_token(host_page) == second

    start_over(widget)  # now the frame came with a token: its page's spare one is used
    third = stored_token(host_page)
    assert third not in (first, second)
    chat(widget, "a third start")
    host_page.reload()
    widget = open_widget(host_page)
    expect(widget.locator(".message--user .message__text")).to_have_text(["a third start"])


def test_an_expired_widget_token_is_replaced_and_the_chat_works(tmp_path, customer_sites, page):  # noqa: F811
    # A token unused for this long, with no conversation moving, is refused.
    idle_days = f"{WIDGET_IDLE_SECONDS / 86400:.10f}"  # django-environ does not read 3e-05
    with widget_server(tmp_path, customer_sites[0], KOOKEE_WIDGET_IDLE_DAYS=idle_days) as app:
        page.goto(customer_sites[0])
        widget = open_widget(page)
        chat(widget, "before a long pause")
        expired = stored_token(page)
        page.wait_for_timeout(WIDGET_IDLE_SECONDS * 1000 + 500)  # the time it takes to expire

        page.reload()
        widget = open_widget(page)
        expect(widget.locator("#empty")).to_be_visible()
        renewed = stored_token(page)
        assert renewed and renewed != expired
        chat(widget, "after a long pause")
        before, _ = app.conversation_of("before a long pause")
        assert app.conversation_of("after a long pause")[0] != before


def test_new_conversation_on_the_chat_page(offline_app, context, page):
    page.goto(offline_app.url)
    chat(page, "first question")
    chat(page, "second question")
    cookie = {c["name"]: c["value"] for c in context.cookies()}["sessionid"]
    old, visitor = offline_app.conversation_of("first question")

    # A confirmation first: keeping the conversation changes nothing.
    page.get_by_role("button", name="New conversation").click()
    dialog = page.get_by_role("dialog", name="Start a new conversation?")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("button", name="Keep this one")).to_be_focused()
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.get_by_role("button", name="New conversation").click()
    dialog.get_by_role("button", name="Keep this one").click()
    expect(page.locator(".message--user")).to_have_count(2)

    start_over(page)
    assert {c["name"]: c["value"] for c in context.cookies()}["sessionid"] != cookie
    expect(page.get_by_role("button", name="New conversation")).to_be_disabled()  # nothing to forget yet
    page.reload()
    expect(page.locator("#send")).to_be_enabled()
    expect(page.locator(".message")).to_have_count(0)
    # Kept for support and billing, but nobody's: the old key reaches nothing.
    assert offline_app.questions(old) == ["first question", "second question"]
    assert offline_app.conversation_of("first question")[1] == ""
    assert offline_app.rows("select count(*) from chat_revokedkey where visitor_hash = ?", visitor) == [(1,)]

    chat(page, "a fresh start")
    assert offline_app.conversation_of("a fresh start")[0] != old
    expect(last_answer(page)).to_have_attribute("data-status", "completed")


def test_an_expired_session_on_the_chat_page_is_renewed_and_the_chat_goes_on(offline_app, context, page):
    page.goto(offline_app.url)
    chat(page, "before it expired")
    cookie = {c["name"]: c["value"] for c in context.cookies()}["sessionid"]
    # The page's session outlived SESSION_COOKIE_AGE (the servers share the
    # tests' secret): its key, minted two weeks and a day ago, is no good.
    expired = sessions.mint_key(now=time.time() - 15 * 24 * 3600)
    context.add_cookies([{"name": "sessionid", "value": expired, "url": offline_app.url}])

    # The next connection's handshake is refused (HTTP 403, as for any
    # visitor without a session); the page asks GET / for a session, then
    # connects with it.
    context.set_offline(True)
    expect(page.locator("#connection")).not_to_have_text("")
    context.set_offline(False)

    chat(page, "after it expired")
    renewed = {c["name"]: c["value"] for c in context.cookies()}["sessionid"]
    assert renewed not in (cookie, expired)
    assert sessions.minted_alive(renewed)
