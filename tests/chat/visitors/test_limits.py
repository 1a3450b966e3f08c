"""Limits on what one visitor can ask of the model: turns per minute (per
session and per client address), token budgets (per conversation and per
day), and frame floods. Past a limit: a polite `error` frame, no turn, no
model call."""

import asyncio
import ipaddress
import time
from datetime import timedelta
from urllib.parse import quote

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connection
from django.db.models import F
from django.utils import timezone

from billing.models import LedgerEntry
from chat.engine.consumers import CLOSE_FLOOD, CLOSE_IDLE, CLOSE_TOO_MANY
from chat.models import Conversation, DayBudget, Turn
from chat.visitors import embed, limits
from chat.visitors.identity import Visitor, hash_key
from chat.visitors.limits import FrameBudget
from kookee.asgi import application
from tests.chat.chat_client import HOST, ORIGIN, ChatClient, new_session_key
from tests.provider import WaitFor, answer, finish, text, tool_round, usage

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
async def visitors():
    """Connects visitors on demand; disconnects them all at the end."""
    clients = []

    async def _connect(session_key=None, address=None):
        client = await (connect_from(address, session_key) if address else ChatClient.connect(session_key))
        assert client.connected
        clients.append(client)
        return client

    yield _connect
    for client in clients:
        await client.close()


async def connect_from(address, session_key=None):
    """A visitor at a client address. WebsocketCommunicator puts no `client`
    in the scope (so `_client_address` is None and the address limit is not
    applied); daphne puts ("ip", port) there, so do the same."""
    key = session_key or await new_session_key()
    headers = [(b"origin", ORIGIN), (b"host", HOST), (b"cookie", f"sessionid={key}".encode())]
    communicator = WebsocketCommunicator(application, "/ws/chat/", headers=headers)
    communicator.scope["client"] = (address, 50123)
    client = ChatClient(communicator)
    client.connected, client.close_code = await communicator.connect()
    return client


def turn_count():
    return database_sync_to_async(Turn.objects.count)()


async def refused(client, code):
    """Sends a message; asserts it is refused with a polite error and nothing else."""
    await client.send({"type": "message", "text": "one more, please"})
    error = await client.receive()
    assert (error["type"], error["code"]) == ("error", code)
    assert "please" in error["message"].lower()
    assert await client.communicator.receive_nothing(timeout=0.2)
    return error


# --- turns per minute ------------------------------------------------------------------------


async def test_the_third_turn_in_a_minute_is_refused(visitors, use_provider, settings):
    settings.KOOKEE_TURNS_PER_MINUTE = 2
    chat = await visitors()
    use_provider.queue(answer("One."), answer("Two."), answer("Another visitor."))
    for question in ("one", "two"):
        assert (await chat.finish(await chat.ask(question)))["status"] == "completed"

    await refused(chat, "rate_limited")

    assert await turn_count() == 2
    assert len(use_provider.requests) == 2
    # The socket still takes frames: a stop is ignored, a bad frame is answered.
    await chat.send({"type": "stop"})
    assert await chat.communicator.receive_nothing(timeout=0.2)
    await chat.send("not json")
    assert (await chat.receive())["code"] == "bad_json"
    # The limit is the visitor's, not the site's.
    other = await visitors()
    assert (await other.finish(await other.ask("hi")))["status"] == "completed"


async def test_visitors_at_one_address_share_its_limit(visitors, use_provider, settings):
    settings.KOOKEE_TURNS_PER_MINUTE = 100
    settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS = 2
    first = await visitors(address="203.0.113.7")
    second = await visitors(address="203.0.113.7")
    use_provider.queue(answer("For the first."), answer("For the second."), answer("Elsewhere."))
    await first.finish(await first.ask("hi"))
    await second.finish(await second.ask("hi"))

    await refused(second, "rate_limited")

    assert len(use_provider.requests) == 2
    addresses = await database_sync_to_async(list)(Turn.objects.values_list("client_address", flat=True))
    assert addresses == ["203.0.113.7", "203.0.113.7"]
    # Another network is not affected.
    elsewhere = await visitors(address="198.51.100.9")
    assert (await elsewhere.finish(await elsewhere.ask("hi")))["status"] == "completed"


