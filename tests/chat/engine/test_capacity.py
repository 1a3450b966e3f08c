"""Turns' database work runs most urgent first (chat/engine/db_lane.py),
and a saturated process refuses new sockets with 4503 at once
(chat/engine/capacity.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from chat.engine import capacity, db_lane
from chat.engine.consumers import CLOSE_BUSY
from chat.engine.db_lane import Lane
from chat.ops import metrics
from tests.chat.chat_client import ChatClient


def _block_the_loop(seconds: float) -> None:
    """What a burst of work does to the event loop: holds it."""
    time.sleep(seconds)


def _thread_lane(width: int) -> Lane:
    """A lane over plain threads: the order it hands jobs out is the test."""
    return Lane(width, lambda f: lambda *a, **k: asyncio.to_thread(f, *a, **k))


async def test_a_start_goes_ahead_of_ends_and_tool_rounds_that_asked_first():
    lane = _thread_lane(1)
    gate = threading.Event()
    ran: list[str] = []
    blocker = asyncio.ensure_future(lane.run(db_lane.URGENT, gate.wait))
    await asyncio.sleep(0.05)
    jobs = [
        asyncio.ensure_future(lane.run(slack, ran.append, name))
        for slack, name in [
            (db_lane.LATER, "end"),
            (db_lane.SOON, "tool round"),
            (db_lane.URGENT, "start"),
        ]
    ]
    await asyncio.sleep(0.05)
    assert lane.waiting == 3 and lane.running == 1
    gate.set()
    await asyncio.gather(blocker, *jobs)
    assert ran == ["start", "tool round", "end"]
    assert lane.running == 0 and lane.waiting == 0


async def test_an_end_waits_no_longer_than_its_slack_however_many_starts_come():
    lane = _thread_lane(1)
    ran: list[str] = []
    gate = threading.Event()
    blocker = asyncio.ensure_future(lane.run(db_lane.URGENT, gate.wait))
    await asyncio.sleep(0.01)
    end = asyncio.ensure_future(lane.run(0.05, ran.append, "end"))
    await asyncio.sleep(0.1)  # the end's deadline passes
    starts = [asyncio.ensure_future(lane.run(db_lane.URGENT, ran.append, f"start {n}")) for n in range(3)]
    gate.set()
    await asyncio.gather(blocker, end, *starts)
    assert ran[0] == "end"


async def test_width_jobs_run_at_once_and_a_cancelled_waiter_gives_its_place_on():
    lane = _thread_lane(2)
    gates = [threading.Event(), threading.Event()]
    running = [asyncio.ensure_future(lane.run(0, gate.wait)) for gate in gates]
    await asyncio.sleep(0.05)
    assert lane.running == 2
    given_up = asyncio.ensure_future(lane.run(0, lambda: "never"))
    after = asyncio.ensure_future(lane.run(0, lambda: "ran"))
    await asyncio.sleep(0.01)
    given_up.cancel()
    gates[0].set()
    assert await asyncio.wait_for(after, 2) == "ran"
    gates[1].set()
    await asyncio.gather(*running)
    assert lane.running == 0


async def test_the_loop_lag_is_its_last_seconds_worst_tick():
    lag = capacity.LoopLag(asyncio.get_running_loop())
    await asyncio.sleep(0.25)
    assert lag.worst() < 0.2
    # The block may start up to a tick before the next one was due: that
    # tick comes at least 0.5 - 0.1 s late.
    _block_the_loop(0.5)
    await asyncio.sleep(0.05)
    assert lag.worst() >= 0.35
    await asyncio.sleep(1.3)  # ten ticks later it has caught up
    assert lag.worst() < 0.2
    lag.handle.cancel()


@pytest.mark.django_db(transaction=True)
async def test_a_saturated_process_refuses_a_new_socket_with_4503_and_takes_it_when_caught_up(settings):
    settings.KOOKEE_SATURATION_MS = 100
    metrics.reset()
    capacity.start()
    _block_the_loop(0.3)
    await asyncio.sleep(0.01)
    refused = await ChatClient.connect()
    assert refused.connected and await refused.refusal() == CLOSE_BUSY
    assert b"kookee_saturated_refusals_total 1.0" in metrics.exposition(None)[0]
    await asyncio.sleep(1.3)  # caught up
    welcome = await ChatClient.connect()
    assert welcome.connected
    await welcome.send({"type": "history"})
    assert (await welcome.receive())["type"] == "history"
    await welcome.close()


@pytest.mark.django_db(transaction=True)
async def test_turns_late_database_work_does_not_refuse_new_visitors(settings, monkeypatch):
    # The turns' queue is the visitors' own: refusing newcomers sheds none of it.
    settings.KOOKEE_SATURATION_MS = 100
    lane = _thread_lane(2)
    monkeypatch.setitem(db_lane._lanes, asyncio.get_running_loop(), lane)
    gate = threading.Event()
    held = [asyncio.ensure_future(lane.run(0, gate.wait)) for _ in range(lane.width)]
    waiting = asyncio.ensure_future(lane.run(db_lane.URGENT, lambda: None))
    try:
        await asyncio.sleep(0.3)  # the start waits three times the bound
        assert lane.waiting == 1
        assert not capacity.saturated()
        client = await ChatClient.connect()
        assert client.connected
        await client.send({"type": "history"})
        assert (await client.receive())["type"] == "history"
        await client.close()
    finally:
        gate.set()
        await asyncio.gather(*held, waiting)


def test_saturation_off_never_refuses(settings):
    settings.KOOKEE_SATURATION_MS = 0

    async def check() -> bool:
        capacity.start()
        _block_the_loop(0.2)
        await asyncio.sleep(0.01)
        return capacity.saturated()

    assert not asyncio.run(check())
