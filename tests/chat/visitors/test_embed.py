"""The embeddable widget: visitors known by a signed token instead of a
cookie, the /embed/ page and who may frame it, the `history` frame, and the
KOOKEE_EMBED_ORIGINS setting."""

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core import signing
from django.test import AsyncClient
from django.utils import timezone

from chat.engine import history
from chat.engine.consumers import CLOSE_REFUSED
from chat.models import Conversation, Turn
from chat.visitors import access, embed
from chat.visitors.identity import hash_key
from helpcenter.models import Article
from kookee.asgi import application
from tests.chat.chat_client import HOST, ORIGIN, ChatClient, new_session_key
from tests.provider import WaitFor, answer, finish, text, usage

ROOT = Path(__file__).resolve().parent.parent.parent.parent
TOKEN_ATTRIBUTE = re.compile(r'data-token="([^"]*)"')
SALT = "kookee.widget"


def signed_at(value: str, seconds_ago: float) -> str:
    """A token for value, signed with the widget's key and salt, as if
    seconds_ago seconds ago."""

    class Then(signing.TimestampSigner):
        def timestamp(self):
            return signing.b62_encode(int(time.time() - seconds_ago))

    return Then(salt=SALT).sign(value)


async def connect_with_token(token: str, session_key: str | None = None, origin: bytes = ORIGIN) -> ChatClient:
    headers = [(b"origin", origin), (b"host", HOST)]
    if session_key:
        headers.append((b"cookie", f"sessionid={session_key}".encode()))
    path = f"/ws/chat/?token={quote(token, safe='')}"
    client = ChatClient(WebsocketCommunicator(application, path, headers=headers))
    client.connected, client.close_code = await client.communicator.connect()
    return client


async def history_frame(client: ChatClient) -> list[dict]:
    await client.send({"type": "history"})
    return (await client.receive_until("history"))["turns"]


def directives(policy: str) -> dict[str, str]:
    parsed = {}
    for directive in policy.split(";"):
        name, _, value = directive.strip().partition(" ")
        assert name not in parsed, f"{name} appears twice"
        parsed[name] = value
    return parsed


# --- tokens -------------------------------------------------------------------------------------


def test_a_token_carries_a_widget_visitor_key():
    token = embed.new_token()
    key = embed.visitor_key(token)
    assert key is not None
    assert key.startswith("w-")
    assert embed.visitor_key(token) == key  # stable


def test_every_token_is_a_new_visitor():
    keys = {embed.visitor_key(embed.new_token()) for _ in range(20)}
    assert len(keys) == 20
    assert None not in keys


def test_a_token_is_safe_in_a_query_string_and_an_attribute():
    token = embed.new_token()
    assert re.fullmatch(r"[A-Za-z0-9:_-]+", token)


def test_a_token_is_fresh_for_the_idle_period(settings):
    settings.KOOKEE_WIDGET_IDLE_DAYS = 1
    key = "w-" + "a" * 32
    assert embed.is_fresh(signed_at(key, 86400 - 60))
    assert not embed.is_fresh(signed_at(key, 86400 + 60))
    # An old token still names its visitor: whether it is good is the
    # conversation's business (used lately or not).
    assert embed.visitor_key(signed_at(key, 86400 + 60)) == key


def test_the_idle_period_is_read_when_the_token_is_checked(settings):
    token = embed.new_token()
    assert embed.is_fresh(token)
    settings.KOOKEE_WIDGET_IDLE_DAYS = -1
    assert not embed.is_fresh(token)


@pytest.mark.django_db
def test_an_old_token_is_good_while_its_conversation_is_in_use(settings):
    settings.KOOKEE_WIDGET_IDLE_DAYS = 1
    key = "w-" + "e" * 32
    token = signed_at(key, 3 * 86400)
    assert access.visitor_for_token(token) is None  # idle: never used since it was made
    conversation = Conversation.objects.create(visitor_hash=hash_key(key))
    assert access.visitor_for_token(token) == hash_key(key)  # used within the day
    Conversation.objects.filter(pk=conversation.pk).update(updated_at=timezone.now() - timedelta(days=2))
    assert access.visitor_for_token(token) is None  # idle for two days


@pytest.mark.django_db
def test_a_revoked_token_is_refused():
    token = embed.new_token()
    visitor = access.visitor_for_token(token)
    assert visitor == hash_key(embed.visitor_key(token))
    access.forget_visitor(visitor)
    assert access.visitor_for_token(token) is None


