"""Tabs and processes (chat/engine/hub/): every tab follows the conversation's
turn, a tab that comes in mid-turn is resumed, Stop works from any tab, the
last tab's leaving starts the grace period.

The first part drives the real ASGI stack with several tabs in one process.
The second runs two hubs side by side on one channel layer, in-memory and
Redis: two processes as far as the protocol between them goes (the
multi-process tests in tests/multiprocess/ run real ones)."""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta

import pytest
from channels.db import database_sync_to_async
from django.db import IntegrityError, transaction
from django.utils import timezone

from billing.models import LedgerEntry
from chat.engine import hub, lifecycle, records
from chat.engine.hub import Hub
from chat.models import Conversation, Turn
from chat.visitors.identity import Visitor, hash_key
from chat.vocabulary import StopReason
from tests.chat.chat_client import ChatClient, new_session_key
from tests.provider import WaitFor, finish, text, usage

pytestmark = pytest.mark.django_db(transaction=True)


async def hung_up(request, timeout: float = 2) -> bool:
    async with asyncio.timeout(timeout):
        await request.hung_up.wait()
    return request.hung_up_early


@database_sync_to_async
def stored(turn_id):
    turn = Turn.objects.get(pk=turn_id)
    return turn.status, turn.stop_reason, turn.stopped_by, LedgerEntry.objects.filter(turn=turn).count()


@pytest.fixture
async def tabs(use_provider):
    """Tabs of one visitor (one session): tabs() opens another."""
    key = await new_session_key()
    opened = []

    async def open_tab():
        tab = await ChatClient.connect(key)
        assert tab.connected
        opened.append(tab)
        return tab

    yield open_tab
    for tab in opened:
        await tab.close()


async def receive_text(tab, turn_id, wanted):
    """Reads the tab's frames until it shows `wanted` of the turn's answer."""
    while True:
        frame = await tab.receive()
        resumes = [f for f in tab.frames if f["type"] == "turn.resume" and f["turn_id"] == turn_id]
        base = resumes[-1] if resumes else {"text": "", "seq": 0}
        after = tab.frames[tab.frames.index(base) + 1 :] if resumes else tab.frames
        shown = base["text"] + "".join(
            f["text"] for f in after if f["type"] == "delta" and f["turn_id"] == turn_id and f["seq"] > base["seq"]
        )
        if shown == wanted:
            return frame


# --- tabs of one process -------------------------------------------------------------------


async def test_every_tab_follows_the_turn_from_its_start(tabs, use_provider):
    first, second = await tabs(), await tabs()
    use_provider.queue([text("Paste"), text(" the"), text(" snippet."), finish("stop"), usage(20, 3)])
    await first.send({"type": "message", "text": "install?"})
    started = await second.receive_until("turn.started")
    turn_id = started["turn_id"]
    for tab in (first, second):
        ended = await tab.finish(turn_id)
        assert ended["status"] == "completed"
    assert first.text_of(turn_id) == second.text_of(turn_id) == "Paste the snippet."


async def test_a_tab_that_comes_in_mid_turn_is_resumed_then_follows(tabs, use_provider):
    go_on = asyncio.Event()
    use_provider.queue([text("Half"), text(" of it"), WaitFor(go_on), text(", then the rest."), finish("stop")])
    first = await tabs()
    turn_id = await first.ask("question")
    last = await receive_text(first, turn_id, "Half of it")

    second = await tabs()
    resume = await second.receive()
    assert resume == {"type": "turn.resume", "turn_id": turn_id, "seq": last["seq"], "text": "Half of it"}
    go_on.set()
    for tab in (first, second):
        assert (await tab.finish(turn_id))["status"] == "completed"  # checks resume text + later deltas


async def test_stop_from_another_tab_stops_the_turn_and_says_who(tabs, use_provider):
    use_provider.queue([text("Working"), WaitFor(asyncio.Event()), finish("stop")])
    first, second = await tabs(), await tabs()
    turn_id = await first.ask("question")
    request = await use_provider.wait_for_request(1)
    await second.receive_until("delta", turn_id=turn_id)

    await second.send({"type": "stop"})
    assert await hung_up(request)
    for tab in (first, second):
        ended = await tab.finish(turn_id)
        assert (ended["status"], ended["reason"]) == ("interrupted", "stopped")
    status, reason, stopped_by, entries = await stored(turn_id)
    assert (status, reason, entries) == ("interrupted", "stopped", 1)
    assert len(stopped_by) == 8  # the second tab's id, not the first's
    assert stopped_by != ""