async def test_the_turn_rate_is_counted_in_the_database(visitors, use_provider, settings):
    settings.KOOKEE_TURNS_PER_MINUTE = 2
    key = await new_session_key()
    chat = await visitors(session_key=key)
    conversation = await database_sync_to_async(Conversation.objects.create)(visitor_hash=hash_key(key))

    @database_sync_to_async
    def turns_from_another_process():
        for question in ("one", "two"):
            Turn.objects.create(conversation=conversation, user_text=question, model="gpt-4o-mini", status="completed")

    await turns_from_another_process()

    await refused(chat, "rate_limited")
    assert len(use_provider.requests) == 0
    assert await turn_count() == 2

    # A minute later those turns no longer count.
    await database_sync_to_async(Turn.objects.update)(started_at=timezone.now() - timedelta(seconds=61))
    use_provider.queue(answer("Welcome back."))
    assert (await chat.finish(await chat.ask("hi")))["status"] == "completed"


# --- token budgets ---------------------------------------------------------------------------


async def test_a_conversation_over_its_token_budget_is_refused(visitors, use_provider, settings):
    settings.KOOKEE_TOKENS_PER_CONVERSATION = 500
    chat = await visitors()
    use_provider.queue(answer("ok", 600, 10), answer("For someone else."))
    ended = await chat.finish(await chat.ask("a long question"))
    assert ended["usage"]["input_tokens"] + ended["usage"]["output_tokens"] == 610

    await refused(chat, "conversation_full")

    assert await turn_count() == 1
    assert len(use_provider.requests) == 1
    # The budget is per conversation: another visitor still gets answers.
    other = await visitors()
    assert (await other.finish(await other.ask("hi")))["status"] == "completed"


async def test_the_daily_token_budget_is_for_the_whole_site_and_for_today(visitors, use_provider, settings):
    settings.KOOKEE_TOKENS_PER_DAY = 10_000
    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100
    first = await visitors()
    use_provider.queue(answer("ok", 9500, 10), answer("A new day."))
    first_turn = await first.ask("a long question")
    await first.finish(first_turn)

    # A fresh conversation is under its own budget: only the daily one
    # refuses it, since 490 tokens left cannot hold a turn's worst case.
    second = await visitors()
    await refused(second, "budget_exhausted")
    assert await turn_count() == 1
    assert len(use_provider.requests) == 1

    await as_if_yesterday()

    assert (await second.finish(await second.ask("hi")))["status"] == "completed"
    assert len(use_provider.requests) == 2


@database_sync_to_async
def as_if_yesterday():
    """Simulates midnight: what was spent was spent yesterday. The ledger is
    append-only (its queryset refuses update()), so its dates move with SQL,
    as a clock would."""
    table = connection.ops.quote_name(LedgerEntry._meta.db_table)
    column = connection.ops.quote_name(LedgerEntry._meta.get_field("created_at").column)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {column} = %s",
            [connection.ops.adapt_datetimefield_value(timezone.now() - timedelta(days=1))],
        )
    DayBudget.objects.update(day=F("day") - timedelta(days=1))


# --- frame floods ----------------------------------------------------------------------------


def test_the_frame_budget_allows_a_burst_then_refuses():
    budget = FrameBudget(3, per_second=1)

    assert [budget.take() for _ in range(4)] == [True, True, True, False]


def test_the_frame_budget_refills_at_its_rate():
    budget = FrameBudget(3, per_second=1)
    for _ in range(3):
        budget.take()

    budget.updated = time.monotonic() - 2  # two seconds pass: two more frames
    assert [budget.take() for _ in range(3)] == [True, True, False]


def test_the_frame_budget_refills_no_further_than_its_burst():
    budget = FrameBudget(3, per_second=1)
    budget.take()

    budget.updated = time.monotonic() - 1000
    assert [budget.take() for _ in range(4)] == [True, True, True, False]