def forged_tokens() -> list[tuple[str, str]]:
    genuine = embed.new_token()
    value, timestamp, signature = genuine.rsplit(":", 2)
    other_key = "w-" + "c" * 32
    flipped = signature[:-1] + ("A" if signature[-1] != "A" else "B")
    return [
        ("another value, same signature", f"{other_key}:{timestamp}:{signature}"),
        ("another timestamp, same signature", f"{value}:{signing.b62_encode(int(time.time()) + 1000)}:{signature}"),
        ("a changed signature", f"{value}:{timestamp}:{flipped}"),
        ("no signature", f"{value}:{timestamp}"),
        ("the bare key", value),
        ("another secret", signing.TimestampSigner(key="not-our-secret", salt=SALT).sign(other_key)),
        ("another salt", signing.TimestampSigner(salt="django.core.signing").sign(other_key)),
        ("without the widget prefix", signing.TimestampSigner(salt=SALT).sign("c" * 32)),
        ("empty", ""),
        ("junk", "w-:::"),
        ("not ascii", "w-é:é:é"),
    ]


@pytest.mark.parametrize(("case", "token"), forged_tokens(), ids=[case for case, _ in forged_tokens()])
def test_forged_tokens_carry_no_visitor(case, token):
    assert embed.visitor_key(token) is None


@pytest.mark.django_db
def test_a_session_key_is_not_a_token():
    session = SessionStore()
    session.create()
    assert embed.visitor_key(session.session_key) is None


# --- frame-ancestors -------------------------------------------------------------------------------


def test_frame_ancestors_is_self_and_the_configured_origins(settings):
    settings.KOOKEE_EMBED_ORIGINS = []
    assert embed.frame_ancestors() == "'self'"
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com", "https://*.customer.test:8443"]
    assert embed.frame_ancestors() == "'self' https://www.example.com https://*.customer.test:8443"


# --- the pages' headers ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_embed_page_may_be_framed_by_the_configured_origins(client, settings):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com", "http://localhost:3000"]

    response = client.get("/embed/")

    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["frame-ancestors"] == "'self' https://www.example.com http://localhost:3000"
    assert policy["script-src"] == "'self'"
    assert "*" not in policy["connect-src"]
    assert "X-Frame-Options" not in response.headers


@pytest.mark.django_db
def test_the_embed_page_without_origins_may_be_framed_by_the_chat_only(client, settings):
    settings.KOOKEE_EMBED_ORIGINS = []

    response = client.get("/embed/")

    assert directives(response["Content-Security-Policy"])["frame-ancestors"] == "'self'"
    assert "X-Frame-Options" not in response.headers


@pytest.mark.django_db
def test_the_embed_page_sets_no_cookie_and_creates_nothing(client):
    response = client.get("/embed/")

    assert response.status_code == 200
    assert "Set-Cookie" not in response.headers
    assert not response.cookies
    assert Session.objects.count() == 0
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_the_embed_page_leaves_an_existing_session_alone(client):
    client.get("/")
    key = client.cookies["sessionid"].value

    response = client.get("/embed/")

    assert not response.cookies
    assert client.cookies["sessionid"].value == key
    assert Conversation.objects.count() == 0  # a page view stores no conversation


@pytest.mark.django_db
def test_the_embed_page_hands_out_a_fresh_valid_token(client):
    tokens = [TOKEN_ATTRIBUTE.findall(client.get("/embed/").content.decode()) for _ in range(2)]
    assert [len(found) for found in tokens] == [1, 1]
    (first,), (second,) = tokens
    assert first != second
    assert embed.visitor_key(first) and embed.visitor_key(second)
    assert embed.visitor_key(first) != embed.visitor_key(second)


@pytest.mark.django_db
def test_the_chat_page_may_not_be_framed(client, settings):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]

    response = client.get("/")

    assert response.status_code == 200
    policy = directives(response["Content-Security-Policy"])
    assert policy["frame-ancestors"] == "'none'"
    assert policy["script-src"] == "'self'"
    assert response["X-Frame-Options"] == "DENY"
    assert "sessionid" in response.cookies  # the chat page still establishes the session
    assert "data-token" not in response.content.decode()


@pytest.mark.django_db
def test_help_articles_may_not_be_framed(client, settings):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    Article.objects.create(title="Installing the widget", slug="install-widget", body="Paste it.")

    response = client.get("/help/install-widget/")

    assert response.status_code == 200
    assert directives(response["Content-Security-Policy"])["frame-ancestors"] == "'none'"
    assert response["X-Frame-Options"] == "DENY"