async def test_a_message_from_another_tab_while_a_turn_runs_is_busy(tabs, use_provider):
    use_provider.queue([text("Working"), WaitFor(asyncio.Event()), finish("stop")])
    first, second = await tabs(), await tabs()
    turn_id = await first.ask("question")
    await second.receive_until("turn.started")
    await second.send({"type": "message", "text": "me too"})
    assert (await second.receive_until("error"))["code"] == "busy"
    await first.send({"type": "stop"})
    await first.finish(turn_id)
    assert await database_sync_to_async(Turn.objects.count)() == 1


async def test_a_reload_within_the_grace_period_resumes_the_live_answer(tabs, use_provider, settings):
    settings.KOOKEE_RESUME_GRACE_SECONDS = 5
    go_on = asyncio.Event()
    use_provider.queue([text("Before"), text(" the reload"), WaitFor(go_on), text(" and after."), finish("stop")])
    tab = await tabs()
    turn_id = await tab.ask("question")
    request = await use_provider.wait_for_request(1)
    last = await receive_text(tab, turn_id, "Before the reload")
    await tab.close()  # the reload: the only tab leaves...
    assert not request.hung_up.is_set()

    reloaded = await tabs()  # ...and comes back
    resume = await reloaded.receive()
    assert (resume["type"], resume["text"], resume["seq"]) == ("turn.resume", "Before the reload", last["seq"])
    go_on.set()
    ended = await reloaded.finish(turn_id)
    assert ended["status"] == "completed"
    assert reloaded.text_of(turn_id) == " and after."


async def test_when_every_tab_has_left_the_grace_period_ends_the_turn(tabs, use_provider, settings):
    settings.KOOKEE_RESUME_GRACE_SECONDS = 0.3
    use_provider.queue([text("Nobody"), WaitFor(asyncio.Event()), finish("stop")])
    tab = await tabs()
    turn_id = await tab.ask("question")
    request = await use_provider.wait_for_request(1)
    await tab.receive_until("delta", turn_id=turn_id)
    left_at = asyncio.get_running_loop().time()
    await tab.close()

    assert await hung_up(request, timeout=3)
    assert asyncio.get_running_loop().time() - left_at >= 0.3
    for _ in range(100):
        if (await stored(turn_id))[0] != "streaming":
            break
        await asyncio.sleep(0.02)
    assert await stored(turn_id) == ("interrupted", "left", "", 1)


async def test_a_tab_that_cannot_be_sent_to_does_not_stop_the_others(tabs, use_provider):
    use_provider.queue([text("Still"), text(" here."), finish("stop")])
    await tabs()

    async def broken(frame):
        raise ConnectionResetError("gone")

    for _ in range(100):  # the tab joins the hub once its socket is open
        if hub.current().tabs:
            break
        await asyncio.sleep(0.01)
    (consumer,) = next(iter(hub.current().tabs.values()))
    consumer.deliver = broken  # the first tab's socket fails
    second = await tabs()
    await second.send({"type": "message", "text": "q"})
    started = await second.receive_until("turn.started")
    ended = await second.finish(started["turn_id"])
    assert ended["status"] == "completed"


async def test_a_turn_whose_process_died_is_ended_in_the_tabs_by_the_sweeper(tabs, settings):
    key = await new_session_key()

    @database_sync_to_async
    def dead_turn():
        conversation = Conversation.objects.create(visitor_hash=hash_key(key))
        return Turn.objects.create(
            conversation=conversation,
            user_text="q",
            assistant_text="Saved so far",
            model="m",
            owner="specific.dead!process",
            heartbeat_at=timezone.now() - timedelta(minutes=5),
        )

    turn = await dead_turn()
    tab = await ChatClient.connect(key)  # asks the dead process, which never answers
    assert await tab.communicator.receive_nothing(timeout=0.2)

    await lifecycle.sweep()
    ended = await tab.receive_until("turn.ended", turn_id=turn.id)
    assert (ended["status"], ended["reason"], ended["usage"]["estimated"]) == ("interrupted", "process_lost", True)
    await tab.close()


