"""The two processes race: messages sent at once from both start one turn
(the other is told busy), and turns started at once on both cannot pass a
budget together (its holds are in PostgreSQL)."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.multiprocess.stack import PROCESSES, eventually, other
from tests.provider import DONE, WaitFor, chunk, finish, text, usage

pytestmark = pytest.mark.slow


async def test_racing_messages_from_two_processes_start_one_turn(stack_for):
    async with stack_for() as stack:
        cookie = await stack.page_load()
        for _ in range(3):
            await stack.page_load()
        tabs = {name: await stack.open_tab(cookie, f"tab on {name}", process=name) for name in PROCESSES}
        started_ids = []
        for round_ in range(10):
            release = asyncio.Event()
            script = [
                chunk(delta={"role": "assistant", "content": ""}),
                text(f"Round {round_}."),
                WaitFor(release),
                text(" Done."),
                finish("stop"),
                usage(10, 3),
                DONE,
            ]
            before = stack.queue_everywhere(script)
            marks = {name: len(tab.frames) for name, tab in tabs.items()}

            def new(name, kind, marks=marks):
                return [f for f in tabs[name].frames[marks[name] :] if f["type"] == kind]

            def answered(new=new):
                ids = {f["turn_id"] for name in PROCESSES for f in new(name, "turn.started")}
                busy = [name for name in PROCESSES for f in new(name, "error") if f.get("code") == "busy"]
                return (ids, busy) if len(ids) + len(busy) >= 2 else None

            message = {"type": "message", "text": f"question {round_}"}
            await asyncio.gather(*(tab.send(message) for tab in tabs.values()))
            ids, busy = await eventually(answered, timeout=10, what=f"round {round_}: both messages answered")
            assert (len(ids), len(busy)) == (1, 1), f"round {round_}: turns started {ids}, busy to {busy}"
            [turn_id] = ids
            owner, _ = await stack.owner_of_new_request(before)
            assert busy == [other(owner)], f"round {round_}: busy went to {busy}, the turn runs on {owner}"
            streaming = await stack.scalar("select count(*) from chat_turn where status = 'streaming'")
            assert streaming == 1, f"round {round_}: {streaming} streaming turns"

            release.set()
            for tab in tabs.values():
                ended = await tab.wait_ended(turn_id)
                assert ended["status"] == "completed", ended
            started_ids.append(turn_id)

        for tab in tabs.values():
            await tab.history()
            for turn_id in started_ids:
                assert tab.seen_text(turn_id).endswith(" Done."), tab.name
                assert len([f for f in tab.of_turn(turn_id) if f["type"] == "turn.started"]) <= 1
        assert await stack.scalar("select count(*) from chat_turn") == 10
        assert await stack.scalar("select count(*) from chat_turn where status = 'completed'") == 10
        assert await stack.scalar("select count(distinct conversation_id) from chat_turn") == 1
        assert await stack.scalar("select count(*) from billing_ledgerentry") == 10
        # nginx spread the page loads over both processes.
        access = (stack.prefix / "logs" / "kookee-access.log").read_text()
        upstreams = set(re.findall(r'"GET / HTTP/1.1" 200 .* upstream=(\S+)', access))
        assert upstreams == {f"127.0.0.1:{d.port}" for d in stack.daphnes.values()}, access


async def test_turns_at_once_on_both_processes_cannot_pass_a_budget_together(stack_for):
    # One network (nginx's clients all come from 127.0.0.1) may take 10,000
    # tokens; twenty fresh visitors ask at once, ten on each process. Each
    # turn holds its worst case (about 600) from its start, in PostgreSQL:
    # some are refused, and what is billed stays within the budget.
    budget = {
        "KOOKEE_TOKENS_PER_DAY": "100000",
        "KOOKEE_NETWORK_SHARE_OF_DAY": "0.1",
        "KOOKEE_MAX_OUTPUT_TOKENS": "100",
        "KOOKEE_SOCKETS_PER_NETWORK": "1000",
    }
    async with stack_for(**budget) as stack:
        release = asyncio.Event()
        script = [chunk(delta={"role": "assistant", "content": ""}), text("Sure."), WaitFor(release)]
        script += [finish("stop"), usage(480, 100), DONE]
        for provider in stack.providers.values():
            provider.scripts.clear()
            provider.queue(*[script] * 20)
        tabs = [
            await stack.open_tab(await stack.page_load(), f"visitor {n}", process=PROCESSES[n % 2]) for n in range(20)
        ]
        await asyncio.gather(*(tab.send({"type": "message", "text": "one more, please"}) for tab in tabs))
        firsts = [
            (await tab.wait_for(lambda f: [x for x in f if x["type"] in ("turn.started", "error")], "an answer"))[0]
            for tab in tabs
        ]
        release.set()
        started = [(tab, f["turn_id"]) for tab, f in zip(tabs, firsts, strict=True) if f["type"] == "turn.started"]
        for tab, turn_id in started:
            assert (await tab.wait_ended(turn_id))["status"] == "completed"

        assert {f["code"] for f in firsts if f["type"] == "error"} == {"network_budget_exhausted"}
        assert 0 < len(started) < 20
        billed = await stack.scalar("select coalesce(sum(input_tokens + output_tokens), 0) from billing_ledgerentry")
        assert billed <= 10_000
        held = await stack.scalar("select tokens from chat_daybudget where key = 'network:127.0.0.1/32'")
        assert held == billed, "every hold settled to what was billed"