# --- the WebSocket with a token --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_token_from_the_embed_page_opens_the_chat(use_provider):
    page = await AsyncClient().get("/embed/")
    [token] = TOKEN_ATTRIBUTE.findall(page.content.decode())
    chat = await connect_with_token(token)
    try:
        assert chat.connected
        assert await history_frame(chat) == []
        use_provider.queue(answer("Hello from the widget."))
        turn_id = await chat.ask("hi")
        ended = await chat.finish(turn_id)
        assert ended["status"] == "completed"
    finally:
        await chat.close()

    conversation = await database_sync_to_async(lambda: Turn.objects.get(pk=turn_id).conversation)()
    assert conversation.visitor_hash == hash_key(embed.visitor_key(token))
    assert not await database_sync_to_async(Session.objects.exists)()


@pytest.mark.django_db(transaction=True)
async def test_two_connections_with_one_token_share_the_conversation(use_provider):
    token = embed.new_token()
    first = await connect_with_token(token)
    try:
        use_provider.queue(answer("Order 4242 ships Monday."), answer("On Monday."))
        turn_id = await first.ask("Where is order 4242?")
        await first.finish(turn_id)
    finally:
        await first.close()

    # A reload, or a second tab of the same site: the same token.
    again = await connect_with_token(token)
    also = await connect_with_token(token)
    try:
        assert again.connected and also.connected
        [entry] = await history_frame(again)
        assert (entry["turn_id"], entry["user_text"], entry["assistant_text"], entry["status"]) == (
            turn_id,
            "Where is order 4242?",
            "Order 4242 ships Monday.",
            "completed",
        )
        assert await history_frame(also) == [entry]

        # The conversation goes on, with its history sent to the model.
        second = await also.ask("When?")
        await also.finish(second)
        messages = use_provider.requests[1].body["messages"]
        assert [m["content"] for m in messages[1:]] == ["Where is order 4242?", "Order 4242 ships Monday.", "When?"]
        assert [t["turn_id"] for t in await history_frame(again)] == [turn_id, second]
    finally:
        await again.close()
        await also.close()


@pytest.mark.django_db(transaction=True)
async def test_different_tokens_are_different_visitors(use_provider):
    a = await connect_with_token(embed.new_token())
    b = await connect_with_token(embed.new_token())
    try:
        use_provider.queue(answer("Order 4242 ships Monday."), answer("Hello, B."))
        a_turn = await a.ask("Where is order 4242?")
        await a.finish(a_turn)
        b_turn = await b.ask("hi")
        await b.finish(b_turn)

        messages = use_provider.requests[1].body["messages"]
        assert [(m["role"], m["content"]) for m in messages[1:]] == [("user", "hi")]
        assert [t["turn_id"] for t in await history_frame(a)] == [a_turn]
        assert [t["turn_id"] for t in await history_frame(b)] == [b_turn]
        assert not any(f.get("turn_id") == a_turn for f in b.frames)
    finally:
        await a.close()
        await b.close()


@pytest.mark.django_db(transaction=True)
async def test_token_visitors_and_cookie_visitors_are_kept_apart(use_provider):
    page = AsyncClient()
    await page.get("/")
    cookie_key = page.cookies["sessionid"].value
    token = embed.new_token()

    by_cookie = await ChatClient.connect(cookie_key)
    # The token wins over a cookie sent along with it.
    by_token = await connect_with_token(token, session_key=cookie_key)
    try:
        use_provider.queue(answer("For the page."), answer("For the widget."))
        page_turn = await by_cookie.ask("from the page")
        await by_cookie.finish(page_turn)
        widget_turn = await by_token.ask("from the widget")
        await by_token.finish(widget_turn)

        assert [t["turn_id"] for t in await history_frame(by_cookie)] == [page_turn]
        assert [t["turn_id"] for t in await history_frame(by_token)] == [widget_turn]
        messages = use_provider.requests[1].body["messages"]
        assert [m["content"] for m in messages[1:]] == ["from the widget"]
    finally:
        await by_cookie.close()
        await by_token.close()

    page_view = (await page.get("/")).content.decode()
    assert "For the page." in page_view
    assert "For the widget." not in page_view

    # A widget visitor's key is no session key: as a cookie it opens nothing.
    as_cookie = await ChatClient.connect(embed.visitor_key(token))
    assert not as_cookie.connected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", ["forged", "expired", "unprefixed", "junk"])
async def test_a_bad_token_is_refused(case, settings):
    key = "w-" + "d" * 32
    token = {
        "forged": signing.TimestampSigner(key="not-our-secret", salt=SALT).sign(key),
        "expired": signed_at(key, settings.KOOKEE_WIDGET_IDLE_DAYS * 86400 + 60),
        "unprefixed": signing.TimestampSigner(salt=SALT).sign("d" * 32),
        "junk": "not a token",
    }[case]
    client = await connect_with_token(token)
    try:
        assert await client.refusal() == CLOSE_REFUSED
    finally:
        await client.close()
    assert await database_sync_to_async(Conversation.objects.count)() == 0