@database_sync_to_async
def turn_running_elsewhere(key: str) -> Turn:
    """A turn another process runs (alive: its heartbeat is fresh), of the
    visitor with this session key."""
    conversation = Conversation.objects.create(visitor_hash=hash_key(key))
    return Turn.objects.create(
        conversation=conversation, user_text="q", model="m", owner="specific.other!process", heartbeat_at=timezone.now()
    )


@pytest.mark.parametrize("ends_before_the_message", [True, False], ids=["ended", "still running"])
async def test_a_message_is_busy_while_another_process_runs_the_turn_and_not_once_it_ended(
    use_provider, ends_before_the_message
):
    """A tab that connects while another process runs the turn watches it
    from here. The owner's word that it ended comes through the channel
    layer (here, never: it is slow); the tab reads the end in its history
    first, and its next message starts a turn. While the turn runs, it is busy."""
    key = await new_session_key()
    turn = await turn_running_elsewhere(key)
    tab = await ChatClient.connect(key)  # asks the owner to be watched; no answer comes
    assert await tab.communicator.receive_nothing(timeout=0.2)
    if ends_before_the_message:
        await database_sync_to_async(Turn.objects.filter(pk=turn.pk).update)(
            status=Turn.Status.COMPLETED, assistant_text="Done elsewhere."
        )
    use_provider.queue([text("Next."), finish("stop")])
    await tab.send({"type": "message", "text": "and now?"})
    frame = await tab.receive()
    if ends_before_the_message:
        assert frame["type"] == "turn.started", frame
        await tab.finish(frame["turn_id"])
    else:
        assert (frame["type"], frame["code"]) == ("error", "busy")
        assert await database_sync_to_async(Turn.objects.count)() == 1
    await tab.close()


async def test_shutdown_ends_the_turn_in_every_tab_with_its_reason(tabs, use_provider):
    use_provider.queue([text("Working"), WaitFor(asyncio.Event()), finish("stop")])
    first, second = await tabs(), await tabs()
    turn_id = await first.ask("question")
    request = await use_provider.wait_for_request(1)
    await second.receive_until("delta", turn_id=turn_id)

    running = hub.current().stop_all(StopReason.SHUTDOWN)
    await asyncio.wait(running, timeout=5)
    assert await hung_up(request)
    for tab in (first, second):
        assert (await tab.finish(turn_id))["reason"] == "shutdown"
    assert (await stored(turn_id))[:2] == ("interrupted", "shutdown")


async def test_a_process_shutting_down_starts_no_more_turns(tabs, use_provider):
    first = await tabs()
    hub.current().stop_all(StopReason.SHUTDOWN)
    await first.send({"type": "message", "text": "hello?"})
    error = await first.receive()
    assert (error["type"], error["code"]) == ("error", "unavailable")
    assert await database_sync_to_async(Turn.objects.count)() == 0
    assert use_provider.requests == []


# --- one turn at a time, held by the database ----------------------------------------------


def test_a_second_turn_in_a_conversation_is_busy():
    visitor = Visitor.of(hash_key("someone"), None)
    conversation_id = records.start_turn(visitor, None, "first", "m").conversation_id
    with pytest.raises(records.TurnAlreadyRunning):
        records.start_turn(visitor, conversation_id, "second", "m")
    assert Turn.objects.count() == 1


