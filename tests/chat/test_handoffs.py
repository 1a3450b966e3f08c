"""Handoff to a person (chat/support/handoffs.py): the visitor's `handoff` frame, the
model's request_human tool (scripted, and the offline model's), one pending
request per conversation, the per-network cap, and Support told in the
background, by email and by a webhook to a real receiver on a loopback port,
with its timeout, retries and signature; never at a turn's expense. Then
what erasure and retention leave of a request."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
import socket
import time
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.core.validators import validate_email
from django.utils import timezone

from chat.engine import offline, records
from chat.engine.consumers import CLOSE_REFUSED
from chat.models import Conversation, Handoff, RevokedKey, ToolCall, Turn
from chat.roles import ensure_roles
from chat.support import erasure, handoffs
from chat.visitors import embed
from chat.visitors.identity import Visitor, hash_key
from chat.visitors.limits import LimitReached
from kookee.asgi import application
from tests.chat.chat_client import HOST, ORIGIN, ChatClient, new_session_key
from tests.provider import WaitFor, answer, text, tool_round

pytestmark = pytest.mark.django_db(transaction=True)

SUPPORT_INBOX = ["support@example.com", "lead@example.com"]
SITE = "https://chat.example.com"


@pytest.fixture(autouse=True)
def handoff_settings(settings):
    """Support is emailed at known addresses; no webhook unless a test runs a
    receiver, signed the old way too (the default) when it has a secret; a
    cap no test reaches unless it sets one."""
    settings.KOOKEE_HANDOFF_EMAILS = list(SUPPORT_INBOX)
    settings.KOOKEE_HANDOFF_WEBHOOK = ""
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = ""
    settings.KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE = True
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 100
    settings.KOOKEE_SITE_URL = SITE


@pytest.fixture(autouse=True)
async def no_notification_left_behind():
    """Every test's notifications end within the test: none runs on into the
    next one's database."""
    yield
    await notified()


async def notified(timeout: float = 10) -> None:
    """Waits for Support's notifications in flight (handoffs.tasks) to end;
    one that raised fails the test."""
    async with asyncio.timeout(timeout):
        while handoffs.tasks:
            await asyncio.gather(*handoffs.tasks)


async def eventually(check: Callable[[], bool], tries: int = 500) -> None:
    """Polls the database every 10 ms, within a bound, until check() holds."""
    for _ in range(tries):
        if await database_sync_to_async(check)():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"still not so after {tries} tries")


# --- visitors ---------------------------------------------------------------------------------