async def test_a_flood_closes_the_socket_and_the_running_turn_is_saved_and_billed(visitors, use_provider, settings):
    settings.KOOKEE_FRAME_BURST = 5
    settings.KOOKEE_FRAMES_PER_SECOND = 0.001
    use_provider.queue([text("Working"), WaitFor(asyncio.Event()), text(" never")])
    chat = await visitors()
    turn_id = await chat.ask("hi")  # frame 1
    request = await use_provider.wait_for_request(1)
    await chat.receive_until("delta", turn_id=turn_id)
    for _ in range(4):  # frames 2 to 5: the burst
        await chat.send({"type": "message", "text": "again"})
        assert (await chat.receive())["code"] == "busy"

    await chat.send({"type": "message", "text": "and again"})  # frame 6

    # The running turn is stopped at once, then the socket is closed.
    ended = await chat.receive()
    assert (ended["type"], ended["turn_id"], ended["status"]) == ("turn.ended", turn_id, "interrupted")
    async with asyncio.timeout(2):
        await request.hung_up.wait()
    error = await chat.receive()
    assert (error["type"], error["code"]) == ("error", "flood")
    assert await chat.communicator.receive_output(timeout=2) == {"type": "websocket.close", "code": CLOSE_FLOOD}
    await chat.close()

    @database_sync_to_async
    def stored():
        turn = Turn.objects.get(pk=turn_id)
        return turn.status, turn.interrupted, turn.assistant_text, LedgerEntry.objects.filter(turn=turn).count()

    assert await stored() == ("interrupted", True, "Working", 1)
    assert await turn_count() == 1


async def test_a_full_conversation_makes_way_for_a_new_one(visitors, use_provider, settings):
    settings.KOOKEE_TOKENS_PER_CONVERSATION = 500
    chat = await visitors()
    use_provider.queue(answer("ok", 600, 10), answer("A fresh start."))
    first = await chat.finish(await chat.ask("a long question"))
    await refused(chat, "conversation_full")
    assert await conversation_count() == 1  # the new one begins with its first message
    await chat.send({"type": "history"})  # as the page asks on every connect
    assert len((await chat.receive_until("history"))["turns"]) == 1

    second = await chat.ask("hello again")
    assert (await chat.finish(second))["status"] == "completed"

    @database_sync_to_async
    def conversations():
        first_turn, second_turn = Turn.objects.get(pk=first["turn_id"]), Turn.objects.get(pk=second)
        return first_turn.conversation.visitor_hash == second_turn.conversation.visitor_hash, (
            first_turn.conversation_id != second_turn.conversation_id
        )

    assert await conversations() == (True, True)
    # The new conversation starts without the old one's history.
    assert [m["role"] for m in use_provider.requests[1].body["messages"]] == ["system", "user"]


@database_sync_to_async
def conversation_count() -> int:
    return Conversation.objects.count()


# --- daily budgets an abuser cannot reset ----------------------------------------------------


async def connect_as(address, *, token=False, forwarded_for=None):
    """A brand-new visitor (a fresh cookie, or a fresh widget token) at a
    peer address, as an abuser rotating identities would connect."""
    headers = [(b"origin", ORIGIN), (b"host", HOST)]
    if forwarded_for:
        headers.append((b"x-forwarded-for", forwarded_for.encode()))
    if token:
        path = f"/ws/chat/?token={quote(embed.new_token(), safe='')}"
    else:
        path = "/ws/chat/"
        headers.append((b"cookie", f"sessionid={await new_session_key()}".encode()))
    communicator = WebsocketCommunicator(application, path, headers=headers)
    communicator.scope["client"] = (address, 50123)
    client = ChatClient(communicator)
    client.connected, client.close_code = await communicator.connect()
    assert client.connected
    return client


@pytest.fixture
def budgets(settings, use_provider):
    """A site day of 100,000 tokens, of which one network (an IPv4 address,
    an IPv6 /64) may take 10%; every answer costs 2,500 tokens. A turn
    starts only when its worst case (its prompt, about 500 tokens, and at
    most 100 written) fits: so a network is spent after exactly 4 turns."""
    settings.KOOKEE_TOKENS_PER_DAY = 100_000
    settings.KOOKEE_NETWORK_SHARE_OF_DAY = 0.1
    settings.KOOKEE_IPV6_BUDGETS = {64: 0.1, 56: 0.2, 48: 0.4}
    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100
    settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS = 1000
    settings.KOOKEE_SOCKETS_PER_NETWORK = 1000
    use_provider.queue(*[answer("Sure.", 2400, 100) for _ in range(30)])
    return use_provider


async def chats(client) -> str:
    """Asks once; the turn's status, or the code it was refused with."""
    try:
        await client.send({"type": "message", "text": "one more, please"})
        frame = await client.receive()
        if frame["type"] == "error":
            return frame["code"]
        return (await client.finish(frame["turn_id"]))["status"]
    finally:
        await client.close()