def test_the_database_refuses_two_running_turns_in_one_conversation():
    conversation = Conversation.objects.create(visitor_hash="v")
    Turn.objects.create(conversation=conversation, user_text="a", model="m")
    with pytest.raises(IntegrityError), transaction.atomic():
        Turn.objects.create(conversation=conversation, user_text="b", model="m")
    Turn.objects.create(conversation=conversation, user_text="c", model="m", status="completed")


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").startswith("sqlite") or not os.environ.get("DATABASE_URL"),
    reason="SQLite's in-memory test database locks tables across threads (a real SQLite file serialises writers)",
)
@pytest.mark.parametrize("first_message", [False, True], ids=["later message", "first message"])
def test_racing_messages_give_one_turn(first_message):
    """Messages racing in from several processes at once: one turn, the
    others busy (PostgreSQL: the conversation's row lock, and for a first
    message the visitor's advisory lock; SQLite: its write lock; both: the
    constraint). Tabs opened before the first message share its conversation."""
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connections

    visitor = Visitor.of(hash_key("someone"), None)
    known = None if first_message else Conversation.objects.create(visitor_hash=visitor.hash).id
    barrier = __import__("threading").Barrier(6)

    def message(n):
        barrier.wait()
        try:
            records.start_turn(visitor, known, f"message {n}", "m")
            return "started"
        except records.TurnAlreadyRunning:
            return "busy"
        finally:
            connections.close_all()

    with ThreadPoolExecutor(6) as pool:
        outcomes = sorted(pool.map(message, range(6)))
    assert outcomes == ["busy"] * 5 + ["started"]
    [conversation_id] = Conversation.objects.filter(visitor_hash=visitor.hash).values_list("id", flat=True)
    assert Turn.objects.filter(conversation_id=conversation_id).count() == 1


# --- two processes' hubs on one channel layer ----------------------------------------------


class FakeTab:
    def __init__(self, tab_id: str) -> None:
        self.tab_id = tab_id
        self.frames: list[dict] = []
        self.arrived = asyncio.Event()

    async def deliver(self, frame: dict) -> None:
        self.frames.append(frame)
        self.arrived.set()

    async def wait_for(self, frame_type: str, timeout: float = 3) -> dict:
        async with asyncio.timeout(timeout):
            while True:
                for frame in self.frames:
                    if frame["type"] == frame_type:
                        return frame
                self.arrived.clear()
                await self.arrived.wait()


def redis_url() -> str | None:
    url = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/13"
    try:
        import redis

        redis.Redis.from_url(url, socket_connect_timeout=0.5).ping()
    except Exception:
        if os.environ.get("CI") == "true":
            pytest.fail("CI runs with Redis on 127.0.0.1:6379")
        pytest.skip("no Redis on 127.0.0.1:6379")
    return url


@pytest.fixture(params=["in-memory", "redis"])
async def processes(request):
    """Two hubs on one channel layer, as two server processes would be."""
    if request.param == "redis":
        from channels_redis.core import RedisChannelLayer

        layer = RedisChannelLayer(hosts=[{"address": redis_url(), "socket_timeout": 30}], capacity=2000)
    else:
        from channels.layers import InMemoryChannelLayer

        layer = InMemoryChannelLayer()
    hubs = []
    for _ in range(2):
        one = Hub()
        one.layer = layer
        await one.start()
        hubs.append(one)
    yield hubs
    for one in hubs:
        await one.close()
    if request.param == "redis":
        await layer.flush()


def sleeper() -> asyncio.Task:
    return asyncio.create_task(asyncio.sleep(60))


async def started_elsewhere(owner: Hub, other: Hub, visitor: str, turn_id: int) -> tuple[FakeTab, hub.Broadcast]:
    """A tab on `other` already open when `owner` starts a turn: returns once
    the turn was announced to it and `other` has told the owner it watches."""
    there = FakeTab("there")
    await other.join(there, visitor, None)
    broadcast = await owner.own(turn_id, visitor)
    broadcast.task = sleeper()
    await owner.publish(broadcast, {"type": "turn.started", "turn_id": turn_id})
    assert (await there.wait_for("turn.started"))["turn_id"] == turn_id
    for _ in range(300):
        if broadcast.remote:
            break
        await asyncio.sleep(0.01)
    assert broadcast.remote, "the other process never said it watches"
    return there, broadcast


