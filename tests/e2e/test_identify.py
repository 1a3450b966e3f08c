"""A verified visitor: the customer's page says who is chatting
(KookeeChat.identify, with a token its backend signed), in the widget on
the customer's site and on the chat page; the widget's frame takes it only
from its parent, on a site allowed to frame the chat."""

from __future__ import annotations

import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import jwt
import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App
from tests.e2e.conftest import chat as ask_and_wait
from tests.servers import daphne, free_port
from tests.servers import sites as local_sites

pytestmark = pytest.mark.slow

# The key the customer's backend and Kookee share (KOOKEE_IDENTITY_SECRET).
SECRET = "e2e-identity-secret-of-at-least-32-bytes"
FRAME = "iframe[title='Kookee help chat']"


def token_for(sub: str, name: str = "", secret: str = SECRET) -> str:
    """What the customer's backend would sign for its signed-in user."""
    return jwt.encode({"sub": sub, "name": name, "exp": int(time.time()) + 600}, secret, algorithm="HS256")


# --- the customer's sites ------------------------------------------------------------------------

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Acme store</title></head>
<body><h1>Acme store</h1>{body}</body></html>"""
WIDGET = '<script src="{kookee}/static/chat/widget.js" async></script>'


class _Pages(BaseHTTPRequestHandler):
    """Serves whatever page a test put at a path, on every site."""

    pages: dict[str, str] = {}

    def do_GET(self) -> None:
        page = _Pages.pages.get(self.path)
        body = PAGE.format(body=page if page is not None else "").encode()
        self.send_response(200 if page is not None else 404)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def sites() -> Iterator[list[str]]:
    """Three sites' origins: the first two may embed the widget, the third may not."""
    with local_sites(_Pages, 3) as origins:
        yield origins


@pytest.fixture(scope="module")
def kookee(tmp_path_factory, sites) -> Iterator[App]:
    """The app on localhost (another site than the customers'), which knows the customers' key."""
    port = free_port()
    env = {"KOOKEE_EMBED_ORIGINS": f"{sites[0]},{sites[1]}", "KOOKEE_IDENTITY_SECRET": SECRET, **OFFLINE}
    with daphne(tmp_path_factory.mktemp("identify"), port=port, **env) as (_, database, process):
        yield App(f"http://localhost:{port}", database, process)


def serve(path: str, body: str) -> str:
    _Pages.pages[path] = body
    return path


def open_widget(page):
    page.get_by_role("button", name="Help", exact=True).click()
    chat = page.frame_locator(FRAME)
    expect(chat.locator("#send")).to_be_enabled()
    return chat


def embedded_frame(page, kookee: App):
    [frame] = [f for f in page.frames if f.url.startswith(f"{kookee.url}/embed/")]
    return frame


def verified(kookee: App, question: str) -> tuple[str, str]:
    """Whom the conversation holding this question belongs to: (verified_id, verified_name)."""
    [row] = kookee.rows(
        "select c.verified_id, c.verified_name from chat_turn t join chat_conversation c"
        " on c.id = t.conversation_id where t.user_text = ?",
        question,
    )
    return row


def identified(root):
    return root.locator("#chat[data-identified='true']")


# --- in the widget -------------------------------------------------------------------------------


def test_the_host_page_identifies_its_visitor_before_the_widget_loads(kookee, sites, page):
    token = token_for("user-42", "Ada Lovelace")
    # The page queues its call before the async script has run (the
    # documented stub), and the frame, made on the first open, gets it.
    stub = (
        "<script>window.KookeeChat = window.KookeeChat"
        ' || { q: [], identify(t) { this.q.push(["identify", t]); } };'
        f' KookeeChat.identify("{token}");</script>'
    )
    page.goto(sites[0] + serve("/queued", stub + WIDGET.format(kookee=kookee.url)))
    chat = open_widget(page)
    expect(identified(chat)).to_have_count(1)
    ask_and_wait(chat, "who am I, queued")
    assert verified(kookee, "who am I, queued") == ("user-42", "Ada Lovelace")

    # The page's API is the real one now, and the widget's guard still set.
    assert page.evaluate("typeof KookeeChat.identify === 'function' && KookeeChat.q.length === 0")
    assert page.evaluate("window.__kookeeChat") is True
    # The token is a credential: in no address and no storage, on either side.
    frame = embedded_frame(page, kookee)
    assert token not in frame.url and token not in page.url
    assert token not in page.evaluate("JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    stored = (
        "() => { try { return JSON.stringify(localStorage) + JSON.stringify(sessionStorage); } catch { return ''; } }"
    )
    assert token not in frame.evaluate(stored)  # third-party storage: blocked here, but were it not