async def test_rotating_cookies_and_tokens_does_not_reset_the_network_budget(budgets):
    outcomes = [await chats(await connect_as("203.0.113.7", token=n % 2 == 1)) for n in range(50)]

    assert outcomes[:4] == ["completed"] * 4
    assert set(outcomes[4:]) == {"network_budget_exhausted"}
    assert len(budgets.requests) == 4
    assert await turn_count() == 4
    # Another network still chats: the site's budget is far from spent.
    assert await chats(await connect_as("198.51.100.9")) == "completed"
    # So does a widget visitor there.
    assert await chats(await connect_as("198.51.100.10", token=True)) == "completed"


async def test_rotating_ipv6_addresses_within_a_64_shares_one_budget(budgets):
    outcomes = [await chats(await connect_as(f"2001:db8:1:2::{n:x}")) for n in range(1, 8)]

    assert outcomes == ["completed"] * 4 + ["network_budget_exhausted"] * 3
    assert await chats(await connect_as("2001:db8:1:3::1")) == "completed"


async def test_a_forged_header_from_an_untrusted_peer_changes_nothing(budgets):
    for _ in range(4):
        assert await chats(await connect_as("203.0.113.7")) == "completed"

    # The spent network claims to be someone else: it is not believed.
    assert await chats(await connect_as("203.0.113.7", forwarded_for="198.51.100.9")) == "network_budget_exhausted"
    # Nor can it spend a victim's budget by claiming to be them.
    for _ in range(4):
        await chats(await connect_as("192.0.2.1", forwarded_for="203.0.113.99"))
    assert await chats(await connect_as("203.0.113.99")) == "completed"


async def test_behind_a_trusted_proxy_the_visitor_address_counts(budgets, settings):
    settings.KOOKEE_TRUSTED_PROXIES = [ipaddress.ip_network("10.0.0.0/24")]
    for _ in range(4):
        assert await chats(await connect_as("10.0.0.2", forwarded_for="203.0.113.7")) == "completed"

    spent = await connect_as("10.0.0.2", forwarded_for="203.0.113.7")
    assert await chats(spent) == "network_budget_exhausted"
    # A forged entry left of the proxy's own is ignored: read from the right.
    forged = await connect_as("10.0.0.2", forwarded_for="198.51.100.50, 203.0.113.7")
    assert await chats(forged) == "network_budget_exhausted"
    # Other visitors behind the same proxy are their own networks.
    assert await chats(await connect_as("10.0.0.2", forwarded_for="198.51.100.50")) == "completed"
    stored = await database_sync_to_async(list)(Turn.objects.values_list("client_address", "client_network"))
    assert ("203.0.113.7", "203.0.113.7/32") in stored
    assert all(address != "10.0.0.2" for address, _ in stored)


async def test_one_visitor_has_a_daily_budget_of_their_own(visitors, use_provider, settings):
    settings.KOOKEE_TOKENS_PER_VISITOR_PER_DAY = 500
    use_provider.queue(*[answer("Sure.", 200, 100) for _ in range(4)])
    chat = await visitors(address="203.0.113.7")
    for _ in range(2):
        assert (await chat.finish(await chat.ask("hi")))["status"] == "completed"

    error = await refused(chat, "visitor_budget_exhausted")
    assert "tomorrow" in error["message"]
    # The same network, another visitor: still chats.
    neighbour = await visitors(address="203.0.113.7")
    assert (await neighbour.finish(await neighbour.ask("hi")))["status"] == "completed"


async def test_budgets_count_only_today(budgets):
    for _ in range(4):
        assert await chats(await connect_as("203.0.113.7")) == "completed"

    await as_if_yesterday()
    assert await chats(await connect_as("203.0.113.7")) == "completed"


# --- sockets ---------------------------------------------------------------------------------


async def test_sockets_per_visitor_are_capped(visitors, settings):
    settings.KOOKEE_SOCKETS_PER_VISITOR = 2
    key = await new_session_key()
    first = await visitors(session_key=key)
    await visitors(session_key=key)

    third = await ChatClient.connect(key)
    assert await third.refusal() == CLOSE_TOO_MANY
    # Another visitor is not affected, and a closed socket frees its place.
    await visitors()
    await first.close()
    again = await visitors(session_key=key)
    await again.send({"type": "history"})
    assert (await again.receive())["type"] == "history"


async def test_sockets_per_network_are_capped(visitors, settings):
    settings.KOOKEE_SOCKETS_PER_NETWORK = 3
    for _ in range(3):
        await visitors(address="2001:db8:1:2::1")
    rotated = await connect_from("2001:db8:1:2::99")
    assert await rotated.refusal() == CLOSE_TOO_MANY
    await visitors(address="2001:db8:1:3::1")  # the next /64 is another network


