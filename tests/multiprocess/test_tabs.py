"""A turn's tabs across the two processes: a tab on the other process
follows the turn and stops it, a reload onto the other process resumes the
answer, and a turn left by its only tab stops after the grace period."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.multiprocess.stack import other, paced, start_turn, timings, words

pytestmark = pytest.mark.slow


async def test_a_tab_on_the_other_process_follows_the_turn_and_stops_it(stack_for):
    async with stack_for() as stack:
        cookie = await stack.page_load()
        # From 127.0.0.2, with a forged X-Forwarded-For: the app must see 127.0.0.2.
        tab1 = await stack.open_tab(
            cookie, "tab1", headers={"X-Forwarded-For": "203.0.113.9"}, local_addr=("127.0.0.2", 0)
        )
        turn_id, owner, request = await start_turn(stack, tab1, paced(words(400), 0.03))

        tab2 = await stack.open_tab(cookie, "tab2", process=other(owner))
        first = await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.started or turn.resume")
        after = first.get("seq", 0)
        await tab2.wait_for(
            lambda _: len([d for d in tab2.deltas(turn_id) if d["seq"] > after]) >= 3, "3 live deltas after joining"
        )

        loop = asyncio.get_running_loop()
        assert not request.hung_up.is_set()
        stop_sent = loop.time()
        await tab2.send({"type": "stop"})
        async with asyncio.timeout(5):
            await request.hung_up.wait()
        timings["a: stop on the other process -> provider hung up (ms)"] = (request.hung_up_at - stop_sent) * 1000
        assert request.hung_up_at - stop_sent < 0.3, f"hung up {request.hung_up_at - stop_sent:.3f} s after the stop"

        ended = [await tab.wait_ended(turn_id) for tab in (tab1, tab2)]
        for frame in ended:
            assert (frame["status"], frame.get("reason")) == ("interrupted", "stopped"), frame
        row = await stack.final_turn(turn_id)
        for tab in (tab1, tab2):
            await tab.history()  # anything still queued for the tab has arrived
            assert tab.seen_text(turn_id) == row["assistant_text"], tab.name
        assert (row["status"], row["interrupted"], row["stop_reason"]) == ("interrupted", True, "stopped")
        assert row["stopped_by"], "stopped_by names the tab that sent the Stop"
        assert row["client_address"] == "127.0.0.2", "X-Forwarded-For through nginx, read from the right"
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is True and ended[0]["usage"]["estimated"] is True
        assert request.hung_up_early


async def test_a_reload_onto_the_other_process_resumes_the_answer(stack_for):
    async with stack_for(KOOKEE_RESUME_GRACE_SECONDS="3") as stack:
        cookie = await stack.page_load()
        pieces = words(120)
        tab1 = await stack.open_tab(cookie, "tab1")
        turn_id, owner, request = await start_turn(stack, tab1, paced(pieces, 0.04), wait_deltas=5)
        await tab1.close()  # the reload: this tab goes...
        closed_at = time.monotonic()
        tab2 = await stack.open_tab(cookie, "tab2", process=other(owner))  # ...and comes back elsewhere
        resume = await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.resume")
        timings["b: tab closed -> turn.resume on the other process (ms)"] = (time.monotonic() - closed_at) * 1000
        assert resume["type"] == "turn.resume", resume
        # Tab 1 saw the start of what tab 2 is resumed with.
        before_reload = "".join(d["text"] for d in tab1.deltas(turn_id))
        assert resume["seq"] >= tab1.deltas(turn_id)[-1]["seq"] and resume["text"].startswith(before_reload)

        ended = await tab2.wait_ended(turn_id, timeout=20)
        assert ended["status"] == "completed" and "reason" not in ended, ended
        row = await stack.final_turn(turn_id)
        assert tab2.seen_text(turn_id) == row["assistant_text"] == "".join(pieces)
        assert row["status"] == "completed" and not row["interrupted"] and row["stop_reason"] == ""
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is False
        assert request.finished and not request.hung_up_early


async def test_a_turn_left_by_its_only_tab_stops_after_the_grace_period(stack_for):
    grace = 1.0
    async with stack_for(KOOKEE_RESUME_GRACE_SECONDS=str(grace)) as stack:
        cookie = await stack.page_load()
        tab = await stack.open_tab(cookie, "tab")
        turn_id, _, request = await start_turn(stack, tab, paced(words(1000), 0.02))
        seen = "".join(d["text"] for d in tab.deltas(turn_id))
        left_at = asyncio.get_running_loop().time()
        await tab.close()
        async with asyncio.timeout(grace + 4):
            await request.hung_up.wait()
        after = request.hung_up_at - left_at
        timings["d: last tab left -> provider hung up (s)"] = after
        assert grace - 0.2 <= after <= grace + 1.0, f"hung up {after:.2f} s after the last tab left"

        row = await stack.final_turn(turn_id)
        assert (row["status"], row["interrupted"], row["stop_reason"]) == ("interrupted", True, "left")
        assert row["assistant_text"].startswith(seen) and len(row["assistant_text"]) > len(seen), (
            "the turn ran on during the grace period"
        )
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is True