async def connect(
    address: str | None = None, session_key: str | None = None, token: str | None = None, page: str | None = None
) -> ChatClient:
    """A visitor on /ws/chat/: by cookie, or by the widget's token (with the
    page that embeds it); from a client address when given, as daphne puts
    it in the scope (WebsocketCommunicator puts none)."""
    headers = [(b"origin", ORIGIN), (b"host", HOST)]
    path = "/ws/chat/"
    if token:
        path += f"?token={quote(token, safe='')}" + (f"&page={quote(page, safe='')}" if page else "")
    else:
        key = session_key or await new_session_key()
        headers.append((b"cookie", f"sessionid={key}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    if address:
        communicator.scope["client"] = (address, 50123)
    client = ChatClient(communicator)
    client.connected, client.close_code = await communicator.connect()
    assert client.connected
    return client


@pytest.fixture
async def visitors():
    """Connects visitors on demand; disconnects them all at the end."""
    clients = []

    async def _connect(**kwargs) -> ChatClient:
        client = await connect(**kwargs)
        clients.append(client)
        return client

    yield _connect
    for client in clients:
        await client.close()


@pytest.fixture
async def chat(visitors, use_provider):
    return await visitors()


async def ask_for_a_person(chat: ChatClient, **fields) -> dict:
    await chat.send({"type": "handoff", **fields})
    frame = await chat.receive()
    assert frame["type"] == "handoff.saved", frame
    return frame


def address(length: int) -> str:
    """A valid email address of exactly `length` characters (around the 254 an address may have)."""
    room = length - len("a" * 64 + "@" + ".com") - 2  # three labels, two dots between them
    first = room // 3
    made = "a" * 64 + "@" + "b" * first + "." + "c" * first + "." + "d" * (room - 2 * first) + ".com"
    validate_email(made)
    assert len(made) == length
    return made


async def stored() -> list[Handoff]:
    return await database_sync_to_async(lambda: list(Handoff.objects.order_by("id")))()


async def get(handoff_id: int) -> Handoff:
    return await database_sync_to_async(Handoff.objects.get)(pk=handoff_id)


async def count(model) -> int:
    return await database_sync_to_async(model.objects.count)()


VISITOR = Visitor.of(hash_key("a-visitor-key"), "203.0.113.7")


# --- the webhook's receiver -------------------------------------------------------------------

HANG = "hang"  # a reply: hold the request until released, or until the client gives up


@dataclass
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float
    hung_up: bool = False  # the client gave up before any answer

    @property
    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    """A webhook receiver on a loopback port: answers each POST with the next
    scripted reply (a status, or HANG), 200 once the script is spent."""

    replies: list = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _handlers: set = field(default_factory=set)

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/hooks/kookee"

    async def stop(self) -> None:
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def wait_for(self, count: int, timeout: float = 5) -> Received:
        async with asyncio.timeout(timeout):
            while len(self.requests) < count:
                self._arrived.clear()
                await self._arrived.wait()
        return self.requests[count - 1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._handlers.add(asyncio.current_task())
        loop = asyncio.get_running_loop()
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, path, _version = head[0].split(" ", 2)
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name:
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", 0)))
            received = Received(method, path, headers, body, loop.time())
            self.requests.append(received)
            self._arrived.set()
            reply = self.replies.pop(0) if self.replies else 200
            if reply == HANG:
                await _first(self.release.wait(), reader.read())  # read(): b"" once the client hangs up
                if not self.release.is_set():
                    received.hung_up = True
                    return
                reply = 200
            writer.write(f"HTTP/1.1 {reply} Reply\r\ncontent-length: 0\r\nconnection: close\r\n\r\n".encode())
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
            self._handlers.discard(asyncio.current_task())


async def _first(*awaitables) -> None:
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


@pytest.fixture
async def receiver(settings):
    server = Receiver()
    settings.KOOKEE_HANDOFF_WEBHOOK = await server.start()
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 5
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 2
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 0.01
    yield server
    server.release.set()
    await notified()
    await server.stop()


def closed_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- the visitor's "Talk to a person" ---------------------------------------------------------


async def test_a_visitor_asks_for_a_person_after_a_question(chat, use_provider):
    use_provider.queue(answer("I'm not sure."))
    turn_id = await chat.ask("Why was I charged twice?")
    await chat.finish(turn_id)

    saved = await ask_for_a_person(chat, reason="  I was   charged\ntwice ", email=" sam@example.com ")

    [handoff] = await stored()
    assert saved == {"type": "handoff.saved", "handoff_id": handoff.id, "status": "open", "email": True, "agent": None}
    assert (handoff.source, handoff.status, handoff.reason, handoff.email) == (
        "visitor",
        "open",
        "I was charged twice",
        "sam@example.com",
    )
    assert handoff.turn_id == turn_id
    turn = await database_sync_to_async(Turn.objects.get)(pk=turn_id)
    assert handoff.conversation_id == turn.conversation_id
    assert await chat.communicator.receive_nothing(timeout=0.1)


async def test_a_handoff_before_any_question_starts_the_conversation(chat, use_provider):
    saved = await ask_for_a_person(chat)

    [handoff] = await stored()
    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert saved == {"type": "handoff.saved", "handoff_id": handoff.id, "status": "open", "email": False, "agent": None}
    assert (handoff.conversation_id, handoff.turn_id, handoff.reason, handoff.email) == (conversation.id, None, "", "")
    assert conversation.visitor_hash
    # The visitor's first question then joins that conversation.
    use_provider.queue(answer("Someone will be with you."))
    turn_id = await chat.ask("Hello?")
    await chat.finish(turn_id)
    assert (await database_sync_to_async(Turn.objects.get)(pk=turn_id)).conversation_id == conversation.id
    assert await count(Conversation) == 1


async def test_asking_again_adds_to_the_pending_request(chat, mailoutbox):
    first = await ask_for_a_person(chat, reason="My invoice is wrong.")
    again = await ask_for_a_person(chat, reason="It says 12 seats.", email="sam@example.com")
    repeated = await ask_for_a_person(chat, reason="It says 12 seats.")
    await notified()

    [handoff] = await stored()
    assert first["handoff_id"] == again["handoff_id"] == repeated["handoff_id"] == handoff.id
    assert (first["email"], again["email"], repeated["email"]) == (False, True, True)
    assert handoff.reason == "My invoice is wrong.\nIt says 12 seats."
    assert handoff.email == "sam@example.com"
    assert len(mailoutbox) == 1, "Support is told once, of the new request"


async def test_two_tabs_share_one_request(visitors):
    key = await new_session_key()
    first, second = await visitors(session_key=key), await visitors(session_key=key)

    one = await ask_for_a_person(first, reason="Billing.")
    other = await ask_for_a_person(second, email="sam@example.com")

    assert one["handoff_id"] == other["handoff_id"]
    assert await count(Conversation) == 1
    [handoff] = await stored()
    assert (handoff.reason, handoff.email) == ("Billing.", "sam@example.com")


async def test_a_closed_request_makes_way_for_a_new_one(chat, mailoutbox):
    first = await ask_for_a_person(chat, reason="First time.")
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(status="closed")

    second = await ask_for_a_person(chat, reason="Again.")
    await notified()

    assert second["handoff_id"] != first["handoff_id"]
    assert [(h.status, h.reason) for h in await stored()] == [("closed", "First time."), ("open", "Again.")]
    assert len({h.conversation_id for h in await stored()}) == 1
    assert len(mailoutbox) == 2


async def test_a_claimed_request_is_still_the_pending_one(chat):
    first = await ask_for_a_person(chat, reason="Refund.")
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(
        status="claimed", agent_name="Ana"
    )

    again = await ask_for_a_person(chat, email="sam@example.com")

    assert again == {
        "type": "handoff.saved",
        "handoff_id": first["handoff_id"],
        "status": "claimed",
        "email": True,
        "agent": "Ana",
    }
    assert await count(Handoff) == 1


async def test_a_handoff_is_taken_while_an_answer_streams(chat, use_provider):
    release = asyncio.Event()
    use_provider.queue([text("Thinking"), WaitFor(release), *answer(" done.")[1:]])
    turn_id = await chat.ask("Is there a phone number?")
    await chat.receive_until("delta", turn_id=turn_id)

    saved = await ask_for_a_person(chat, reason="No phone number found.")

    assert saved["status"] == "open"
    release.set()
    await chat.finish(turn_id)
    assert (await stored())[0].turn_id == turn_id


@pytest.mark.parametrize(
    "fields",
    [
        {"reason": 42},
        {"reason": ["help"]},
        {"reason": {"text": "help"}},
        {"reason": "x" * 501},
        {"email": 42},
        {"email": True},
        {"email": ["sam@example.com"]},
        {"email": "not an email"},
        {"email": "sam@"},
        {"email": "@example.com"},
        {"email": "sam@example.com\nBcc: eve@example.com"},
        # A valid address, past what the column (and the page's input) holds.
        {"email": address(255)},
    ],
)
async def test_a_malformed_request_is_refused_and_stores_nothing(chat, fields, mailoutbox):
    await chat.send({"type": "handoff", **fields})

    frame = await chat.receive()
    assert (frame["type"], frame["code"]) == ("error", "bad_handoff")
    assert frame["message"]
    assert await count(Handoff) == 0
    assert await count(Conversation) == 0
    assert not handoffs.tasks
    assert mailoutbox == []
    # The socket is still good.
    assert (await ask_for_a_person(chat))["status"] == "open"


async def test_the_longest_reason_and_address_are_taken(chat):
    longest_email = address(254)

    await ask_for_a_person(chat, reason="x" * 500, email=longest_email)

    [handoff] = await stored()
    assert (handoff.reason, handoff.email) == ("x" * 500, longest_email)


async def test_null_fields_are_empty(chat):
    saved = await ask_for_a_person(chat, reason=None, email=None)

    assert saved["email"] is False
    [handoff] = await stored()
    assert (handoff.reason, handoff.email) == ("", "")


async def test_a_visitor_who_started_over_elsewhere_is_refused(visitors):
    key = await new_session_key()
    first, second = await visitors(session_key=key), await visitors(session_key=key)
    await ask_for_a_person(first, reason="Please call me.")
    await first.send({"type": "forget"})
    assert await first.refusal() == CLOSE_REFUSED

    await second.send({"type": "handoff", "reason": "Me again."})

    assert await second.refusal() == CLOSE_REFUSED
    [handoff] = await stored()
    assert handoff.reason == "Please call me."


async def test_the_widget_page_is_the_requests_source(visitors, settings, mailoutbox, receiver):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    widget = await visitors(token=embed.new_token(), page="https://www.example.com/pricing?coupon=SECRET#x")

    await ask_for_a_person(widget, reason="Which plan?")
    await notified()

    conversation = await database_sync_to_async(Conversation.objects.get)()
    assert conversation.source_url == "https://www.example.com/pricing"
    assert receiver.requests[0].json["handoff"]["conversation"]["source_url"] == "https://www.example.com/pricing"
    assert "From: https://www.example.com/pricing\n" in mailoutbox[0].body


# --- the history frame ------------------------------------------------------------------------


async def history(chat: ChatClient) -> dict:
    await chat.send({"type": "history"})
    return await chat.receive_until("history")


async def test_history_carries_the_pending_request(chat):
    assert (await history(chat))["handoff"] is None

    saved = await ask_for_a_person(chat, email="sam@example.com")
    assert (await history(chat))["handoff"] == {
        "handoff_id": saved["handoff_id"],
        "status": "open",
        "email": True,
        "agent": None,
    }

    await database_sync_to_async(Handoff.objects.filter(pk=saved["handoff_id"]).update)(status="claimed")
    assert (await history(chat))["handoff"]["status"] == "claimed"

    await database_sync_to_async(Handoff.objects.filter(pk=saved["handoff_id"]).update)(status="closed")
    assert (await history(chat))["handoff"] is None


async def test_history_never_carries_the_address(chat):
    await ask_for_a_person(chat, email="sam@example.com")

    assert "sam@example.com" not in json.dumps(await history(chat))


async def test_a_new_tab_sees_the_request(visitors):
    key = await new_session_key()
    saved = await ask_for_a_person(await visitors(session_key=key))

    later = await visitors(session_key=key)

    assert (await history(later))["handoff"]["handoff_id"] == saved["handoff_id"]


async def test_another_visitor_does_not_see_the_request(visitors):
    await ask_for_a_person(await visitors(), reason="Mine.")

    assert (await history(await visitors()))["handoff"] is None


# --- the model's request_human ----------------------------------------------------------------

HUMAN = ("call_h", "request_human", {"reason": "The visitor wants a refund for a double charge."})


async def test_the_model_hands_over_during_a_turn(chat, use_provider, mailoutbox):
    use_provider.queue(tool_round([HUMAN], narration="Let me get a person."), answer("A person will reply."))

    turn_id = await chat.ask("I want my money back")
    ended = await chat.finish(turn_id)
    await notified()

    [handoff] = await stored()
    assert ended["status"] == "completed"
    assert ended["handoff"] == {"handoff_id": handoff.id, "status": "open", "email": False, "agent": None}
    assert (handoff.source, handoff.turn_id, handoff.reason) == (
        "assistant",
        turn_id,
        "The visitor wants a refund for a double charge.",
    )
    # The model is told it worked, with what to tell the visitor.
    tool_message = use_provider.requests[1].body["messages"][-1]
    assert tool_message["role"] == "tool"
    result = json.loads(tool_message["content"])
    assert (result["requested"], result["handoff_id"], result["status"]) == (True, handoff.id, "open")
    assert "email" in result["note"]
    [call] = await database_sync_to_async(list)(ToolCall.objects.filter(generation__turn_id=turn_id))
    assert (call.name, call.error) == ("request_human", "")
    assert mailoutbox[0].subject == f"Kookee chat: a visitor asks for a person (#{handoff.id})"
    assert mailoutbox[0].body.startswith("The assistant handed a conversation over to a person.\n")
    assert mailoutbox[0].body.endswith("\nLast question:\n> I want my money back")


async def test_a_turn_without_request_human_has_no_handoff_in_its_end(chat, use_provider):
    use_provider.queue(answer("Open Boards and press New."))

    turn_id = await chat.ask("How do I add a board?")

    assert "handoff" not in await chat.finish(turn_id)
    assert await count(Handoff) == 0


async def test_a_turn_rebuilt_from_storage_ends_as_it_did_live(chat, use_provider):
    # A tab that did not hear the end from the turn's own process (it died)
    # gets the frame rebuilt from the database: the same, request included.
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))
    turn_id = await chat.ask("Refund, please")
    ended = await chat.finish(turn_id)

    rebuilt = await database_sync_to_async(records.ended_frame)(turn_id)

    assert "handoff" in ended
    assert rebuilt == ended


async def test_the_visitor_adds_an_email_to_the_models_request(chat, use_provider):
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))
    turn_id = await chat.ask("Refund, please")
    ended = await chat.finish(turn_id)

    saved = await ask_for_a_person(chat, email="sam@example.com")

    assert saved == {**ended["handoff"], "type": "handoff.saved", "email": True}
    [handoff] = await stored()
    assert (handoff.source, handoff.email) == ("assistant", "sam@example.com")


