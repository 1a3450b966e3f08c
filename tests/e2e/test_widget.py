"""The widget on a customer's page, on another origin (another site, even:
127.0.0.1 and localhost do not share cookies), added with one script tag."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App
from tests.e2e.conftest import chat as ask_and_wait
from tests.servers import daphne, free_port, sites

HOST_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Acme store</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body style="font-family: Georgia, serif; background: #fdf6e3">
<h1>Acme store</h1><p>Our products, our prices, and a help chat in the corner.</p>
<script src="{kookee}/static/chat/widget.js" async></script>
</body></html>"""


@pytest.fixture(scope="module")
def customer_sites() -> Iterator[list[str]]:
    """Two customer sites' origins: the first may embed the widget."""
    with sites(_HostPage, 2) as origins:
        yield origins


class _HostPage(BaseHTTPRequestHandler):
    kookee = ""

    def do_GET(self) -> None:
        page = HOST_PAGE.format(kookee=_HostPage.kookee).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, *args) -> None:
        pass


@contextmanager
def widget_server(tmp_path: Path, site: str, **env: str) -> Iterator[App]:
    """The app, which `site` may embed, for the customer's pages to load the widget from."""
    port = free_port()
    with daphne(tmp_path, port=port, KOOKEE_EMBED_ORIGINS=site, **OFFLINE, **env) as (_, database, process):
        # The customer's page loads the widget from localhost: another site.
        _HostPage.kookee = f"http://localhost:{port}"
        yield App(_HostPage.kookee, database, process)


@pytest.fixture(scope="module")
def kookee(tmp_path_factory, customer_sites) -> Iterator[App]:
    with widget_server(tmp_path_factory.mktemp("widget"), customer_sites[0]) as app:
        yield app


def stored_token(page) -> str | None:
    """The widget's token, as the customer's page keeps it."""
    return page.evaluate("localStorage.getItem('kookee.token')")


def open_widget(page):
    page.get_by_role("button", name="Help", exact=True).click()
    expect(page.locator("#kookee-chat .bubble")).to_have_attribute("aria-expanded", "true")  # in a shadow root
    chat = page.frame_locator("iframe[title='Kookee help chat']")
    expect(chat.locator("#send")).to_be_enabled()
    return chat


def test_the_widget_chats_from_another_site_without_cookies(kookee, customer_sites, context, page):
    page.goto(customer_sites[0])
    chat = open_widget(page)
    chat.locator("#text").fill("hi")
    chat.locator("#text").press("Enter")
    answer = chat.locator(".message--assistant").last
    expect(answer).to_have_attribute("data-status", "completed")
    assert "Kookee" in answer.inner_text()
    assert context.cookies() == []  # neither site set one: the frame is known by its token

    # The frame's close button hides it; the bubble opens it again.
    chat.get_by_role("button", name="Close the chat").click()
    expect(page.locator("iframe[title='Kookee help chat']")).to_be_hidden()
    expect(page.get_by_role("button", name="Help", exact=True)).to_be_focused()
    expect(page.locator("#kookee-chat .bubble")).to_have_attribute("aria-expanded", "false")

    # A reload of the customer's page: the conversation is still there.
    page.reload()
    chat = open_widget(page)
    expect(chat.locator(".message--user .message__text")).to_have_text(["hi"])
    expect(chat.locator(".message--assistant").last).to_have_attribute("data-status", "completed")


def test_the_widget_keeps_each_visitor_apart(kookee, customer_sites, browser):
    contexts = [browser.new_context() for _ in range(2)]
    try:
        first, second = (c.new_page() for c in contexts)
        first.goto(customer_sites[0])
        chat = open_widget(first)
        chat.locator("#text").fill("my private question")
        chat.locator("#text").press("Enter")
        expect(chat.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
        second.goto(customer_sites[0])
        other = open_widget(second)
        expect(other.locator("#empty")).to_be_visible()
        expect(other.locator(".message")).to_have_count(0)
    finally:
        for c in contexts:
            c.close()


def test_a_site_not_allowed_shows_a_notice_not_a_broken_frame(kookee, customer_sites, page):
    warnings = []
    page.on("console", lambda message: warnings.append(message.text) if message.type == "warning" else None)
    page.goto(customer_sites[1])
    bubble = page.get_by_role("button", name="Help", exact=True)
    bubble.click()

    # No grey frame: the panel says so, in words a visitor and the site's owner can read.
    notice = page.locator("#kookee-chat .notice")  # in the shadow root
    expect(notice).to_be_visible()
    expect(notice).to_contain_text("The help chat is not available on this site.")
    expect(notice).to_contain_text("KOOKEE_EMBED_ORIGINS")
    expect(notice).to_be_focused()
    expect(bubble).to_have_attribute("aria-expanded", "true")
    assert page.locator("iframe").count() == 0
    box = notice.bounding_box()
    assert box["height"] < 300  # a notice, not a frame's height of blank panel
    # The console has the precise hint: which origin, and where to allow it.
    assert any(customer_sites[1] in w and "KOOKEE_EMBED_ORIGINS" in w for w in warnings), warnings
    results = Axe().run(page, context="#kookee-chat")  # the widget: the host page is the customer's
    # (Its report cannot print a node in a shadow root: the violations as they are.)
    violations = [(v["id"], [n["target"] for n in v["nodes"]]) for v in results.response["violations"]]
    assert results.violations_count == 0, violations

    # The bubble closes and opens it as it does the chat.
    bubble.click()
    expect(notice).to_be_hidden()
    expect(bubble).to_have_attribute("aria-expanded", "false")
    bubble.click()
    expect(notice).to_be_visible()
    assert page.locator("iframe").count() == 0
    # On a phone too: the notice does not cover the bubble, which still closes it.
    page.set_viewport_size({"width": 375, "height": 667})
    expect(bubble).to_be_visible()
    assert notice.bounding_box()["y"] + notice.bounding_box()["height"] <= bubble.bounding_box()["y"]
    bubble.click()
    expect(notice).to_be_hidden()

    # Framed anyway, the chat is still refused (frame-ancestors).
    page.evaluate(
        "src => { const f = document.createElement('iframe'); f.title = 'forced'; f.src = src;"
        " document.body.append(f); }",
        f"{kookee.url}/embed/",
    )
    page.wait_for_timeout(1000)
    [embedded] = [f for f in page.frames if f != page.main_frame]
    assert embedded.url.startswith("chrome-error://")  # refused by frame-ancestors
    assert page.frame_locator("iframe[title='forced']").locator("#text").count() == 0


def test_an_answer_is_rated_in_the_widget(kookee, customer_sites, page):
    page.goto(customer_sites[0])
    chat = open_widget(page)
    ask_and_wait(chat, "hi")
    answer = chat.locator(".message--assistant").last

    answer.get_by_role("button", name="Not helpful").click()
    answer.get_by_label("What was missing or wrong? (optional)").fill("Too vague.")
    answer.get_by_role("button", name="Send").click()

    expect(answer.locator(".message__rating-status")).to_have_text("Thanks: your comment was sent.")
    turn_id = int(answer.get_attribute("data-turn-id"))
    assert kookee.rows("select rating, comment from chat_feedback where turn_id = ?", turn_id) == [
        ("down", "Too vague.")
    ]