async def test_an_idle_socket_is_closed_with_a_code_the_page_knows(visitors, settings):
    settings.KOOKEE_IDLE_SOCKET_SECONDS = 0.3
    chat = await visitors()
    await chat.send({"type": "history"})
    await chat.receive()

    closed = await chat.communicator.receive_output(timeout=3)

    assert closed == {"type": "websocket.close", "code": CLOSE_IDLE, "reason": "Idle."}


async def test_a_running_turn_keeps_its_socket_open_past_the_idle_time(visitors, use_provider, settings):
    settings.KOOKEE_IDLE_SOCKET_SECONDS = 0.2
    release = asyncio.Event()
    use_provider.queue([text("Still"), WaitFor(release), text(" going."), finish("stop"), usage(10, 5)])
    chat = await visitors()
    turn_id = await chat.ask("long answer")
    await chat.receive_until("delta")
    await asyncio.sleep(0.6)  # three idle periods: the turn holds the socket
    release.set()
    ended = await chat.receive_until("turn.ended", turn_id=turn_id)
    assert ended["status"] == "completed"
    assert chat.text_of(turn_id) == "Still going."
    # Idle again after the turn: then it closes.
    closed = await chat.communicator.receive_output(timeout=3)
    assert closed["code"] == CLOSE_IDLE


# --- budgets that hold: IPv6 layers, turns at once, rounds ---------------------------------


async def test_rotating_the_64s_of_a_56_stops_at_the_56s_budget(budgets):
    # The audit's rotation: 2001:db8:0:N::1, a fresh /64 each time. Each /64
    # may take 10% of the day, its /56 20% (8 turns), its /48 40%.
    outcomes = [await chats(await connect_as(f"2001:db8:0:{n:x}::1")) for n in range(12)]

    assert outcomes == ["completed"] * 8 + ["network_budget_exhausted"] * 4
    # Another /56 of the same /48 still chats, until the /48's share is spent.
    assert await chats(await connect_as("2001:db8:0:100::1")) == "completed"
    # And anyone else: the site is far from spent.
    assert await chats(await connect_as("2001:db8:5::1")) == "completed"
    assert await chats(await connect_as("198.51.100.9")) == "completed"
    assert await network_spent("2001:db8::/56") <= 20_000


async def test_a_48_cannot_take_more_than_its_share_whichever_56s_it_rotates(budgets):
    outcomes = [await chats(await connect_as(f"2001:db8:0:{n:x}00::1")) for n in range(20)]

    assert outcomes.count("completed") == 16  # 40% of 100,000, at 2,500 a turn
    assert set(outcomes[16:]) == {"network_budget_exhausted"}
    assert await network_spent("2001:db8::/48") == 40_000
    assert await chats(await connect_as("2001:db9::1")) == "completed"


async def test_the_ipv6_layers_can_be_sized_by_the_operator(budgets, settings):
    # Only a /60 and a /52 layer: a /64 is no unit of its own any more.
    settings.KOOKEE_IPV6_BUDGETS = {60: 0.1, 52: 0.3}

    outcomes = [await chats(await connect_as(f"2001:db8:0:{n:x}::1")) for n in range(6)]

    assert outcomes == ["completed"] * 4 + ["network_budget_exhausted"] * 2  # all in one /60
    stored = await database_sync_to_async(list)(Turn.objects.values_list("client_network", flat=True))
    assert set(stored) == {"2001:db8::/60"}


@database_sync_to_async
def network_spent(network: str) -> int:
    return DayBudget.objects.get(key=limits.network_key(network)).tokens


