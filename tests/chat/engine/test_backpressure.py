"""Bounded memory per socket: the outbox that never waits for a client, the
frame budget in bytes, and history pages in bytes (chat/engine/backpressure.py).
The real servers, with a client that never reads: tests/test_hostile_clients.py."""

from __future__ import annotations

import asyncio
import json

import pytest
from channels.db import database_sync_to_async

from chat.engine.backpressure import CLOSE_BACKLOG, Outbox
from chat.engine.consumers import CLOSE_FLOOD
from chat.models import Conversation, Turn
from chat.visitors.identity import hash_key
from chat.visitors.limits import FrameBudget
from tests.chat.chat_client import ChatClient, new_session_key

# --- the outbox ------------------------------------------------------------------------------


class Socket:
    """An ASGI `send` whose socket takes messages only while `open` is set,
    as uvicorn's waits while the client does not read."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.open = asyncio.Event()
        self.open.set()

    async def send(self, message: dict) -> None:
        await self.open.wait()
        self.sent.append(message)


def frame(n: int, size: int = 10) -> dict:
    return {"type": "websocket.send", "text": f"{n:<{size}}"}


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_messages_go_out_in_order():
    socket = Socket()
    outbox = Outbox(socket.send, limit=1000)

    for n in range(5):
        await outbox.send(frame(n))
    await settle()

    assert [m["text"].strip() for m in socket.sent] == ["0", "1", "2", "3", "4"]
    assert outbox.backlog == 0


async def test_sending_never_waits_for_a_client_that_does_not_read():
    socket = Socket()
    socket.open.clear()
    outbox = Outbox(socket.send, limit=1000)

    async with asyncio.timeout(1):  # each send returns at once
        for n in range(5):
            await outbox.send(frame(n, 100))

    assert outbox.backlog == 500
    socket.open.set()
    await settle()
    assert len(socket.sent) == 5 and outbox.backlog == 0


async def test_past_its_bound_what_waits_is_dropped_and_the_socket_closed():
    socket = Socket()
    socket.open.clear()
    outbox = Outbox(socket.send, limit=350)
    for n in range(3):
        await outbox.send(frame(n, 100))
    await settle()  # the first is in flight, waiting for the socket

    await outbox.send(frame(3, 100))  # 400 would wait: over the bound
    await outbox.send(frame(4, 100))  # after the close: dropped
    socket.open.set()
    await settle()

    assert outbox.overflowed and outbox.closed and outbox.backlog == 0
    assert [m["type"] for m in socket.sent] == ["websocket.close"]
    assert socket.sent[0]["code"] == CLOSE_BACKLOG


async def test_what_the_server_holds_counts_toward_the_bound():
    # daphne hands messages on at once and holds them itself.
    held = [0]
    socket = Socket()
    outbox = Outbox(socket.send, limit=1000, unsent=lambda: held[0])
    await outbox.send(frame(1, 100))
    await settle()
    held[0] = 950

    await outbox.send(frame(2, 100))
    await settle()

    assert [m["type"] for m in socket.sent] == ["websocket.send", "websocket.close"]
    assert socket.sent[1]["code"] == CLOSE_BACKLOG


async def test_one_frame_larger_than_the_bound_goes_when_nothing_waits():
    # A long answer's resume, or a history page of one long turn: a client
    # that reads everything must not be closed for it, over and over.
    socket = Socket()
    outbox = Outbox(socket.send, limit=100, unsent=lambda: 0)

    await outbox.send(frame(1, 500))

    assert not outbox.overflowed and len(socket.sent) == 1


async def test_an_overflow_lets_go_of_the_socket_at_once_and_drops_it_if_the_close_cannot_go(monkeypatch):
    monkeypatch.setattr("chat.engine.backpressure.ABORT_AFTER_SECONDS", 0.01)
    socket = Socket()
    socket.open.clear()  # the close cannot go either: the client reads nothing
    events = []
    outbox = Outbox(
        socket.send, limit=150, abort=lambda: events.append("abort"), on_overflow=lambda: events.append("let go")
    )
    await outbox.send(frame(1, 100))
    await settle()
    await outbox.send(frame(2, 100))

    assert events == ["let go"]
    await asyncio.sleep(0.05)
    assert events == ["let go", "abort"]


async def test_a_socket_gone_before_the_abort_is_not_aborted(monkeypatch):
    monkeypatch.setattr("chat.engine.backpressure.ABORT_AFTER_SECONDS", 0.01)
    socket = Socket()
    aborted = []
    outbox = Outbox(socket.send, limit=150, unsent=lambda: 100, abort=lambda: aborted.append(True))
    await outbox.send(frame(1, 100))

    outbox.forget()  # the server said it disconnected
    await asyncio.sleep(0.05)

    assert outbox.overflowed and aborted == []


async def test_a_fault_in_an_immediate_send_is_not_hidden():
    async def broken(message):
        raise ValueError("Socket has not been accepted, so cannot send over it")

    outbox = Outbox(broken, limit=1000, unsent=lambda: 0)

    with pytest.raises(ValueError):
        await outbox.send(frame(1))


def test_sizes_are_bytes_as_the_server_counts_them():
    from chat.engine.backpressure import _size

    assert _size({"type": "websocket.send", "text": "ação 中文 😀"}) == len("ação 中文 😀".encode())


async def test_a_server_that_holds_what_it_is_sent_gets_it_at_once():
    # daphne: no task in between, and its own buffer is what is bounded.
    socket = Socket()
    outbox = Outbox(socket.send, limit=1000, unsent=lambda: 0)

    await outbox.send(frame(1))

    assert [m["text"].strip() for m in socket.sent] == ["1"]
    assert outbox._sender is None


async def test_nothing_goes_after_a_close_and_a_gone_socket_takes_nothing():
    socket = Socket()
    outbox = Outbox(socket.send, limit=1000)
    await outbox.send({"type": "websocket.close", "code": 4008})
    await outbox.send(frame(1))
    await settle()
    assert [m["type"] for m in socket.sent] == ["websocket.close"]

    gone = Outbox(socket.send, limit=1000)
    gone.forget()
    await gone.send(frame(2))
    await settle()
    assert len(socket.sent) == 1


async def test_a_send_that_fails_drops_what_waits_behind_it():
    sent = []

    async def broken(message):
        if message["text"].strip() == "1":
            raise OSError("the socket is gone")
        sent.append(message)

    outbox = Outbox(broken, limit=1000)
    for n in range(3):
        await outbox.send(frame(n))
    await settle()

    assert [m["text"].strip() for m in sent] == ["0"]
    assert outbox.backlog == 0


# --- the frame budget in bytes -----------------------------------------------------------------


def test_the_byte_budget_refuses_once_in_debt_and_refills():
    budget = FrameBudget(100, 100.0, byte_burst=1000, bytes_per_second=500)

    assert budget.take(600)
    assert budget.take(600)  # into debt: this one is allowed ...
    assert not budget.take(10)  # ... and the next refused
    budget.updated -= 2  # two seconds later: 1,000 refilled, up to the burst
    assert budget.take(10)


def test_a_reply_is_charged_to_the_frame_that_asked_for_it():
    budget = FrameBudget(100, 100.0, byte_burst=1000, bytes_per_second=1)
    assert budget.take(20)

    budget.charge(5000)

    assert not budget.take(20)


# --- history pages in bytes, and what a socket's history costs it ----------------------------

db = pytest.mark.django_db(transaction=True)


@database_sync_to_async
def long_conversation(key: str, turns: int = 10, chars: int = 20_000) -> list[int]:
    conversation = Conversation.objects.create(visitor_hash=hash_key(key))
    return [
        Turn.objects.create(
            conversation=conversation, status="completed", user_text=f"q{n}", assistant_text="a" * chars, model="m"
        ).id
        for n in range(turns)
    ]


@db
async def test_a_history_page_stays_within_its_bytes_and_says_there_is_more(settings):
    settings.KOOKEE_HISTORY_PAGE_BYTES = 64 * 1024
    key = await new_session_key()
    ids = await long_conversation(key)
    chat = await ChatClient.connect(key)
    try:
        pages = []
        before = None
        while True:
            await chat.send({"type": "history", **({"before": before} if before else {})})
            page = await chat.receive_until("history")
            pages.append(page)
            if not page["more"]:
                break
            before = page["turns"][0]["turn_id"]
    finally:
        await chat.close()

    sizes = [len(json.dumps(page)) for page in pages]
    assert all(size <= 64 * 1024 + 200 for size in sizes), sizes  # the page's own few fields aside
    assert len(pages) > 1
    # Every turn once, latest first, none lost between pages.
    assert [t["turn_id"] for page in reversed(pages) for t in page["turns"]] == ids


@db
async def test_one_turn_larger_than_a_page_is_still_shown(settings):
    settings.KOOKEE_HISTORY_PAGE_BYTES = 1024
    key = await new_session_key()
    ids = await long_conversation(key, turns=2, chars=5000)
    chat = await ChatClient.connect(key)
    try:
        await chat.send({"type": "history"})
        page = await chat.receive_until("history")
    finally:
        await chat.close()

    assert [t["turn_id"] for t in page["turns"]] == ids[-1:]
    assert page["more"] is True


@db
async def test_asking_for_history_faster_than_the_byte_budget_closes_the_socket(settings):
    settings.KOOKEE_FRAME_BYTES_BURST = 100_000
    settings.KOOKEE_FRAME_BYTES_PER_SECOND = 1000
    key = await new_session_key()
    await long_conversation(key, turns=3, chars=20_000)  # a page of about 60 KB
    chat = await ChatClient.connect(key)
    try:
        answers = []
        for _ in range(4):
            await chat.send({"type": "history"})
            answers.append(await chat.receive())
            if answers[-1]["type"] == "error":
                break
        closed = await chat.communicator.receive_output(timeout=2)
    finally:
        await chat.close()

    # Two pages are 120 KB: the third frame finds the budget in debt.
    assert [a["type"] for a in answers] == ["history", "history", "error"]
    assert answers[-1]["code"] == "flood"
    assert closed["code"] == CLOSE_FLOOD