@pytest.mark.django_db(transaction=True)
async def test_a_session_key_as_the_token_is_refused_even_with_its_cookie():
    key = await new_session_key()
    alone = await connect_with_token(key)
    with_cookie = await connect_with_token(key, session_key=key)
    try:
        assert await alone.refusal() == CLOSE_REFUSED
        assert await with_cookie.refusal() == CLOSE_REFUSED
    finally:
        await alone.close()
        await with_cookie.close()


@pytest.mark.django_db(transaction=True)
async def test_a_token_from_a_foreign_origin_is_refused():
    client = await connect_with_token(embed.new_token(), origin=b"https://evil.example")
    try:
        assert not client.connected
    finally:
        await client.close()
    assert await database_sync_to_async(Conversation.objects.count)() == 0


@pytest.mark.django_db(transaction=True)
async def test_token_visitors_have_the_per_visitor_turn_limit(use_provider, settings):
    settings.KOOKEE_TURNS_PER_MINUTE = 1
    token = embed.new_token()
    first = await connect_with_token(token)
    second = await connect_with_token(token)
    other = await connect_with_token(embed.new_token())
    try:
        use_provider.queue(answer("One."), answer("Another visitor."))
        turn_id = await first.ask("one")
        await first.finish(turn_id)
        await second.finish(turn_id)  # the visitor's other tab followed it
        await second.send({"type": "message", "text": "two"})
        assert (await second.receive())["code"] == "rate_limited"
        assert (await other.finish(await other.ask("hi")))["status"] == "completed"
    finally:
        for client in (first, second, other):
            await client.close()


# --- the history frame -----------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_the_history_frame_for_a_cookie_visitor(use_provider):
    chat = await ChatClient.connect()
    try:
        assert await history_frame(chat) == []
        use_provider.queue(answer("Hello!"), [text("Partial"), {"error": {"message": "overloaded"}}])
        first = await chat.ask("hi")
        await chat.finish(first)
        second = await chat.ask("and?")
        await chat.finish(second)

        turns = await history_frame(chat)
        assert [(t["turn_id"], t["user_text"], t["assistant_text"], t["status"]) for t in turns] == [
            (first, "hi", "Hello!", "completed"),
            (second, "and?", "Partial", "failed"),
        ]
        assert all(t["sources"] == [] for t in turns)
        conversation_id = await database_sync_to_async(lambda: Turn.objects.get(pk=first).conversation_id)()
        expected = {"turns": turns, "messages": [], "more": False, "handoff": None}
        assert expected == await database_sync_to_async(history.history_of)(conversation_id)
        # Extra fields are ignored, as for other frames; nothing else is sent.
        await chat.send({"type": "history", "turn_id": first, "conversation_id": 1})
        assert (await chat.receive())["turns"] == turns
        assert await chat.communicator.receive_nothing(timeout=0.2)
    finally:
        await chat.close()


@pytest.mark.django_db(transaction=True)
async def test_the_history_frame_is_not_busy_while_a_turn_runs(use_provider):
    chat = await ChatClient.connect()
    try:
        release = asyncio.Event()
        use_provider.queue([text("Working"), WaitFor(release), text(" done."), finish("stop"), usage(3, 2)])
        turn_id = await chat.ask("first")
        await chat.receive_until("delta", turn_id=turn_id)

        turns = await history_frame(chat)
        assert [(t["turn_id"], t["user_text"], t["status"]) for t in turns] == [(turn_id, "first", "streaming")]
        assert "busy" not in [f.get("code") for f in chat.frames]

        release.set()
        ended = await chat.finish(turn_id)
        assert ended["status"] == "completed"
        [entry] = await history_frame(chat)
        assert (entry["status"], entry["assistant_text"]) == ("completed", "Working done.")
        assert not any(f["type"] == "error" for f in chat.frames)
    finally:
        await chat.close()


@pytest.mark.django_db(transaction=True)
async def test_history_frames_count_against_the_frame_budget(settings):
    settings.KOOKEE_FRAME_BURST = 3
    settings.KOOKEE_FRAMES_PER_SECOND = 0.001
    chat = await ChatClient.connect()
    try:
        for _ in range(3):
            assert await history_frame(chat) == []
        await chat.send({"type": "history"})
        assert (await chat.receive())["code"] == "flood"
    finally:
        await chat.close()


# --- KOOKEE_EMBED_ORIGINS --------------------------------------------------------------------------