async def test_turns_at_once_cannot_pass_a_budget_together(settings, use_provider):
    # The audit's race: fresh cookies from one network, all at once, each
    # counted against the budget as soon as it starts, not once billed.
    settings.KOOKEE_TOKENS_PER_DAY = 100_000
    settings.KOOKEE_NETWORK_SHARE_OF_DAY = 0.1  # 10,000 for the address
    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100
    settings.KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS = 1000
    settings.KOOKEE_SOCKETS_PER_NETWORK = 1000
    release = asyncio.Event()
    # What a provider reports is close to the estimate held: the prompt
    # (about 500 tokens), and no more than the most it may write.
    held_answer = [text("Sure."), WaitFor(release), finish(), usage(480, 100)]
    use_provider.queue(*[answer("Sure.", 480, 100) for _ in range(2)])
    for _ in range(2):
        assert await chats(await connect_as("203.0.113.7")) == "completed"
    use_provider.queue(*[held_answer for _ in range(20)])

    clients = [await connect_as("203.0.113.7") for _ in range(20)]
    for client in clients:
        await client.send({"type": "message", "text": "one more, please"})
    firsts = [await client.receive() for client in clients]
    release.set()
    started = [(c, f["turn_id"]) for c, f in zip(clients, firsts, strict=True) if f["type"] == "turn.started"]
    refusals = {f["code"] for f in firsts if f["type"] == "error"}
    for client, turn_id in started:
        assert (await client.finish(turn_id))["status"] == "completed"
    for client in clients:
        await client.close()

    assert refusals == {"network_budget_exhausted"}
    assert 0 < len(started) < 20
    billed = await database_sync_to_async(
        lambda: sum(e.input_tokens + e.output_tokens for e in LedgerEntry.objects.all())
    )()
    assert billed <= 10_000
    # What the counter says is what the ledger billed: every hold settled.
    assert await network_spent("203.0.113.7/32") == billed


async def test_a_round_the_budget_cannot_hold_ends_the_turn_failed_and_billed(settings, use_provider, monkeypatch):
    from chat.ops import metrics

    provider_errors = []
    monkeypatch.setattr(metrics, "provider_error", provider_errors.append)
    settings.KOOKEE_TOKENS_PER_DAY = 10_000
    settings.KOOKEE_NETWORK_SHARE_OF_DAY = 0.1  # 1,000: a first round, not a second
    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100
    search = tool_round([("call_1", "search_help_center", {"query": "invoices"})], "Let me look.", 470, 20)
    use_provider.queue(search, answer("Never asked for."))
    client = await connect_as("203.0.113.7")

    turn_id = await client.ask("How do I get my invoices?")
    ended = await client.finish(turn_id)
    error = next(f for f in client.frames if f["type"] == "error")
    await client.close()

    assert ended["status"] == "failed" and ended["generations"] == 1
    assert error["code"] == "network_budget_exhausted" and error["turn_id"] == turn_id
    assert client.text_of(turn_id) == "Let me look."
    assert len(use_provider.requests) == 1
    assert ended["usage"]["input_tokens"] + ended["usage"]["output_tokens"] == 490
    assert await network_spent("203.0.113.7/32") == 490
    turn = await database_sync_to_async(Turn.objects.get)(pk=turn_id)
    assert turn.budget == {}  # settled
    assert provider_errors == []  # a spent budget is no fault of the provider's


async def test_a_turn_holds_its_worst_case_while_it_runs_and_settles_at_its_end(settings, use_provider):
    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100
    release = asyncio.Event()
    use_provider.queue([text("Sure."), WaitFor(release), finish(), usage(480, 7)])
    client = await connect_as("203.0.113.7")

    turn_id = await client.ask("hi")
    await client.receive_until("delta")
    held = await network_spent("203.0.113.7/32")
    turn = await database_sync_to_async(Turn.objects.get)(pk=turn_id)
    release.set()
    await client.finish(turn_id)
    await client.close()

    assert held == turn.budget["tokens"] > 100  # the prompt's estimate and the most it may write
    assert turn.budget["keys"] == [limits.network_key("203.0.113.7/32"), limits.SITE]
    assert await network_spent("203.0.113.7/32") == 487
    assert await database_sync_to_async(DayBudget.objects.get)(key=limits.SITE) is not None


async def test_the_sweeper_settles_a_turn_whose_process_died(settings, use_provider):
    from chat.engine import records, sweeper

    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100

    @database_sync_to_async
    def dead_turn():
        visitor = Visitor.of(hash_key("gone"), "203.0.113.7")
        turn_id = records.start_turn(visitor, None, "hi", "gpt-4o-mini", tool_chars=900).turn_id
        Turn.objects.filter(pk=turn_id).update(
            heartbeat_at=timezone.now() - timedelta(minutes=5), checkpoint_round=1, checkpoint_input_tokens=400
        )
        return turn_id

    turn_id = await dead_turn()
    held = await network_spent("203.0.113.7/32")
    closed = await database_sync_to_async(sweeper.close_stale_turns)(30)

    assert [turn for _, turn in closed] == [turn_id]
    assert held > 400
    assert await network_spent("203.0.113.7/32") == 400
    assert (await database_sync_to_async(Turn.objects.get)(pk=turn_id)).budget == {}


