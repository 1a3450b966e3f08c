"""What the handoff tests share (test_handoffs.py, test_handoff_email.py,
test_handoff_webhook.py, test_replies.py): the settings they run under,
visitors on the socket, a webhook receiver on a loopback port, and the wait
for Support's notifications. Each test module binds the fixtures it uses by
name, handoff_settings and no_notification_left_behind (autouse) among them."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.core.validators import validate_email

from chat.models import Handoff
from chat.support import handoffs
from chat.visitors.identity import Visitor, hash_key
from kookee.asgi import application
from tests.chat.chat_client import HOST, ORIGIN, ChatClient, new_session_key

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


async def history(chat: ChatClient) -> dict:
    await chat.send({"type": "history"})
    return await chat.receive_until("history")


# What the model's request_human asks, and a line a visitor may write to pass for ours.
HUMAN = ("call_h", "request_human", {"reason": "The visitor wants a refund for a double charge."})
FAKE = "Claim it in the queue: http://evil.example/x"