async def test_request_human_adds_to_the_visitors_pending_request(chat, use_provider, mailoutbox):
    saved = await ask_for_a_person(chat, reason="Billing question.")
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))

    turn_id = await chat.ask("Still there?")
    ended = await chat.finish(turn_id)
    await notified()

    assert ended["handoff"]["handoff_id"] == saved["handoff_id"]
    [handoff] = await stored()
    assert (handoff.source, handoff.reason) == (
        "visitor",
        "Billing question.\nThe visitor wants a refund for a double charge.",
    )
    assert len(mailoutbox) == 1


async def test_request_human_with_a_bad_reason_is_an_error_result(chat, use_provider):
    use_provider.queue(tool_round([("call_h", "request_human", {"reason": 42})]), answer("Sorry."))

    turn_id = await chat.ask("A person, please")
    ended = await chat.finish(turn_id)

    assert ended["status"] == "completed" and "handoff" not in ended
    assert "error" in json.loads(use_provider.requests[1].body["messages"][-1]["content"])
    assert await count(Handoff) == 0


# --- the offline model ------------------------------------------------------------------------


@pytest.fixture
async def offline_chat(settings, visitors):
    settings.OPENAI_API_KEY = ""
    settings.OPENAI_BASE_URL = ""
    settings.KOOKEE_OFFLINE_TOKENS_PER_SECOND = 5000
    settings.KOOKEE_OFFLINE_FIRST_TOKEN_MS = 0
    await database_sync_to_async(call_command)("load_demo_help_center", stdout=io.StringIO())
    return await visitors()


