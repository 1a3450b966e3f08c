"""Load test: many concurrent conversations against one daphne process (or
several, on PostgreSQL and Redis), with random Stops and disconnects, then
every turn checked against the database.

Each visitor gets a session from GET /, opens /ws/chat/ and asks several
questions of the built-in offline model; each turn ends one of three ways:
read to the end, Stop after a few deltas, or the socket dropped mid-answer
(the visitor reconnects, follows the answer if it is still running, as the
page does, and asks the next question: with several processes, to
the next one, as a balancer might send it). Afterwards, for every turn:

- exactly one turn.ended for each turn.started the visitor saw, nothing after it;
- the stored text equals what the visitor received (for a dropped socket: it
  starts with what was received before the drop, and equals what the
  reconnected tab was shown when it resumed the turn);
- exactly one ledger entry; no turn left streaming.

    .venv/bin/python bench/load.py [visitors] [turns-per-visitor] [--postgres] [--processes N]

`--postgres`: on PostgreSQL and Redis (bench/harness.py's; a fresh database
is made and dropped for the run), which several processes need to share.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import POSTGRES, REDIS_URL, fresh_postgres

from tests.servers import daphne
from tests.test_daphne import _connect, _session_cookie

QUESTIONS = [
    "hi",
    "What can you do?",
    "How do I install the feedback widget on my website?",
    "How do I get a refund? And how do I export my data?",
    "Can I use SAML single sign-on with Okta?",
    "How do webhooks work?",
]


@dataclass
class TurnSeen:
    turn_id: int
    ending: str  # "read", "stop" or "drop"
    text: str = ""
    ended: list[dict] = field(default_factory=list)
    after_end: int = 0
    first_delta: float | None = None
    resumed: str | None = None  # after a drop: what the reconnected tab was shown (turn.resume, then deltas)
    stop_latency: float | None = None
    asked_at: float = 0.0


async def visitor(addresses: list[str], cookie: str, turns: int, rng: random.Random, seen: list[TurnSeen]) -> None:
    place = rng.randrange(len(addresses))
    socket = await _connect(addresses[place], cookie).__aenter__()
    try:
        for _ in range(turns):
            ending = rng.choices(["read", "stop", "drop"], weights=[6, 3, 1])[0]
            turn = await one_turn(socket, rng.choice(QUESTIONS), ending, rng)
            seen.append(turn)
            if ending == "drop":
                await socket.close()
                place = (place + 1) % len(addresses)
                socket = await _connect(addresses[place], cookie).__aenter__()
                await follow_resumed(socket, turn)
    finally:
        await socket.close()


async def one_turn(socket, question: str, ending: str, rng: random.Random) -> TurnSeen:
    asked = time.perf_counter()
    await socket.send(json.dumps({"type": "message", "text": question}))
    frame = await receive(socket)
    # Before it: an answer to a look after a reconnect (follow_resumed), or
    # the end of the dropped turn that look read, coming late from its owner.
    while frame["type"] in ("history", "turn.ended"):
        frame = await receive(socket)
    assert frame["type"] == "turn.started", frame
    turn = TurnSeen(frame["turn_id"], ending, asked_at=asked)
    stop_after = rng.randint(1, 8)
    deltas = 0
    stop_sent = None
    while True:
        frame = await receive(socket)
        if frame.get("turn_id") != turn.turn_id:
            continue
        if turn.ended:
            turn.after_end += 1
        if frame["type"] == "delta":
            turn.text += frame["text"]
            deltas += 1
            turn.first_delta = turn.first_delta or time.perf_counter() - asked
            if deltas == stop_after and ending == "stop":
                stop_sent = time.perf_counter()
                await socket.send(json.dumps({"type": "stop"}))
            if deltas == stop_after and ending == "drop":
                return turn
        elif frame["type"] == "turn.ended":
            turn.ended.append(frame)
            if stop_sent:
                turn.stop_latency = time.perf_counter() - stop_sent
            # Anything of the turn after its end would arrive right behind it.
            try:
                while True:
                    late = json.loads(await asyncio.wait_for(socket.recv(), 0.05))
                    turn.after_end += late.get("turn_id") == turn.turn_id
            except TimeoutError:
                pass
            return turn


async def follow_resumed(socket, dropped: TurnSeen) -> None:
    """A dropped turn runs on for KOOKEE_RESUME_GRACE_SECONDS: the tab that
    reconnects is given it (`turn.resume`, the answer so far, then the live
    frames) and follows it to its end. As the page does, the tab asks for
    the history on connecting, and waits for the resume while the history
    says the turn is still streaming: a loaded process, or one that must ask
    the turn's owner through Redis, may take seconds to send it, and a
    visitor who asked again before it came would rightly be told `busy`."""
    await socket.send(json.dumps({"type": "history"}))
    while True:
        frame = await receive(socket)
        if frame["type"] == "turn.resume" and frame["turn_id"] == dropped.turn_id:
            dropped.resumed = frame["text"]
            break
        if frame["type"] == "history":
            stored = [t for t in frame["turns"] if t["turn_id"] == dropped.turn_id]
            if not stored or stored[0]["status"] != "streaming":
                return  # it ended before the tab came back: nothing to follow
            await asyncio.sleep(0.5)  # not resumed yet: look again shortly, as the page does
            await socket.send(json.dumps({"type": "history"}))
    while True:
        frame = await receive(socket)
        if frame.get("turn_id") != dropped.turn_id:
            continue
        if frame["type"] == "delta":
            dropped.resumed += frame["text"]
        elif frame["type"] == "turn.ended":
            dropped.ended.append(frame)
            return


async def receive(socket) -> dict:
    return json.loads(await asyncio.wait_for(socket.recv(), 60))


TURNS_SQL = (
    "select t.id, t.status, t.assistant_text,"
    " (select count(*) from billing_ledgerentry l where l.turn_id = t.id) from chat_turn t"
)


def stored_turns(database: str) -> dict[int, tuple[str, str, int]]:
    """Every stored turn: its status, text and number of ledger entries."""
    if database.startswith("postgres"):
        import psycopg

        with psycopg.connect(database) as db:
            rows = db.execute(TURNS_SQL).fetchall()
    else:
        with contextlib.closing(sqlite3.connect(database)) as db:
            rows = db.execute(TURNS_SQL).fetchall()
    return {turn_id: (status, text, entries) for turn_id, status, text, entries in rows}


def check(database: str, seen: list[TurnSeen]) -> list[str]:
    problems = []
    rows = stored_turns(database)
    for turn in seen:
        status, text, entries = rows[turn.turn_id]
        if entries != 1:
            problems.append(f"turn {turn.turn_id}: {entries} ledger entries")
        if status == "streaming":
            problems.append(f"turn {turn.turn_id}: left streaming")
        if turn.ending == "drop":
            if not text.startswith(turn.text):
                problems.append(f"turn {turn.turn_id}: stored text does not start with what was received")
            if turn.resumed is not None and (text != turn.resumed or len(turn.ended) != 1):
                problems.append(f"turn {turn.turn_id}: resumed in a new tab, stored text differs from what it showed")
            continue
        if len(turn.ended) != 1 or turn.after_end:
            problems.append(f"turn {turn.turn_id}: {len(turn.ended)} turn.ended, {turn.after_end} frames after")
        if text != turn.text:
            problems.append(f"turn {turn.turn_id}: stored text differs from the deltas received")
        if turn.ended and turn.ended[0]["status"] != status:
            problems.append(f"turn {turn.turn_id}: status {status} stored, {turn.ended[0]['status']} sent")
    if len(rows) != len(seen):
        problems.append(f"{len(rows)} turns stored, {len(seen)} started")
    return problems


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentiles(values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    if not ms:
        return "n=0"
    p95 = ms[min(len(ms) - 1, int(len(ms) * 0.95))]
    return f"n={len(ms)} median {statistics.median(ms):.0f} ms, p95 {p95:.0f} ms, max {ms[-1]:.0f} ms"


async def main(visitors: int, turns: int, processes: int, database: str, redis: str) -> int:
    env = {
        "KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS": "1000000",  # every visitor here is 127.0.0.1
        "KOOKEE_TURNS_PER_MINUTE": "1000",
        "KOOKEE_SOCKETS_PER_NETWORK": "100000",  # one network, many visitors
        # A network may spend 5% of the site's day: here every visitor is one
        # network, and 600 help questions spend about 1.5 million tokens.
        "KOOKEE_TOKENS_PER_DAY": "100000000000",
    }
    if database:
        env["DATABASE_URL"] = database
    if redis:
        env["REDIS_URL"] = redis
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        started_servers = [stack.enter_context(daphne(tmp, **env)) for _ in range(processes)]
        addresses = [address for address, _, _ in started_servers]
        pids = [server.pid for _, _, server in started_servers]
        stored = database or str(started_servers[0][1])
        cookies = [await asyncio.to_thread(_session_cookie, addresses[n % processes]) for n in range(visitors)]
        seen: list[TurnSeen] = []
        rng = random.Random(2026)
        started = time.perf_counter()
        cpu_before = sum(cpu_seconds(pid) for pid in pids)

        results = await asyncio.gather(
            *(visitor(addresses, cookie, turns, random.Random(rng.random()), seen) for cookie in cookies),
            return_exceptions=True,
        )
        elapsed = time.perf_counter() - started
        server_cpu = sum(cpu_seconds(pid) for pid in pids) - cpu_before
        await asyncio.sleep(2)  # let the servers finish the turns of dropped sockets
        failures = [r for r in results if isinstance(r, BaseException)]
        problems = check(stored, seen)
    endings = {e: sum(t.ending == e for t in seen) for e in ("read", "stop", "drop")}
    where = "PostgreSQL" if database else "SQLite"
    layer = ", Redis" if redis else ""
    print(
        f"{visitors} concurrent visitors x {turns} turns, {processes} daphne process(es) on {where}{layer}:"
        f" {len(seen)} turns in {elapsed:.1f} s"
    )
    print(f"endings: {endings}")
    print(f"server CPU: {server_cpu:.1f} s over {elapsed:.1f} s ({server_cpu / elapsed:.0%} of one core)")
    print(f"message -> first delta: {percentiles([t.first_delta for t in seen if t.first_delta])}")
    print(f"stop -> turn.ended: {percentiles([t.stop_latency for t in seen if t.stop_latency])}")
    print(f"visitor errors: {len(failures)} {failures[:3]}")
    print(f"invariant problems: {len(problems)}")
    for problem in problems[:20]:
        print("  ", problem)
    return 1 if failures or problems else 0


def cli() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("visitors", type=int, nargs="?", default=200)
    parser.add_argument("turns", type=int, nargs="?", default=3, help="per visitor")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument(
        "--postgres", action="store_true", help=f"on a fresh PostgreSQL database ({POSTGRES}) and Redis ({REDIS_URL})"
    )
    options = parser.parse_args()
    if options.processes > 1 and not options.postgres:
        parser.error("several processes share PostgreSQL and Redis: add --postgres")
    if not options.postgres:
        return asyncio.run(main(options.visitors, options.turns, 1, "", ""))
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    with fresh_postgres("kookee_load") as database:
        return asyncio.run(main(options.visitors, options.turns, options.processes, database, REDIS_URL))


if __name__ == "__main__":
    sys.exit(cli())