async def test_a_tab_of_another_process_is_resumed_then_follows(processes):
    owner, other = processes
    here = FakeTab("here")
    await owner.join(here, "v1", None)
    broadcast = await owner.own(10, "v1")
    broadcast.task = sleeper()
    await owner.publish(broadcast, {"type": "turn.started", "turn_id": 10})
    await owner.publish(broadcast, {"type": "delta", "turn_id": 10, "text": "Hello"})

    there = FakeTab("there")
    await other.join(there, "v1", (10, owner.channel))
    resume = await there.wait_for("turn.resume")
    assert resume == {"type": "turn.resume", "turn_id": 10, "seq": 1, "text": "Hello"}
    for piece in (" wide", " world"):
        await owner.publish(broadcast, {"type": "delta", "turn_id": 10, "text": piece})
    await owner.publish(broadcast, {"type": "turn.ended", "turn_id": 10, "status": "completed"})
    await there.wait_for("turn.ended")
    deltas = [f for f in there.frames if f["type"] == "delta"]
    assert [(f["seq"], f["text"]) for f in deltas] == [(2, " wide"), (3, " world")]
    assert [f["seq"] for f in here.frames if f["type"] == "delta"] == [1, 2, 3]
    broadcast.task.cancel()


async def test_a_late_resume_of_an_ended_turn_does_not_take_the_tab_off_the_next_one(processes):
    """A tab asked the owner of a running turn to be watched; the turn ended,
    the tab read its end from the database and started the next turn here.
    The owner's answer (`hub.resume`) arrives after that: it is ignored,
    and the tab goes on receiving its own turn, then nothing of the old one."""
    owner, here = processes
    tab = FakeTab("tab")
    await here.join(tab, "v8", None)
    broadcast = await here.own(81, "v8")
    broadcast.task = sleeper()
    await here.publish(broadcast, {"type": "turn.started", "turn_id": 81})
    late = {"type": "hub.resume", "visitor": "v8", "turn_id": 80, "seq": 2, "text": "Old answer", "tabs": ["tab"]}
    await owner.layer.send(here.channel, late)
    await asyncio.sleep(0.2)  # read and handled by `here`
    await here.publish(broadcast, {"type": "delta", "turn_id": 81, "text": "New"})
    await here.publish(broadcast, {"type": "turn.ended", "turn_id": 81, "status": "completed"})
    await tab.wait_for("turn.ended")
    await owner.layer.send(here.channel, late)  # after the next turn's end: still late
    await asyncio.sleep(0.2)
    assert [(f["type"], f["turn_id"]) for f in tab.frames] == [("turn.started", 81), ("delta", 81), ("turn.ended", 81)]
    broadcast.task.cancel()


async def test_a_turn_started_elsewhere_is_announced_to_tabs_already_open(processes):
    owner, other = processes
    there, broadcast = await started_elsewhere(owner, other, "v2", 20)
    await owner.publish(broadcast, {"type": "delta", "turn_id": 20, "text": "Hi"})
    await owner.publish(broadcast, {"type": "turn.ended", "turn_id": 20, "status": "completed"})
    await there.wait_for("turn.ended")
    assert [f["type"] for f in there.frames if f["type"] != "turn.resume"] == ["turn.started", "delta", "turn.ended"]
    broadcast.task.cancel()


async def test_a_tab_reloaded_at_once_still_hears_of_turns_started_elsewhere(processes):
    """The last tab's leave discards the process from the visitor's group in
    the background; the reloaded tab's join must not be undone by it."""
    owner, other = processes
    old, new = FakeTab("old"), FakeTab("new")
    await other.join(old, "v9", None)
    await other.leave(old, "v9")
    await other.join(new, "v9", None)
    await asyncio.sleep(0.1)  # whatever was left running in the background has run

    broadcast = await owner.own(90, "v9")
    broadcast.task = sleeper()
    assert (await new.wait_for("turn.started"))["turn_id"] == 90
    broadcast.task.cancel()


async def test_stop_from_a_tab_of_another_process_reaches_the_owner(processes):
    owner, other = processes
    broadcast = await owner.own(30, "v3")
    broadcast.task = sleeper()
    there = FakeTab("there")
    await other.join(there, "v3", (30, owner.channel))
    await there.wait_for("turn.resume")
    await other.stop(there, "v3")
    await asyncio.wait({broadcast.task}, timeout=3)
    assert broadcast.task.done()
    assert (broadcast.stop_reason, broadcast.stopped_by) == ("stopped", "there")