@pytest.mark.parametrize(
    ("question", "handed_over"),
    [
        ("I want to talk to a person", offline.SAID["en"]["handed_over"]),
        ("falar com um atendente", offline.SAID["pt"]["handed_over"]),
    ],
)
async def test_the_offline_model_hands_over_when_asked(offline_chat, question, handed_over):
    turn_id = await offline_chat.ask(question)
    ended = await offline_chat.finish(turn_id)

    [handoff] = await stored()
    assert ended["handoff"] == {"handoff_id": handoff.id, "status": "open", "email": False, "agent": None}
    assert (handoff.source, handoff.reason, handoff.turn_id) == ("assistant", question, turn_id)
    assert offline_chat.text_of(turn_id).endswith(handed_over)


async def test_the_offline_model_offers_a_person_then_hands_over_on_yes(offline_chat):
    unanswered = await offline_chat.ask("Can I pay with bitcoin?")
    ended = await offline_chat.finish(unanswered)
    assert "handoff" not in ended
    assert offline_chat.text_of(unanswered).endswith(offline.OFFER["en"])
    assert await count(Handoff) == 0

    yes = await offline_chat.ask("yes please")
    ended = await offline_chat.finish(yes)

    [handoff] = await stored()
    assert ended["handoff"]["handoff_id"] == handoff.id
    # The reason is what the help center could not answer, not "yes".
    assert (handoff.reason, handoff.turn_id) == ("Can I pay with bitcoin?", yes)


async def test_the_offline_model_takes_yes_without_an_offer_as_no_request(offline_chat):
    turn_id = await offline_chat.ask("How do I export data?")
    await offline_chat.finish(turn_id)

    ended = await offline_chat.finish(await offline_chat.ask("yes"))

    assert "handoff" not in ended
    assert await count(Handoff) == 0


# --- the cap per network ----------------------------------------------------------------------


async def refused_for_rate(chat: ChatClient) -> dict:
    await chat.send({"type": "handoff", "reason": "One more."})
    frame = await chat.receive()
    assert (frame["type"], frame["code"]) == ("error", "handoff_rate_limited")
    assert "network" in frame["message"]
    assert await chat.communicator.receive_nothing(timeout=0.1)
    return frame


async def test_a_network_may_ask_so_many_times_an_hour(visitors, settings, mailoutbox):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 2
    for _ in range(2):
        await ask_for_a_person(await visitors(address="203.0.113.7"))
    # A new cookie from the same network, and an IPv4-mapped form of its address.
    over = await visitors(address="203.0.113.7")
    mapped = await visitors(address="::ffff:203.0.113.7")

    await refused_for_rate(over)
    await refused_for_rate(mapped)
    await notified()

    assert await count(Handoff) == 2
    assert await count(Conversation) == 2, "a refused request starts no conversation"
    assert len(mailoutbox) == 2
    # Another network is not affected.
    assert (await ask_for_a_person(await visitors(address="198.51.100.9")))["status"] == "open"