def embed_origins(value: str) -> subprocess.CompletedProcess:
    """Imports the settings in a fresh interpreter with KOOKEE_EMBED_ORIGINS
    set, printing what they made of it. (A .env file beside manage.py would
    add its own: tests assume none.)"""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "KOOKEE_"))}
    environment.update(DJANGO_SETTINGS_MODULE="kookee.settings", DJANGO_DEBUG="true", KOOKEE_EMBED_ORIGINS=value)
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import json; from django.conf import settings; print(json.dumps(settings.KOOKEE_EMBED_ORIGINS))",
        ],
        env=environment,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("value", "origins"),
    [
        ("", []),
        ("https://www.example.com", ["https://www.example.com"]),
        (
            "https://www.example.com,http://localhost:3000,https://*.customer.test",
            ["https://www.example.com", "http://localhost:3000", "https://*.customer.test"],
        ),
        ("https://a.example.com, https://b.example.com", ["https://a.example.com", "https://b.example.com"]),
    ],
)
def test_good_embed_origins_are_taken(value, origins):
    result = embed_origins(value)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == origins


@pytest.mark.parametrize(
    "value",
    [
        "https://www.example.com; script-src *",
        "https://www.example.com 'unsafe-inline'",
        "https://www.example.com/",
        "https://www.example.com/path",
        "www.example.com",
        "*",
        "https://*",
        "'self'",
        "'none'",
        "javascript:alert(1)",
        "data:",
        "ftp://files.example.com",
        "https://user@www.example.com",
        "https://www.example.com:port",
        "https://ok.example.com,https://bad.example.com;",
    ],
)
def test_a_bad_embed_origin_stops_the_settings(value):
    result = embed_origins(value)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert "KOOKEE_EMBED_ORIGINS" in result.stderr


# --- the page a widget visitor chats from ------------------------------------------------------


@pytest.mark.parametrize(
    ("reported", "kept"),
    [
        ("https://www.example.com/pricing?plan=growth&email=a@b.co#faq", "https://www.example.com/pricing"),
        ("https://www.example.com", "https://www.example.com/"),
        ("https://shop.example.org/cart", "https://shop.example.org/cart"),  # *.example.org
        ("https://user:secret@www.example.com/account", "https://www.example.com/account"),
        ("https://evil.example.net/phish", ""),  # not allowed to embed the widget
        ("https://example.org/", ""),  # the wildcard names subdomains only
        ("javascript:alert(1)", ""),
        ("ftp://www.example.com/", ""),
        ("not a url", ""),
        ("https://www.example.com:99999/", ""),  # a port that cannot be
        ("http://localhost/embedded-here", "http://localhost/embedded-here"),  # our own host (ALLOWED_HOSTS)
    ],
)
def test_only_a_site_allowed_to_embed_is_kept_as_the_source_page(settings, reported, kept):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com", "https://*.example.org"]
    assert embed.source_page(reported) == kept


def test_a_source_page_is_cut_to_its_column(settings):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    assert len(embed.source_page("https://www.example.com/" + "a" * 1000)) == embed.SOURCE_PAGE_CHARS


@pytest.mark.django_db(transaction=True)
async def test_a_widget_conversation_keeps_the_page_it_came_from(settings, use_provider):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    use_provider.queue(answer("Hello!"))
    page = quote("https://www.example.com/pricing?coupon=SECRET", safe="")
    path = f"/ws/chat/?token={quote(embed.new_token(), safe='')}&page={page}"
    client = ChatClient(WebsocketCommunicator(application, path, headers=[(b"origin", ORIGIN), (b"host", HOST)]))
    client.connected, _ = await client.communicator.connect()
    try:
        await client.finish(await client.ask("hi"))
    finally:
        await client.close()
    sources = await database_sync_to_async(lambda: list(Conversation.objects.values_list("source_url", flat=True)))()
    assert sources == ["https://www.example.com/pricing"]


@pytest.mark.django_db(transaction=True)
async def test_a_chat_page_conversation_has_no_source_page_whatever_the_socket_says(use_provider):
    use_provider.queue(answer("Hello!"))
    cookie = f"sessionid={await new_session_key()}".encode()
    path = "/ws/chat/?page=" + quote("http://localhost/pretend", safe="")
    client = ChatClient(
        WebsocketCommunicator(application, path, headers=[(b"origin", ORIGIN), (b"host", HOST), (b"cookie", cookie)])
    )
    client.connected, _ = await client.communicator.connect()
    try:
        await client.finish(await client.ask("hi"))
    finally:
        await client.close()
    # Only the widget's frame reports a page: the chat page is the source.
    assert await database_sync_to_async(lambda: Conversation.objects.get().source_url)() == ""