async def test_the_grace_period_waits_for_the_last_tab_of_every_process(processes, settings):
    settings.KOOKEE_RESUME_GRACE_SECONDS = 0.1
    owner, other = processes
    here, there = FakeTab("here"), FakeTab("there")
    await owner.join(here, "v4", None)
    broadcast = await owner.own(40, "v4")
    broadcast.task = sleeper()
    await other.join(there, "v4", (40, owner.channel))
    await there.wait_for("turn.resume")

    await owner.leave(here, "v4")
    await asyncio.sleep(0.3)
    assert not broadcast.task.done(), "a tab in another process still watches"
    await other.leave(there, "v4")
    await asyncio.wait({broadcast.task}, timeout=3)
    assert broadcast.task.done()
    assert broadcast.stop_reason == "left"


async def test_a_gap_in_seq_asks_the_owner_for_a_fresh_resume(processes):
    owner, other = processes
    broadcast = await owner.own(50, "v5")
    broadcast.task = sleeper()
    there = FakeTab("there")
    await other.join(there, "v5", (50, owner.channel))
    await there.wait_for("turn.resume")
    broadcast.seq += 1  # a frame the layer dropped
    broadcast.parts.append("lost ")
    await owner.publish(broadcast, {"type": "delta", "turn_id": 50, "text": "found"})
    async with asyncio.timeout(3):
        while len([f for f in there.frames if f["type"] == "turn.resume"]) < 2:
            there.arrived.clear()
            await there.arrived.wait()
    assert there.frames[-1] == {"type": "turn.resume", "turn_id": 50, "seq": 2, "text": "lost found"}
    assert not [f for f in there.frames if f["type"] == "delta"]
    broadcast.task.cancel()


async def test_a_turn_that_ended_before_the_watch_arrived_is_ended_from_the_database(processes):
    owner, other = processes

    @database_sync_to_async
    def ended_turn():
        conversation = Conversation.objects.create(visitor_hash="v")
        turn = Turn.objects.create(
            conversation=conversation, user_text="q", assistant_text="Done.", status="completed", model="m"
        )
        LedgerEntry.objects.create(turn=turn, model="m", input_tokens=3, output_tokens=2, estimated=False, cost=0)
        return conversation.id, turn.id

    _, turn_id = await ended_turn()
    there = FakeTab("there")
    await other.join(there, "v", (turn_id, owner.channel))  # the owner no longer runs it
    ended = await there.wait_for("turn.ended")
    assert ended["status"] == "completed"
    assert ended["usage"] == {"input_tokens": 3, "output_tokens": 2, "estimated": False}


async def test_a_watch_that_arrives_after_turn_ended_went_out_reads_the_end_from_the_database(processes):
    """Between publishing turn.ended and the task's last step the turn is
    still the owner's in memory: a watch arriving then must not be resumed
    into a turn that has ended (it would never hear of its end)."""
    owner, other = processes

    @database_sync_to_async
    def saved_turn():
        conversation = Conversation.objects.create(visitor_hash="v8")
        turn = Turn.objects.create(
            conversation=conversation, user_text="q", assistant_text="Done.", status="completed", model="m"
        )
        LedgerEntry.objects.create(turn=turn, model="m", input_tokens=3, output_tokens=2, estimated=False, cost=0)
        return turn.id

    turn_id = await saved_turn()
    broadcast = await owner.own(turn_id, "v8")
    broadcast.task = sleeper()  # its finally has not run: no disown yet
    await owner.publish(broadcast, {"type": "delta", "turn_id": turn_id, "text": "Done."})
    await owner.publish(broadcast, {"type": "turn.ended", "turn_id": turn_id, "status": "completed"})

    there = FakeTab("there")
    await other.join(there, "v8", (turn_id, owner.channel))
    ended = await there.wait_for("turn.ended")
    assert ended["usage"] == {"input_tokens": 3, "output_tokens": 2, "estimated": False}
    assert [f["type"] for f in there.frames] == ["turn.ended"]
    broadcast.task.cancel()