async def test_an_ipv6_network_is_capped_as_one(visitors, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    await ask_for_a_person(await visitors(address="2001:db8:1:2::1"))

    await refused_for_rate(await visitors(address="2001:db8:1:2:ffff::9"))
    assert (await ask_for_a_person(await visitors(address="2001:db8:1:3::1")))["status"] == "open"


async def test_closed_requests_count_and_older_ones_do_not(visitors, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    first = await ask_for_a_person(await visitors(address="203.0.113.7"))
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(status="closed")
    late = await visitors(address="203.0.113.7")
    await refused_for_rate(late)

    an_hour_ago = timezone.now() - timedelta(minutes=61)
    await database_sync_to_async(Handoff.objects.filter(pk=first["handoff_id"]).update)(created_at=an_hour_ago)

    assert (await ask_for_a_person(late))["status"] == "open"


async def test_adding_to_a_pending_request_is_not_capped(visitors, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    chat = await visitors(address="203.0.113.7")
    await ask_for_a_person(chat, reason="Refund.")

    again = await ask_for_a_person(chat, email="sam@example.com")

    assert again["email"] is True
    assert (await stored())[0].email == "sam@example.com"


async def test_the_cap_holds_for_the_models_requests(visitors, use_provider, settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    await ask_for_a_person(await visitors(address="203.0.113.7"))
    chat = await visitors(address="203.0.113.7")
    use_provider.queue(tool_round([HUMAN]), answer("I could not reach anyone."))

    turn_id = await chat.ask("A person, please")
    ended = await chat.finish(turn_id)

    assert ended["status"] == "completed" and "handoff" not in ended
    result = json.loads(use_provider.requests[1].body["messages"][-1]["content"])
    assert "handoff_rate_limited" in result["error"]
    [handoff] = await stored()
    assert handoff.source == "visitor"


async def test_the_service_raises_the_limit(settings):
    settings.KOOKEE_HANDOFFS_PER_HOUR_PER_NETWORK = 1
    await handoffs.request_by_visitor(VISITOR, None, "", "")
    other = Visitor.of(hash_key("another-key"), "203.0.113.7")

    with pytest.raises(LimitReached) as refused:
        await handoffs.request_by_visitor(other, None, "", "")

    assert refused.value.code == "handoff_rate_limited"
    assert await count(Handoff) == 1


# --- telling Support: email -------------------------------------------------------------------


async def test_support_is_emailed_the_request(chat, use_provider, mailoutbox, settings):
    use_provider.queue(answer("I don't know."))
    await chat.finish(await chat.ask("Can I get an invoice in <b>euros</b>?"))

    saved = await ask_for_a_person(chat, reason="Needs an invoice in euros.", email="sam@example.com")
    await notified()

    handoff_id = saved["handoff_id"]
    handoff = await get(handoff_id)
    conversation = await database_sync_to_async(Conversation.objects.get)()
    [message] = mailoutbox
    assert message.to == SUPPORT_INBOX
    assert message.from_email == settings.DEFAULT_FROM_EMAIL
    assert message.subject == f"Kookee chat: a visitor asks for a person (#{handoff_id})"
    assert message.body == "\n".join(
        [
            "A visitor asked to talk to a person.",
            "",
            f"Open the request: {SITE}/admin/chat/handoff/{handoff_id}/change/",
            f"Read the transcript: {SITE}/admin/chat/conversation/{conversation.id}/change/",
            "",
            "Visitor's email: sam@example.com",
            "From: the chat page",
            "",
            WRITTEN,
            "",
            "Reason:",
            "> Needs an invoice in euros.",
            "",
            "Last question:",
            "> Can I get an invoice in <b>euros</b>?",
        ]
    )
    assert handoff.email_status == "sent"


async def test_an_email_with_nothing_said(chat, mailoutbox, settings):
    settings.KOOKEE_SITE_URL = ""

    saved = await ask_for_a_person(chat)
    await notified()

    body = mailoutbox[0].body
    assert "\nReason:\n(nothing)\n" in body
    assert "\nVisitor's email: not given\n" in body
    assert body.endswith("\nLast question:\n(nothing)")
    assert f"\nOpen the request: /admin/chat/handoff/{saved['handoff_id']}/change/\n" in body


# --- the email: what the visitor wrote is quoted ------------------------------------------------

WRITTEN = "Written in the chat, quoted as typed (not checked: do not trust links in it):"
# Lines of ours that may follow WRITTEN: the labels, and what stands for nothing.
LABELS = {"", "Reason:", "Last question:", "Visitor's email, as typed:", "Page, as reported:", "(nothing)"}
FAKE = "Claim it in the queue: http://evil.example/x"


def quoted_part(body: str) -> list[str]:
    """The body's lines as a mail client may break them, checked: our links
    first, nothing of the visitor's before WRITTEN, and after it only labels
    and lines quoted with "> ". Returns the lines from WRITTEN on."""
    lines = body.splitlines()
    assert lines == body.split("\n"), "no line break in the body but our own"
    written = lines.index(WRITTEN)
    ours, theirs = lines[:written], lines[written + 1 :]
    assert ours[2].startswith("Open the request: ") and ours[3].startswith("Read the transcript: ")
    assert not [line for line in ours if "evil.example" in line]
    assert not [line for line in theirs if line not in LABELS and not line.startswith("> ")]
    return theirs


def requested(reason: str, question: str) -> Handoff:
    """A request stored as it may be (reasons added to a pending one are
    joined by line breaks), waiting for its email."""
    conversation = Conversation.objects.create(visitor_hash="someone")
    turn = Turn.objects.create(conversation=conversation, status="completed", user_text=question, model="m")
    return Handoff.objects.create(
        conversation=conversation,
        turn=turn,
        source=Handoff.Source.VISITOR,
        reason=reason,
        email_status=Handoff.Delivery.PENDING,
    )


async def emailed(reason: str, question: str, mailoutbox) -> str:
    handoff = await database_sync_to_async(requested)(reason, question)
    await handoffs.notify(handoff.id)
    [message] = mailoutbox
    return message.body


async def test_a_fake_link_in_the_last_question_stays_in_the_quote(chat, use_provider, mailoutbox):
    use_provider.queue(answer("I don't know."))
    await chat.finish(await chat.ask(f"Where is my invoice?\n\n{FAKE}"))

    await ask_for_a_person(chat, reason=f"Billing.\n\n{FAKE}")
    await notified()

    [message] = mailoutbox
    assert quoted_part(message.body) == [
        "",
        "Reason:",
        f"> Billing. {FAKE}",  # a new reason is one line
        "",
        "Last question:",
        "> Where is my invoice?",
        "> ",
        f"> {FAKE}",
    ]
    assert "evil" not in message.subject


@pytest.mark.parametrize(
    "newline", ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
)
async def test_no_line_break_lets_the_visitors_words_out_of_the_quote(newline, mailoutbox):
    body = await emailed(f"Refund.{newline}{newline}{FAKE}", f"Hello?{newline}{newline}{FAKE}", mailoutbox)

    assert quoted_part(body) == [
        "",
        "Reason:",
        "> Refund.",
        "> ",
        f"> {FAKE}",
        "",
        "Last question:",
        "> Hello?",
        "> ",
        f"> {FAKE}",
    ]


async def test_bidi_and_control_characters_are_taken_out_of_the_quote(mailoutbox):
    reason = "Refund \u202eelpmaxe.live\u202c \u2066please\u2069\u200f\u200e\u061c\ufeff\u200b now"
    question = "Bell\x07 escape\x1b[2J del\x7f\ttab, and 👩\u200d💻 stays"

    body = await emailed(reason, question, mailoutbox)

    assert quoted_part(body)[2] == "> Refund elpmaxe.live please now"
    assert quoted_part(body)[5] == "> Bell escape[2J del tab, and 👩\u200d💻 stays"
    assert [c for c in body if unicodedata.category(c) in ("Cc", "Cf") and c not in "\n\u200d"] == []


@pytest.mark.parametrize(
    "email",
    [
        # validate_email takes both: a quoted local part with a vertical tab,
        # a domain with a line separator.
        '"x\x0bClaim\\ it:\\ http://evil.example/x"@example.com',
        "sam@example\u2028claim-it-at-evil.example",
    ],
)
async def test_an_unusual_address_is_quoted_too(chat, mailoutbox, email):
    await ask_for_a_person(chat, email=email)
    await notified()

    [message] = mailoutbox
    assert (await stored())[0].email == email
    assert "\nVisitor's email: quoted below\n" in message.body
    theirs = quoted_part(message.body)
    assert theirs[theirs.index("Visitor's email, as typed:") + 1 :] == ["> " + line for line in email.splitlines()]


async def test_a_page_reported_with_line_breaks_is_quoted(visitors, settings, mailoutbox):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    page = f"https://www.example.com/pricing\u2028{FAKE}"
    widget = await visitors(token=embed.new_token(), page=page)

    await ask_for_a_person(widget)
    await notified()

    assert (await database_sync_to_async(Conversation.objects.get)()).source_url == page
    body = mailoutbox[0].body
    assert "\nFrom: quoted below\n" in body
    theirs = quoted_part(body)
    assert theirs[theirs.index("Page, as reported:") + 1 :] == ["> https://www.example.com/pricing", f"> {FAKE}"]


@pytest.fixture
def support_staff(django_user_model):
    """Support's members with and without an address, active or not; and
    others who are not Support."""
    ensure_roles()
    support, finance = Group.objects.get(name="Support"), Group.objects.get(name="Finance")

    def user(name, email, group=None, active=True):
        created = django_user_model.objects.create_user(username=name, email=email, is_staff=True, is_active=active)
        if group:
            created.groups.add(group)

    user("zoe", "zoe@example.com", support)
    user("ana", "ana@example.com", support)
    user("ana-again", "ana@example.com", support)
    user("noaddress", "", support)
    user("gone", "gone@example.com", support, active=False)
    user("fiona", "fiona@example.com", finance)
    user("bystander", "bystander@example.com")


async def test_without_a_list_supports_active_members_are_emailed(chat, settings, mailoutbox, support_staff):
    settings.KOOKEE_HANDOFF_EMAILS = []

    await ask_for_a_person(chat)
    await notified()

    [message] = mailoutbox
    assert message.to == ["ana@example.com", "zoe@example.com"]


async def test_with_nobody_to_email_the_request_is_still_taken(chat, settings, mailoutbox):
    settings.KOOKEE_HANDOFF_EMAILS = []

    saved = await ask_for_a_person(chat)
    await notified()

    assert mailoutbox == []
    handoff = await get(saved["handoff_id"])
    assert (handoff.status, handoff.email_status, handoff.webhook_status) == ("open", "", "")


async def test_a_failed_email_is_recorded(chat, settings, receiver):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", closed_port(), 2

    saved = await ask_for_a_person(chat)
    await notified()

    handoff = await get(saved["handoff_id"])
    assert (handoff.email_status, handoff.webhook_status) == ("failed", "sent"), "the webhook goes on regardless"


# --- telling Support: the webhook -------------------------------------------------------------


async def test_the_webhook_gets_the_request_signed(chat, use_provider, receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"
    use_provider.queue(answer("Hmm."))
    await chat.finish(await chat.ask("Where is my data stored?"))

    saved = await ask_for_a_person(chat, reason="GDPR request.", email="sam@example.com")
    await notified()

    handoff = await get(saved["handoff_id"])
    conversation = await database_sync_to_async(Conversation.objects.get)()
    [request] = receiver.requests
    assert (request.method, request.path) == ("POST", "/hooks/kookee")
    assert request.headers["content-type"] == "application/json"
    assert request.headers["x-kookee-signature"] == "sha256=" + signature(b"s3cret", request.body)
    assert request.json == {
        "event": "handoff.requested",
        "handoff": {
            "id": handoff.id,
            "source": "visitor",
            "reason": "GDPR request.",
            "email": "sam@example.com",
            "created_at": handoff.created_at.isoformat(),
            "admin_url": f"{SITE}/admin/chat/handoff/{handoff.id}/change/",
            "conversation": {
                "id": str(conversation.public_id),
                "source_url": "",
                "admin_url": f"{SITE}/admin/chat/conversation/{conversation.id}/change/",
                "last_question": "Where is my data stored?",
            },
        },
    }
    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 1)


async def test_without_a_secret_the_webhook_is_not_signed(receiver):
    await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    assert "x-kookee-signature" not in receiver.requests[0].headers
    assert "x-kookee-webhook-signature" not in receiver.requests[0].headers


async def test_the_signature_is_of_the_bytes_sent(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"

    await handoffs.request_by_visitor(VISITOR, None, "Ünïcode reason", "")
    await notified()

    request = receiver.requests[0]
    assert request.headers["x-kookee-signature"] == "sha256=" + signature(b"s3cret", request.body)
    assert request.headers["x-kookee-signature"] != "sha256=" + signature(b"another secret", request.body)
    assert request.json["handoff"]["reason"] == "Ünïcode reason"


def signature(secret: bytes, body: bytes) -> str:
    return hmac.new(secret, body, hashlib.sha256).hexdigest()


# The receiver's check, as docs/operations.md gives it ("Handoff to a person").
TOLERANCE_SECONDS = 300


def verify(header: str, body: bytes, secret: bytes, now: float | None = None) -> bool:
    """Whether X-Kookee-Webhook-Signature signs this body, and is recent."""
    fields = dict(part.strip().split("=", 1) for part in header.split(",") if "=" in part)
    t, signature = fields.get("t", ""), fields.get("sha256", "")
    if not (t.isascii() and t.isdigit()):
        return False
    if abs((time.time() if now is None else now) - int(t)) > TOLERANCE_SECONDS:
        return False
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected.encode(), signature.encode())


def signed_at(request: Received) -> int:
    t, _, digest = request.headers["x-kookee-webhook-signature"].partition(",")
    assert t.startswith("t=") and digest.startswith("sha256=")
    return int(t.removeprefix("t="))


async def test_the_webhook_is_signed_with_the_time_it_left(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"

    await handoffs.request_by_visitor(VISITOR, None, f"Refund.\n\n{FAKE}", "")
    await notified()

    [request] = receiver.requests
    t = signed_at(request)
    assert abs(time.time() - t) < 5
    header = request.headers["x-kookee-webhook-signature"]
    assert header == f"t={t},sha256=" + signature(b"s3cret", f"{t}.".encode() + request.body)
    assert verify(header, request.body, b"s3cret")
    # The old header still comes, by default.
    assert request.headers["x-kookee-signature"] == "sha256=" + signature(b"s3cret", request.body)


async def test_a_receiver_refuses_an_old_or_altered_request(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"

    await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    request = receiver.requests[0]
    header, body, t = request.headers["x-kookee-webhook-signature"], request.body, signed_at(request)
    assert verify(header, body, b"s3cret", now=t + TOLERANCE_SECONDS)
    assert not verify(header, body, b"s3cret", now=t + TOLERANCE_SECONDS + 1), "replayed later"
    assert not verify(header, body, b"s3cret", now=t - TOLERANCE_SECONDS - 1), "from the future"
    assert not verify(header, body + b" ", b"s3cret", now=t)
    assert not verify(header, body, b"another secret", now=t)
    # The signature of another time, or none: the time is signed with the body.
    assert not verify(header.replace(f"t={t}", f"t={t + 1}"), body, b"s3cret", now=t)
    assert not verify(f"t={t}", body, b"s3cret", now=t)
    assert not verify(header.replace(f"t={t}", "t=²"), body, b"s3cret", now=t)
    assert not verify(request.headers["x-kookee-signature"], body, b"s3cret", now=t)


async def test_each_attempt_is_signed_as_it_leaves(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"
    # A retry a second later at least: it has a time of its own.
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 1

    await webhook_outcome(receiver, 503, 200)

    first, retry = receiver.requests
    assert first.body == retry.body
    assert signed_at(retry) > signed_at(first)
    assert all(verify(r.headers["x-kookee-webhook-signature"], r.body, b"s3cret") for r in (first, retry))


async def test_without_the_legacy_signature_only_the_new_header_is_sent(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_SECRET = "s3cret"
    settings.KOOKEE_HANDOFF_WEBHOOK_LEGACY_SIGNATURE = False

    await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    request = receiver.requests[0]
    assert "x-kookee-signature" not in request.headers
    assert verify(request.headers["x-kookee-webhook-signature"], request.body, b"s3cret")


async def webhook_outcome(receiver: Receiver, *replies) -> Handoff:
    """Requests a person with the receiver scripted to reply so; the request
    once Support's notifications have ended."""
    receiver.replies = list(replies)
    _, state = await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()
    return await get(state["handoff_id"])


async def test_a_failing_receiver_is_retried_until_it_takes_it(receiver):
    handoff = await webhook_outcome(receiver, 500, 503)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 3)
    assert len(receiver.requests) == 3
    assert len({r.body for r in receiver.requests}) == 1, "the same notice each time"


async def test_a_receiver_that_always_fails_is_given_up_after_the_retries(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 3
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 0.05

    handoff = await webhook_outcome(receiver, 500, 500, 500, 500, 200)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 4)
    assert len(receiver.requests) == 4
    # Backing off, doubling: 0.05, 0.1, 0.2 s before the retries.
    at = [request.at for request in receiver.requests]
    assert at[1] - at[0] >= 0.05 - EARLY
    assert at[2] - at[1] >= 0.1 - EARLY
    assert at[3] - at[2] >= 0.2 - EARLY


EARLY = 0.005  # how early a timer may fire


async def test_no_retries_means_one_attempt(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 0

    handoff = await webhook_outcome(receiver, 500)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 1)


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
async def test_a_client_error_is_not_retried(receiver, status):
    handoff = await webhook_outcome(receiver, status)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 1)
    assert len(receiver.requests) == 1


@pytest.mark.parametrize("status", [408, 409, 425, 429])
async def test_a_client_error_that_may_pass_is_retried(receiver, status):
    handoff = await webhook_outcome(receiver, status)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 2)


async def test_a_receiver_that_hangs_past_the_timeout_is_a_failed_attempt(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 0.2

    handoff = await webhook_outcome(receiver, HANG, 200)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 2)
    assert receiver.requests[0].hung_up, "the client gave up on the hanging attempt"


async def test_a_receiver_that_always_hangs_fails(receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 0.2
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 1

    handoff = await webhook_outcome(receiver, HANG, HANG)

    assert (handoff.webhook_status, handoff.webhook_attempts) == ("failed", 2)
    assert [r.hung_up for r in receiver.requests] == [True, True]


async def test_nobody_listening_fails_after_the_retries(settings):
    settings.KOOKEE_HANDOFF_WEBHOOK = f"http://127.0.0.1:{closed_port()}/hooks"
    settings.KOOKEE_HANDOFF_WEBHOOK_RETRIES = 1
    settings.KOOKEE_HANDOFF_WEBHOOK_BACKOFF_SECONDS = 0.01

    _, state = await handoffs.request_by_visitor(VISITOR, None, "", "")
    await notified()

    handoff = await get(state["handoff_id"])
    assert (handoff.webhook_status, handoff.webhook_attempts, handoff.email_status) == ("failed", 2, "sent")


async def test_a_request_added_to_is_not_notified_again(receiver, mailoutbox):
    await handoffs.request_by_visitor(VISITOR, None, "First.", "")
    await notified()

    await handoffs.request_by_visitor(VISITOR, None, "Second.", "sam@example.com")
    await notified()

    assert len(receiver.requests) == 1
    assert len(mailoutbox) == 1


# --- never at a turn's expense ----------------------------------------------------------------


async def test_a_turn_that_hands_over_ends_while_the_webhook_hangs(chat, use_provider, receiver, settings, mailoutbox):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 30
    receiver.replies = [HANG]
    use_provider.queue(tool_round([HUMAN]), answer("A person will reply."))

    turn_id = await chat.ask("I want my money back")
    ended = await chat.finish(turn_id, timeout=5)

    await receiver.wait_for(1)
    handoff_id = ended["handoff"]["handoff_id"]
    handoff = await get(handoff_id)
    assert (handoff.webhook_status, handoff.webhook_attempts) == ("pending", 0)
    assert not receiver.requests[0].hung_up
    # The email does not wait for the webhook either.
    await eventually(lambda: Handoff.objects.get(pk=handoff_id).email_status == "sent")
    assert len(mailoutbox) == 1
    # And the visitor goes on chatting.
    use_provider.queue(answer("Anything else?"))
    assert (await chat.finish(await chat.ask("Thanks"), timeout=5))["status"] == "completed"

    receiver.release.set()
    await notified()
    handoff = await get(handoff_id)
    assert (handoff.webhook_status, handoff.webhook_attempts) == ("sent", 1)


async def test_the_visitors_request_is_saved_while_the_webhook_hangs(chat, receiver, settings):
    settings.KOOKEE_HANDOFF_WEBHOOK_TIMEOUT = 30
    receiver.replies = [HANG]

    async with asyncio.timeout(5):
        saved = await ask_for_a_person(chat, reason="Now, please.")
        await receiver.wait_for(1)
        assert (await history(chat))["handoff"]["handoff_id"] == saved["handoff_id"]

    assert handoffs.tasks, "the notification is still in flight"
    assert (await get(saved["handoff_id"])).webhook_status == "pending"


# --- erasure and retention --------------------------------------------------------------------


def handoff_in(visitor_hash: str, days_ago: float = 0) -> Handoff:
    conversation = Conversation.objects.create(visitor_hash=visitor_hash, source_url="https://www.example.com/p")
    turn = Turn.objects.create(
        conversation=conversation, status="completed", user_text="SECRET question", model="m", client_network="x"
    )
    handoff = Handoff.objects.create(
        conversation=conversation,
        turn=turn,
        source="visitor",
        reason="SECRET reason",
        email="secret@example.com",
        client_network="203.0.113.7/32",
        email_status="sent",
        created_at=timezone.now() - timedelta(days=days_ago),
    )
    return handoff


@pytest.mark.django_db
def test_erasing_a_conversation_erases_its_requests():
    erased, kept = handoff_in(hash_key("erase-me")), handoff_in(hash_key("keep-me"))
    turn_id = erased.turn_id

    erasure.erase_conversations([erased.conversation_id], by="test")

    erased.refresh_from_db()
    kept.refresh_from_db()
    assert (erased.reason, erased.email, erased.client_network) == ("", "", "")
    # The request itself stays, with Support's record of it, closed for good (nobody replies in it again).
    assert (erased.status, erased.source, erased.email_status, erased.turn_id) == (
        "closed",
        "visitor",
        "sent",
        turn_id,
    )
    assert (kept.reason, kept.email, kept.client_network) == ("SECRET reason", "secret@example.com", "203.0.113.7/32")
    assert RevokedKey.objects.filter(visitor_hash=hash_key("erase-me")).exists()


@pytest.mark.django_db
def test_the_erase_command_erases_requests_too():
    handoff = handoff_in(hash_key("erase-me"))

    call_command("erase_conversation", str(handoff.conversation.public_id), stdout=io.StringIO())

    handoff.refresh_from_db()
    assert (handoff.reason, handoff.email, handoff.client_network) == ("", "", "")


@pytest.mark.django_db
def test_old_requests_lose_their_network(settings):
    settings.KOOKEE_ADDRESS_RETENTION_DAYS = 30
    old, recent = handoff_in("a", days_ago=31), handoff_in("b", days_ago=29)

    call_command("purge_expired", stdout=io.StringIO())

    old.refresh_from_db()
    recent.refresh_from_db()
    assert old.client_network == ""
    assert recent.client_network == "203.0.113.7/32"
    # Only the network goes: what the visitor asked for stays until erased.
    assert (old.reason, old.email) == ("SECRET reason", "secret@example.com")


# --- notices a process did not finish ----------------------------------------------------------


def a_pending_request(claimed_minutes_ago: float | None, **fields) -> Handoff:
    conversation = Conversation.objects.create(visitor_hash="someone")
    claimed = None if claimed_minutes_ago is None else timezone.now() - timedelta(minutes=claimed_minutes_ago)
    return Handoff.objects.create(
        conversation=conversation,
        source=Handoff.Source.VISITOR,
        reason="Lost with its process",
        email_status=Handoff.Delivery.PENDING,
        notice_claimed_at=claimed,
        **fields,
    )


@pytest.mark.django_db(transaction=True)
async def test_a_notice_its_process_never_finished_is_sent_again_once(mailoutbox):
    lost = await database_sync_to_async(a_pending_request)(claimed_minutes_ago=10)
    await database_sync_to_async(a_pending_request)(claimed_minutes_ago=1)  # still being sent elsewhere

    assert await handoffs.resend_lost() == 1
    await notified()
    assert await handoffs.resend_lost() == 0  # sent: nothing pending any more

    assert [m.subject for m in mailoutbox] == [f"Kookee chat: a visitor asks for a person (#{lost.id})"]
    lost = await database_sync_to_async(Handoff.objects.get)(pk=lost.pk)
    assert lost.email_status == Handoff.Delivery.SENT


@pytest.mark.django_db(transaction=True)
async def test_two_processes_never_both_send_a_notice(mailoutbox):
    lost = await database_sync_to_async(a_pending_request)(claimed_minutes_ago=10)

    first = await database_sync_to_async(handoffs._claimed_notice)(lost.id)
    second = await database_sync_to_async(handoffs._claimed_notice)(lost.id)

    assert first is not None and first["id"] == lost.id
    assert second is None


@pytest.mark.django_db(transaction=True)
async def test_only_what_is_still_pending_is_sent_again(receiver, mailoutbox):
    lost = await database_sync_to_async(a_pending_request)(
        claimed_minutes_ago=10, webhook_status=Handoff.Delivery.PENDING
    )
    await database_sync_to_async(Handoff.objects.filter(pk=lost.pk).update)(email_status=Handoff.Delivery.SENT)

    await handoffs.resend_lost()
    await notified()

    assert mailoutbox == []  # the email had gone
    assert len(receiver.requests) == 1


@pytest.mark.django_db(transaction=True)
async def test_shutdown_waits_a_moment_for_notices_then_leaves_them_to_the_sweeper(receiver, monkeypatch):
    monkeypatch.setattr(handoffs, "SHUTDOWN_WAIT_SECONDS", 0.2)
    receiver.replies = [HANG]
    request = await database_sync_to_async(a_pending_request)(
        claimed_minutes_ago=None, webhook_status=Handoff.Delivery.PENDING
    )
    handoffs.notify_soon(request.id)
    await receiver.wait_for(1)

    async with asyncio.timeout(2):
        await handoffs.drain()  # bounded, though the receiver hangs

    stored = await database_sync_to_async(Handoff.objects.get)(pk=request.pk)
    assert stored.webhook_status == Handoff.Delivery.PENDING and stored.notice_claimed_at is not None
    receiver.release.set()
