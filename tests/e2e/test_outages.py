"""Sockets that close without the visitor being refused, in Chromium: the
server goes away and comes back, the server closes an idle socket, a visitor
opens too many, the server is saturated. None of them costs the visitor
their conversation."""

from __future__ import annotations

import os
import signal

from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App, chat
from tests.e2e.test_reconnect import SLOW
from tests.e2e.test_widget import customer_sites, open_widget, stored_token, widget_server  # noqa: F401 (fixture)
from tests.servers import daphne


def test_the_widget_keeps_its_conversation_while_the_server_is_down(tmp_path, customer_sites, page):  # noqa: F811
    with widget_server(tmp_path, customer_sites[0]) as app:
        page.goto(customer_sites[0])
        widget = open_widget(page)
        chat(widget, "before the outage")
        token = stored_token(page)
        app.process.kill()  # no goodbye: the socket just drops, and nothing answers
        app.process.wait()
        expect(widget.locator("#connection")).to_have_text("Connection lost. Reconnecting…")
        page.wait_for_timeout(3000)  # several failed attempts
        expect(widget.locator("#send")).to_be_disabled()

    port = int(app.url.rsplit(":", 1)[1])
    with daphne(tmp_path, port=port, KOOKEE_EMBED_ORIGINS=customer_sites[0], **OFFLINE):
        expect(widget.locator("#send")).to_be_enabled(timeout=SLOW)
        expect(widget.locator("#connection")).to_have_text("")
        assert stored_token(page) == token  # a failure is no refusal: same visitor
        expect(widget.locator(".message--user .message__text")).to_have_text(["before the outage"])
        chat(widget, "after the outage")
        conversation, _ = app.conversation_of("before the outage")
        assert app.conversation_of("after the outage")[0] == conversation

        page.reload()
        widget = open_widget(page)
        expect(widget.locator(".message--user .message__text")).to_have_text(["before the outage", "after the outage"])
        assert stored_token(page) == token


def test_an_idle_socket_closes_quietly_and_reopens_when_the_visitor_is_back(tmp_path, page):
    sockets = []
    page.on("websocket", lambda socket: sockets.append(socket))
    with daphne(tmp_path, KOOKEE_IDLE_SOCKET_SECONDS="1", **OFFLINE) as (address, database, process):
        app = App(f"http://{address}", database, process)
        page.goto(app.url)
        chat_root = page.locator("#chat")
        expect(chat_root).to_have_attribute("data-connection", "idle")  # closed by the server after a second
        expect(page.locator("#connection")).to_have_text("")  # and nothing alarming said
        expect(page.locator("#send")).to_be_enabled()  # sending is what brings it back
        assert len(sockets) == 1

        # Sending reopens the socket, and the message goes once it is open.
        chat(page, "are you there?")
        assert len(sockets) == 2
        expect(chat_root).to_have_attribute("data-connection", "idle")

        # So does focus (or a key, a click, the tab shown again)...
        page.locator("#log").focus()
        expect(chat_root).to_have_attribute("data-connection", "open")
        assert len(sockets) == 3
        chat(page, "still here")
        # ...and nothing else: no reconnecting in a loop while the visitor is away.
        expect(chat_root).to_have_attribute("data-connection", "idle")
        page.wait_for_timeout(4000)
        assert len(sockets) == 3
        expect(page.locator(".message--user .message__text")).to_have_text(["are you there?", "still here"])


def test_too_many_chat_windows_are_refused_until_one_closes(tmp_path, context, page):
    with daphne(tmp_path, KOOKEE_SOCKETS_PER_VISITOR="1", **OFFLINE) as (address, database, process):
        app = App(f"http://{address}", database, process)
        page.goto(app.url)
        expect(page.locator("#send")).to_be_enabled()
        second = context.new_page()  # the same visitor (cookie), a second window
        second.goto(app.url)
        expect(second.locator("#connection")).to_have_text(
            "Too many chat windows are open. Close one, or come back to this one later."
        )
        page.close()
        second.locator("#text").focus()  # the visitor comes back to it: it tries again
        expect(second.locator("#connection")).to_have_text("", timeout=SLOW)
        chat(second, "one window now")


def test_a_flood_closes_the_chat_until_a_reload(tmp_path, page):
    sockets = []
    page.on("websocket", lambda socket: sockets.append(socket))
    # Two frames, then no more: the history asked on connect, and one message.
    env = {"KOOKEE_FRAME_BURST": "2", "KOOKEE_FRAMES_PER_SECOND": "0.01", **OFFLINE}
    with daphne(tmp_path, **env) as (address, _, _):
        page.goto(f"http://{address}")
        chat(page, "one")
        page.fill("#text", "two")
        page.press("#text", "Enter")
        expect(page.locator("#connection")).to_have_text(
            "Disconnected: too many messages at once. Reload the page to continue."
        )
        expect(page.locator("#send")).to_be_disabled()
        page.locator("#log").focus()  # the visitor's moves do not reconnect it
        page.wait_for_timeout(1000)
        assert len(sockets) == 1


def test_a_saturated_server_refuses_a_new_socket_and_the_page_tries_again(tmp_path, page):
    sockets = []
    page.on("websocket", lambda socket: sockets.append(socket))
    env = {"KOOKEE_IDLE_SOCKET_SECONDS": "1", "KOOKEE_SATURATION_MS": "200", **OFFLINE}
    with daphne(tmp_path, **env) as (address, _, process):
        page.goto(f"http://{address}")
        chat(page, "before the rush")
        expect(page.locator("#chat")).to_have_attribute("data-connection", "idle")
        # The server falls far behind, as a saturated one does, while the
        # visitor comes back and the page opens a socket.
        os.kill(process.pid, signal.SIGSTOP)
        try:
            with page.expect_websocket(timeout=SLOW):
                page.locator("#log").focus()
            page.wait_for_timeout(600)
        finally:
            os.kill(process.pid, signal.SIGCONT)
        # Refused at once (4503), said, and tried again a couple of seconds on.
        expect(page.locator("#connection")).to_have_text(
            "The assistant is very busy right now. Trying again in a moment…"
        )
        chat(page, "after the rush")
        assert len(sockets) >= 3
        expect(page.locator(".message--user .message__text")).to_have_text(["before the rush", "after the rush"])