async def test_a_full_channel_delays_frames_to_another_process_but_loses_none(processes, monkeypatch):
    from channels.exceptions import ChannelFull

    owner, other = processes
    there, broadcast = await started_elsewhere(owner, other, "v7", 70)

    send, refusals = owner.layer.send, []

    async def full_at_first(channel, message):
        if message["type"] == "hub.frames" and len(refusals) < 3:
            refusals.append(message["type"])
            raise ChannelFull
        await send(channel, message)

    monkeypatch.setattr(owner.layer, "send", full_at_first)
    pieces = [f"w{i} " for i in range(20)]
    for piece in pieces:
        await owner.publish(broadcast, {"type": "delta", "turn_id": 70, "text": piece})
    await owner.publish(broadcast, {"type": "turn.ended", "turn_id": 70, "status": "completed"})
    await there.wait_for("turn.ended")

    assert len(refusals) == 3
    deltas = [f for f in there.frames if f["type"] == "delta"]
    assert [f["seq"] for f in deltas] == list(range(1, 21))
    assert "".join(f["text"] for f in deltas) == "".join(pieces)
    broadcast.task.cancel()


async def test_a_reload_at_the_end_of_the_grace_period_keeps_the_turn(processes, settings, monkeypatch):
    """The grace timer is cancelled as the tab arrives, before the hub
    awaits the channel layer for it."""
    settings.KOOKEE_RESUME_GRACE_SECONDS = 0.2
    owner, _ = processes
    old, new = FakeTab("old"), FakeTab("new")
    await owner.join(old, "v6", None)
    broadcast = await owner.own(60, "v6")
    broadcast.task = sleeper()
    await owner.leave(old, "v6")
    assert broadcast.grace is not None

    group_add = owner.layer.group_add

    async def slow_group_add(group, channel):
        await asyncio.sleep(0.4)  # past the grace period
        await group_add(group, channel)

    monkeypatch.setattr(owner.layer, "group_add", slow_group_add)
    await owner.join(new, "v6", None)

    assert not broadcast.task.done() and not broadcast.stop_reason
    assert (await new.wait_for("turn.resume"))["turn_id"] == 60
    broadcast.task.cancel()


async def test_the_first_tab_hears_of_a_turn_that_started_while_it_joined_the_group(processes, monkeypatch):
    """The tab read "nothing running" before its process was in the
    visitor's group; the turn's announcement went to nobody here."""
    owner, other = processes

    @database_sync_to_async
    def running_turn_of(visitor):
        conversation = Conversation.objects.create(visitor_hash=visitor)
        return Turn.objects.create(conversation=conversation, user_text="q", model="m", owner=owner.channel).id

    turn_id = await running_turn_of("v5b")
    broadcast = await owner.own(turn_id, "v5b")  # announced before the other process joins the group
    broadcast.task = sleeper()
    await owner.publish(broadcast, {"type": "delta", "turn_id": turn_id, "text": "So far"})
    await asyncio.sleep(0.1)  # the announcement has gone, to nobody on the other process

    there = FakeTab("there")
    await other.join(there, "v5b", None)  # as read before the turn was stored
    resume = await there.wait_for("turn.resume")
    assert (resume["turn_id"], resume["seq"], resume["text"]) == (turn_id, 1, "So far")
    broadcast.task.cancel()


async def test_an_announcement_that_arrives_after_its_turn_ended_is_ignored(processes):
    owner, other = processes
    there, broadcast = await started_elsewhere(owner, other, "v4b", 41)
    await owner.publish(broadcast, {"type": "turn.ended", "turn_id": 41, "status": "completed"})
    await there.wait_for("turn.ended")

    # The same announcement again, late (reordered, or read from the database meanwhile).
    late = {"type": "hub.started", "visitor": "v4b", "turn_id": 41, "owner": owner.channel}
    await owner.layer.send(other.channel, late)
    await other.check()  # a message sent after it has come back: it was handled

    assert [f["type"] for f in there.frames if f["type"] != "turn.resume"] == ["turn.started", "turn.ended"]
    assert not other.running("v4b")
    broadcast.task.cancel()
    await owner.drain()
    await other.drain()
    await asyncio.sleep(0)  # the senders' done callbacks
    assert owner._outboxes == {} and other._outboxes == {}, "no outbox kept with nothing to send"


async def test_the_health_check_round_trips_the_channel_layer(processes):
    owner, _ = processes
    await owner.check(timeout=2)
    await owner.close()
    with pytest.raises(TimeoutError):
        await owner.check(timeout=0.3)  # nobody listens any more
