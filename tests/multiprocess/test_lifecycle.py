"""A process's end (chat/engine/lifecycle.py), behind nginx: a killed
owner's turn is closed by the survivor's sweeper and its watchers told; a
SIGTERM stops the owner's turns for every tab, and nginx moves on."""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from tests.multiprocess.stack import Stack, eventually, other, paced, start_turn, timings, words

pytestmark = pytest.mark.slow


async def test_a_killed_owner_is_closed_by_a_survivor_and_its_watchers_told(stack_for):
    stale, sweep = 2.0, 1.0
    env = {
        "KOOKEE_CHECKPOINT_SECONDS": "0.5",
        "KOOKEE_STALE_TURN_SECONDS": str(stale),
        "KOOKEE_SWEEP_SECONDS": str(sweep),
    }
    async with stack_for(**env) as stack:
        cookie = await stack.page_load()
        tab1 = await stack.open_tab(cookie, "tab1")
        turn_id, owner, _ = await start_turn(stack, tab1, paced(words(3000), 0.02))
        survivor = other(owner)
        tab2 = await stack.open_tab(cookie, "watcher", process=survivor)
        first = await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.started or turn.resume")
        await tab2.wait_for(
            lambda _: len([d for d in tab2.deltas(turn_id) if d["seq"] > first.get("seq", 0)]) >= 3, "live deltas"
        )
        await eventually(
            lambda: _checkpointed(stack, turn_id), timeout=5, what="a checkpoint of the running turn's text"
        )

        victim = stack.daphnes[owner].process
        killed_at = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        await asyncio.to_thread(victim.wait, 10)

        row = await stack.final_turn(turn_id, timeout=stale + sweep + 5)
        closed_after = time.monotonic() - killed_at
        timings["e: SIGKILL -> turn closed by the survivor's sweeper (s)"] = closed_after
        assert closed_after <= stale + sweep + 1.0, f"closed {closed_after:.2f} s after the kill"
        assert (row["status"], row["interrupted"], row["stop_reason"]) == ("interrupted", True, "process_lost")
        [entry] = await stack.ledger(turn_id)
        assert entry["estimated"] is True

        ended = await tab2.wait_ended(turn_id, timeout=5)
        timings["e: SIGKILL -> watcher's turn.ended (s)"] = time.monotonic() - killed_at
        assert (ended["status"], ended.get("reason")) == ("interrupted", "process_lost"), ended
        # The watcher saw more than the last checkpoint: the stored text is a prefix of it.
        seen = tab2.seen_text(turn_id)
        assert seen.startswith(row["assistant_text"]) and row["assistant_text"], (seen[:80], row["assistant_text"])

        # The tab on the dead process lost its socket; a new one reaches the survivor through nginx.
        await tab1.wait_for(lambda _: tab1.closed, "its socket closed", timeout=10)
        tab3 = await stack.open_tab(cookie, "reconnected")
        history = await tab3.history()
        [stored] = [t for t in history["turns"] if t["turn_id"] == turn_id]
        assert stored["status"] == "interrupted"


async def _checkpointed(stack: Stack, turn_id: int) -> bool:
    row = await stack.turn(turn_id)
    return bool(row["assistant_text"])


async def test_sigterm_stops_the_owners_turn_for_every_tab_and_nginx_moves_on(stack_for):
    """A rolling restart, as docs/deploy.md describes it."""
    async with stack_for() as stack:
        cookie = await stack.page_load()
        tab1 = await stack.open_tab(cookie, "tab1")
        turn_id, owner, request = await start_turn(stack, tab1, paced(words(1000), 0.02))
        tab2 = await stack.open_tab(cookie, "watcher", process=other(owner))
        await tab2.wait_for(lambda _: tab2.first_of(turn_id), "turn.started or turn.resume")

        process = stack.daphnes[owner].process
        process.terminate()
        assert await asyncio.to_thread(process.wait, 25) == 0
        for tab in (tab1, tab2):
            ended = await tab.wait_ended(turn_id)
            assert (ended["status"], ended.get("reason")) == ("interrupted", "shutdown"), (tab.name, ended)
        row = await stack.final_turn(turn_id)
        assert (row["status"], row["stop_reason"]) == ("interrupted", "shutdown")
        assert len(await stack.ledger(turn_id)) == 1
        assert request.hung_up_early
        await tab2.history()
        for tab in (tab1, tab2):
            assert tab.seen_text(turn_id) == row["assistant_text"], tab.name

        # The page reconnects through nginx, which passes it to the process still up.
        tab3 = await stack.open_tab(cookie, "reconnected")
        history = await tab3.history()
        assert [t["status"] for t in history["turns"] if t["turn_id"] == turn_id] == ["interrupted"]