def test_an_identity_given_after_the_frame_opened_survives_its_reload(kookee, sites, page):
    page.goto(sites[0] + serve("/later", WIDGET.format(kookee=kookee.url)))
    chat = open_widget(page)
    expect(identified(chat)).to_have_count(0)
    page.evaluate("token => KookeeChat.identify(token)", token_for("user-7", "Grace"))
    expect(identified(chat)).to_have_count(1)

    # A reload of the frame forgets everything in memory: the widget's
    # script hands the identity over again.
    frame = embedded_frame(page, kookee)
    frame.evaluate("document.documentElement.dataset.before = 'reload'; location.reload()")
    expect(chat.locator("html[data-before]")).to_have_count(0)
    expect(chat.locator("#send")).to_be_enabled()
    expect(identified(chat)).to_have_count(1)
    ask_and_wait(chat, "who am I, after a reload")
    assert verified(kookee, "who am I, after a reload") == ("user-7", "Grace")


def test_signing_out_leaves_the_next_person_on_the_browser_a_conversation_of_their_own(kookee, sites, page):
    page.goto(sites[0] + serve("/sign-out", WIDGET.format(kookee=kookee.url)))
    chat = open_widget(page)
    page.evaluate("token => KookeeChat.identify(token)", token_for("user-9", "Hedy"))
    expect(identified(chat)).to_have_count(1)
    ask_and_wait(chat, "my order, before signing out")
    assert verified(kookee, "my order, before signing out") == ("user-9", "Hedy")
    kept = page.evaluate("localStorage.getItem('kookee.token')")

    page.evaluate("KookeeChat.signOut()")

    # The chat starts over: Hedy's answer leaves the log, the stored key is another one.
    expect(chat.get_by_text("my order, before signing out")).to_have_count(0)
    expect(chat.locator("#send")).to_be_enabled()
    expect(identified(chat)).to_have_count(0)
    assert page.evaluate("localStorage.getItem('kookee.token')") != kept
    ask_and_wait(chat, "who am I, after signing out")
    assert verified(kookee, "who am I, after signing out") == ("", "")
    # Hedy's conversation is kept for Support, and reachable by no visitor key.
    assert kookee.rows("select visitor_hash from chat_conversation where verified_id = 'user-9'") == [("",)]


def test_a_token_signed_with_another_key_leaves_the_chat_anonymous(kookee, sites, page):
    page.goto(sites[0] + serve("/forged", WIDGET.format(kookee=kookee.url)))
    chat = open_widget(page)
    forged = token_for("user-1", secret="not-the-customers-key-at-all-32b")
    with page.expect_console_message(lambda message: "bad_identity" in message.text) as warning:
        page.evaluate("token => KookeeChat.identify(token)", forged)
    assert warning.value.type == "warning"  # for the site's developers
    expect(chat.locator("#connection")).to_have_text("")  # nothing alarming on screen
    ask_and_wait(chat, "who am I, forged")
    assert verified(kookee, "who am I, forged") == ("", "")


# A frame beside the widget's: it posts an identity to every window it can reach.
AD = """<p>An advertisement.</p><script>
addEventListener("message", (event) => {
  if (event.data !== "post") return;
  const token = new URLSearchParams(location.search).get("token");
  const reached = [];
  try {
    // Same origin as the host page: its DOM, shadow root and all.
    reached.push(parent.document.querySelector("#kookee-chat").shadowRoot.querySelector("iframe").contentWindow);
  } catch {
    // Another origin: only the windows any page can name.
    for (let i = 0; i < parent.frames.length; i++) if (parent.frames[i] !== window) reached.push(parent.frames[i]);
  }
  for (const other of reached) other.postMessage({ type: "kookee:identify", token }, "*");
  event.source.postMessage(reached.length, "*");
});
</script>"""


