"""One timer for a stream's many reads (chat/engine/deadline.py): it times
out a wait that runs past the deadline, follows a deadline moved on, and
leaves a cancellation that is not its own (a Stop) alone."""

import asyncio

import pytest

from chat.engine.deadline import Deadline


async def test_a_wait_past_the_deadline_times_out():
    deadline = Deadline()
    deadline.when = asyncio.get_running_loop().time() + 0.05
    with pytest.raises(TimeoutError), deadline:
        await asyncio.sleep(5)
    deadline.close()


async def test_waits_that_keep_moving_the_deadline_on_never_time_out():
    loop = asyncio.get_running_loop()
    deadline = Deadline()
    started = loop.time()
    for _ in range(20):  # 20 x 10 ms, each within 50 ms of the last
        deadline.when = loop.time() + 0.05
        with deadline:
            await asyncio.sleep(0.01)
    assert loop.time() - started >= 0.2
    deadline.close()


async def test_one_timer_serves_many_waits(monkeypatch):
    loop = asyncio.get_running_loop()
    scheduled = []
    call_at = loop.call_at

    def counting(when, callback, *args, **kwargs):
        if getattr(callback, "__self__", None).__class__ is Deadline:
            scheduled.append(when)
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting)
    deadline = Deadline()
    for _ in range(50):
        deadline.when = loop.time() + 10
        with deadline:
            await asyncio.sleep(0)
    deadline.close()
    assert len(scheduled) == 1


async def test_a_deadline_moved_earlier_is_kept():
    loop = asyncio.get_running_loop()
    deadline = Deadline()
    deadline.when = loop.time() + 10
    with deadline:
        await asyncio.sleep(0)
    deadline.when = loop.time() + 0.05  # the first token came: the shorter stall timeout
    started = loop.time()
    with pytest.raises(TimeoutError), deadline:
        await asyncio.sleep(5)
    assert loop.time() - started < 1
    deadline.close()


async def test_a_cancellation_that_is_not_its_own_stays_a_cancellation():
    deadline = Deadline()
    deadline.when = asyncio.get_running_loop().time() + 10

    async def reader():
        with deadline:
            await asyncio.sleep(5)

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.01)
    task.cancel()  # a Stop
    with pytest.raises(asyncio.CancelledError):
        await task
    deadline.close()


async def test_between_waits_the_timer_cancels_nothing():
    loop = asyncio.get_running_loop()
    deadline = Deadline()
    deadline.when = loop.time() + 0.02
    with deadline:
        await asyncio.sleep(0)
    await asyncio.sleep(0.1)  # past the deadline, but not waiting under it: a tool runs, say
    deadline.when = loop.time() + 10
    with deadline:
        await asyncio.sleep(0.01)  # not cancelled
    deadline.close()
