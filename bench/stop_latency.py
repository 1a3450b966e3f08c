"""How fast Stop reaches the provider, and how the offline model paces.

Serves the app with a real daphne process, points it at a scripted provider
on loopback that streams a token every 20 ms forever, and for each of N turns
sends Stop after a few deltas, measuring:

- stop -> provider saw its request closed (goal: under 100 ms)
- stop -> turn.ended received by the visitor

Then, against the offline model, the time to first delta and the pace.

    .venv/bin/python bench/stop_latency.py [turns]
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.provider import Pause, ScriptedProvider, text
from tests.servers import daphne
from tests.test_daphne import Visitor, _connect, _session_cookie

# One visitor asks every question, as fast as it can: lift its turn rate and
# frame budget, which would otherwise (rightly) refuse it.
UNLIMITED = {"KOOKEE_TURNS_PER_MINUTE": "100000", "KOOKEE_FRAME_BURST": "100000", "KOOKEE_FRAMES_PER_SECOND": "10000"}


def endless_answer() -> list:
    steps = []
    for n in range(2000):
        steps += [text(f" word{n}"), Pause(0.02)]
    return steps


async def stop_latency(turns: int) -> None:
    provider = ScriptedProvider()
    url = await provider.start()
    provider.queue(*[endless_answer() for _ in range(turns)])
    hangups, endings = [], []
    with (
        tempfile.TemporaryDirectory() as tmp,
        daphne(Path(tmp), OPENAI_BASE_URL=url, OPENAI_API_KEY="k", **UNLIMITED) as (address, _, _),
    ):
        async with _connect(address, _session_cookie(address)) as socket:
            visitor = Visitor(socket)
            for number in range(1, turns + 1):
                turn_id = (await visitor.ask("tell me everything"))["turn_id"]
                for _ in range(3):
                    await visitor.receive_until("delta")
                request = provider.requests[number - 1]
                loop = asyncio.get_running_loop()
                sent = loop.time()
                await socket.send(json.dumps({"type": "stop"}))
                ended = await visitor.receive_until("turn.ended")
                assert ended["turn_id"] == turn_id and ended["status"] == "interrupted"
                endings.append(loop.time() - sent)
                async with asyncio.timeout(5):
                    await request.hung_up.wait()
                hangups.append(request.hung_up_at - sent)
    await provider.stop()
    report("stop -> provider request closed", hangups)
    report("stop -> turn.ended at the visitor", endings)


async def offline_pace(turns: int) -> None:
    firsts, rates = [], []
    with tempfile.TemporaryDirectory() as tmp, daphne(Path(tmp)) as (address, _, _):
        async with _connect(address, _session_cookie(address)) as socket:
            visitor = Visitor(socket)
            for _ in range(turns):
                start = time.perf_counter()
                await visitor.ask("What can you do?")
                await visitor.receive_until("delta")
                first = time.perf_counter()
                deltas = 1
                while (await visitor.receive())["type"] != "turn.ended":
                    deltas += 1
                firsts.append(first - start)
                rates.append((deltas - 1) / (time.perf_counter() - first))
    report("offline: message -> first delta", firsts)
    print(f"offline: deltas per second, median {statistics.median(rates):.1f} (setting: 40)")


def report(label: str, seconds: list[float]) -> None:
    ms = sorted(s * 1000 for s in seconds)
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    print(f"{label}: n={len(ms)} median {statistics.median(ms):.1f} ms, p95 {p95:.1f} ms, max {ms[-1]:.1f} ms")


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 30
    asyncio.run(stop_latency(count))
    asyncio.run(offline_pace(5))