def test_only_the_frames_parent_may_identify_the_visitor(kookee, sites, page):
    """Any window holding a reference to the widget's frame can post to it:
    a frame beside it, of the host page's own (allowed) origin, is not heard
    for not being its parent; one of a site not allowed cannot even reach it
    (a frame in a shadow root is not among window.frames)."""
    forged = token_for("mallory", "Mallory")
    serve(f"/ad?token={forged}", AD)
    ads = "".join(f'<iframe title="ad {n}" src="{sites[n]}/ad?token={forged}"></iframe>' for n in (0, 2))
    page.goto(sites[0] + serve("/with-ads", ads + WIDGET.format(kookee=kookee.url)))
    chat = open_widget(page)
    reached = page.evaluate(
        """() => Promise.all([...document.querySelectorAll("iframe")].map((ad) => new Promise((done) => {
             addEventListener("message", (event) => event.source === ad.contentWindow && done(event.data));
             ad.contentWindow.postMessage("post", "*");
           })))"""
    )
    assert reached == [1, 1]  # the widget's frame; the other ad
    page.wait_for_timeout(500)
    expect(identified(chat)).to_have_count(0)
    ask_and_wait(chat, "who am I, beside the ads")
    assert verified(kookee, "who am I, beside the ads") == ("", "")

    # The host page itself is heard: the anonymous conversation becomes its visitor's.
    page.evaluate("token => KookeeChat.identify(token)", token_for("user-9", "Hopper"))
    expect(identified(chat)).to_have_count(1)
    assert verified(kookee, "who am I, beside the ads") == ("user-9", "Hopper")
    assert kookee.rows("select count(*) from chat_conversation where verified_id = 'mallory'") == [(0,)]


def test_a_site_not_allowed_is_not_heard_even_if_it_frames_the_chat(kookee, sites, browser):
    """frame-ancestors keeps a site not listed from framing the chat at all
    (and the widget's script, told so by /embed/allowed, does not try);
    were that header lost on the way (here: stripped, and the script told
    yes), the frame still checks its parent's origin against the list the
    server gave it."""
    # A response made up by the test is "public" to Chromium: its socket to
    # localhost needs the local network permission a real one has anyway.
    context = browser.new_context(permissions=["local-network-access"])
    try:
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(error))

        def without_policy(route):
            response = route.fetch()
            headers = {k: v for k, v in response.headers.items() if k.lower() != "content-security-policy"}
            route.fulfill(response=response, headers=headers)

        page.route(f"{kookee.url}/embed/", without_policy)
        page.route(
            f"{kookee.url}/embed/allowed?*",
            lambda route: route.fulfill(json={"allowed": True}, headers={"Access-Control-Allow-Origin": "*"}),
        )
        page.goto(sites[2] + serve("/not-allowed", WIDGET.format(kookee=kookee.url)))
        chat = open_widget(page)  # framed, despite the list
        page.evaluate("token => KookeeChat.identify(token)", token_for("user-3", "Eve"))
        page.wait_for_timeout(500)
        expect(identified(chat)).to_have_count(0)
        ask_and_wait(chat, "who am I, on a site not allowed")
        assert verified(kookee, "who am I, on a site not allowed") == ("", "")
        assert errors == []
    finally:
        context.close()


# --- on the chat page ----------------------------------------------------------------------------


def test_the_chat_page_identifies_its_visitor_and_starts_afresh_for_another(kookee, page):
    page.goto(kookee.url + "/")
    expect(page.locator("#send")).to_be_enabled()
    page.evaluate("token => KookeeChat.identify(token)", token_for("alice", "Alice"))
    expect(identified(page)).to_have_count(1)
    ask_and_wait(page, "who am I, on the chat page")
    assert verified(kookee, "who am I, on the chat page") == ("alice", "Alice")

    # Someone else signs in on this browser: their conversation is not
    # Alice's. The server refuses the key (4401), the page starts afresh
    # and proves the new person again on its new socket.
    page.evaluate("token => KookeeChat.identify(token)", token_for("bob", "Bob"))
    expect(page.locator(".message")).to_have_count(0)
    expect(identified(page)).to_have_count(1)
    ask_and_wait(page, "who am I now")
    assert verified(kookee, "who am I now") == ("bob", "Bob")
    assert verified(kookee, "who am I, on the chat page") == ("alice", "Alice")
    expect(page.locator(".message--user .message__text")).to_have_text(["who am I now"])