@pytest.mark.django_db
def test_old_day_counters_are_purged(transactional_db):
    from billing import days
    from chat.support import erasure

    today = days.today()
    for age in (0, 1, 2, 30):
        DayBudget.objects.create(day=today - timedelta(days=age), key=limits.SITE, tokens=1)

    assert erasure.purge_expired()["day_budgets"] == 2
    assert sorted(DayBudget.objects.values_list("day", flat=True)) == [today - timedelta(days=1), today]


@pytest.mark.django_db(transaction=True)
def test_settling_and_holding_at_once_never_deadlock_on_postgresql():
    """Every writer locks a day's counters in key order. An UPDATE ... IN ()
    that settled a turn locked them in the table's order (the site's row
    first) and deadlocked with a hold locking the network's first."""
    import threading
    from datetime import date

    from django.db import connection, connections, transaction

    if connection.vendor != "postgresql":
        pytest.skip("SQLite serialises writers: only PostgreSQL locks rows")
    day = date(2031, 1, 1)
    network = limits.network_key("203.0.113.7/32")
    # The site's row first in the table, as the day's first turn from another network makes it.
    DayBudget.objects.create(day=day, key=limits.SITE, tokens=100)
    DayBudget.objects.create(day=day, key=network, tokens=100)
    faults = []

    def in_a_transaction(work):
        try:
            with transaction.atomic():
                work()
        except Exception as exc:  # a deadlock, as the test would see it
            faults.append(exc)
        finally:
            connections.close_all()

    def waiting() -> int:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            return cursor.fetchone()[0]

    def until_waiting(count: int) -> None:
        deadline = time.monotonic() + 10
        while waiting() < count:
            assert time.monotonic() < deadline, "the transaction never reached its lock"
            time.sleep(0.01)

    budget = {"day": day.isoformat(), "keys": [network, limits.SITE], "tokens": 50}
    blocker = threading.Event()
    release = threading.Event()

    def lock_the_network_row():
        with transaction.atomic():
            DayBudget.objects.select_for_update().get(day=day, key=network)
            blocker.set()
            release.wait(10)
        connections.close_all()

    lock = threading.Thread(target=lock_the_network_row)
    lock.start()
    blocker.wait(10)
    hold = threading.Thread(target=in_a_transaction, args=(lambda: limits._hold(day, [network, limits.SITE], 10),))
    hold.start()
    until_waiting(1)
    settle = threading.Thread(target=in_a_transaction, args=(lambda: limits.settle(budget, 20),))
    settle.start()
    until_waiting(2)
    release.set()
    for thread in (lock, hold, settle):
        thread.join(20)

    assert faults == []
    assert dict(DayBudget.objects.filter(day=day).values_list("key", "tokens")) == {network: 80, limits.SITE: 80}


@pytest.mark.django_db(transaction=True)
def test_a_round_that_ends_after_a_sweeper_closed_its_turn_holds_nothing_more(settings):
    # Its process stalled past KOOKEE_STALE_TURN_SECONDS: another one's
    # sweeper closed, billed and settled the turn. What the late round would
    # add to the day's counters would never be settled.
    from chat.engine import records, sweeper
    from chat.engine.rounds import Round

    settings.KOOKEE_MAX_OUTPUT_TOKENS = 100
    visitor = Visitor.of(hash_key("stalled"), "203.0.113.7")
    started = records.start_turn(visitor, None, "hi", "gpt-4o-mini", tool_chars=900)
    Turn.objects.filter(pk=started.turn_id).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    sweeper.close_stale_turns(30)
    settled = DayBudget.objects.get(key=limits.network_key("203.0.113.7/32")).tokens

    rnd = Round(number=1, prompt_chars=100, finish_reason="tool_calls")
    rnd.reported_usage = {"prompt_tokens": 400, "completion_tokens": 20}
    held = dict(started.record.budget)
    refused = records.end_round(started.record, rnd, held["tokens"] + 5000)

    assert (started.record.budget, refused) == (held, "")
    assert started.record.recorded == {1}
    assert DayBudget.objects.get(key=limits.network_key("203.0.113.7/32")).tokens == settled
    assert Turn.objects.get(pk=started.turn_id).budget == {}
