"""Relay overhead: what the app adds between the provider and the visitor.

One daphne process of the app (fresh SQLite) is pointed at the bench provider
(bench/provider.py) at 300 ms to first token and 40 tokens/s, started with
`--stamp`, so the text of every token it streams is its own send time
(` t<unix seconds>`). A few visitors (the Python `websockets` client, each
with its own X-Forwarded-For address) ask help questions back to back; each
question carries a tag word (` k<visitor>x<turn>`) so the provider's /stats
can be matched to the turn that made the request. Per turn:

- first delta: the message frame sent -> the first `delta` frame received;
- the provider's own time to first token for the turn's first request (the
  search round, whose narration is the first text the visitor sees):
  `first_token - arrived` from /stats;
- overhead: first delta - provider TTFT (client -> app, turn set-up, the
  request to the provider, and the first token's way back), and first delta
  - the configured 300 ms.

Per chunk: every stamp in a `delta` frame's text, delay = the frame's
receive time (time.time()) - the stamp. Several stamps in one frame mean the
app coalesced chunks that were waiting into one frame.

Scenarios: 1 visitor and 20 visitors, about 30 s each, low load so the
numbers are the relay's own delay, not saturation.

    .venv/bin/python bench/relay_overhead.py [--seconds S] [--visitors 1 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from harness import (
    QUESTIONS,
    cpu_seconds,
    migrate,
    percentile,
    provider,
    provider_stats,
    reset_provider,
    save,
    server_env,
    servers,
    session_of,
)

TTFT_MS = 300
TOKENS_PER_SECOND = 40
SECONDS = 30
SCENARIOS = [1, 20]
STAMP = re.compile(r"t(\d{9,11}\.\d{6})")
TAG = re.compile(r"\bk(\d+)x(\d+)\s*$")


def session_cookie(address: str, forwarded_for: str) -> str:
    """GET / as the trusted proxy would forward it: the visitor's session cookie."""
    headers = {"X-Forwarded-Proto": "https", "X-Forwarded-For": forwarded_for}
    request = urllib.request.Request(f"http://{address}/", headers=headers)
    with urllib.request.urlopen(request) as response:
        return session_of(response.headers.get_all("Set-Cookie"))


async def visitor(
    address: str, number: int, forwarded_for: str, deadline: float, start_after: float
) -> list[dict[str, Any]]:
    """Asks questions back to back until `deadline` (perf_counter); returns one record per turn."""
    import websockets

    cookie = await asyncio.to_thread(session_cookie, address, forwarded_for)
    # Spread the visitors' turns so they do not all hit the provider in step.
    await asyncio.sleep(start_after)
    headers = {"Cookie": cookie, "X-Forwarded-For": forwarded_for}
    turns = []
    async with websockets.connect(
        f"ws://{address}/ws/chat/", origin="https://127.0.0.1", additional_headers=headers, compression=None
    ) as socket:
        turn = 0
        while turn == 0 or time.perf_counter() < deadline:
            turn += 1
            tag = f"k{number}x{turn}"
            question = f"{QUESTIONS[(number + turn) % len(QUESTIONS)]} {tag}"
            await socket.send(json.dumps({"type": "message", "text": question}))
            sent = time.perf_counter()
            record: dict[str, Any] = {"tag": tag, "first_delta_ms": None, "delays_ms": [], "stamps_per_frame": []}
            while True:
                async with asyncio.timeout(60):
                    raw = await socket.recv()
                # Read both clocks first: anything done before adds to the measured delay.
                received, wall = time.perf_counter(), time.time()
                frame = json.loads(raw)
                kind = frame["type"]
                if kind == "delta":
                    if record["first_delta_ms"] is None:
                        record["first_delta_ms"] = round((received - sent) * 1000, 2)
                    stamps = [float(s) for s in STAMP.findall(frame["text"])]
                    if stamps:
                        record["delays_ms"] += [round((wall - s) * 1000, 2) for s in stamps]
                        record["stamps_per_frame"].append(len(stamps))
                elif kind == "error":
                    record["error"] = frame.get("code")
                elif kind == "turn.ended":
                    record["status"] = frame["status"]
                    break
            turns.append(record)
    return turns


async def scenario(address: str, visitors: int, seconds: float) -> list[dict[str, Any]]:
    # The first turns start within about one turn's length (~3 s).
    spread = 0 if visitors == 1 else 3
    deadline = time.perf_counter() + seconds
    tasks = [
        visitor(address, n, f"10.{visitors % 250}.{n // 250}.{n % 250 + 1}", deadline, random.uniform(0, spread))
        for n in range(visitors)
    ]
    return [turn for turns in await asyncio.gather(*tasks) for turn in turns]


def measure(address: str, pid: int, provider_url: str, visitors: int, seconds: float) -> dict[str, Any]:
    reset_provider(provider_url)
    start_cpu, start = cpu_seconds(pid), time.perf_counter()
    turns = asyncio.run(scenario(address, visitors, seconds))
    elapsed = time.perf_counter() - start
    server_cpu = cpu_seconds(pid) - start_cpu
    # The first request of each turn (by arrival) is its search round.
    first_requests: dict[str, dict[str, Any]] = {}
    for request in sorted(provider_stats(provider_url), key=lambda r: r["arrived"]):
        tag = TAG.search(request["question"])
        if tag:
            first_requests.setdefault(f"k{tag.group(1)}x{tag.group(2)}", request)
    firsts, ttfts, overheads, delays, per_frame = [], [], [], [], []
    statuses: dict[str, int] = {}
    for turn in turns:
        statuses[turn.get("status", "none")] = statuses.get(turn.get("status", "none"), 0) + 1
        delays += turn["delays_ms"]
        per_frame += turn["stamps_per_frame"]
        request = first_requests.get(turn["tag"])
        if turn["first_delta_ms"] is None or request is None or "first_token" not in request:
            continue
        ttft = (request["first_token"] - request["arrived"]) * 1000
        firsts.append(turn["first_delta_ms"])
        ttfts.append(round(ttft, 2))
        overheads.append(round(turn["first_delta_ms"] - ttft, 2))
    return {
        "visitors": visitors,
        "seconds": round(elapsed, 1),
        "turns": len(turns),
        "statuses": statuses,
        "errors": sum(1 for t in turns if "error" in t),
        "server_cpu_percent": round(100 * server_cpu / elapsed, 1),
        "first_delta_p50_ms": _round(percentile(firsts, 0.5)),
        "first_delta_p99_ms": _round(percentile(firsts, 0.99)),
        "provider_ttft_p50_ms": _round(percentile(ttfts, 0.5)),
        "overhead_p50_ms": _round(percentile(overheads, 0.5)),
        "overhead_p99_ms": _round(percentile(overheads, 0.99)),
        "over_configured_p50_ms": _round(percentile([f - TTFT_MS for f in firsts], 0.5)),
        "over_configured_p99_ms": _round(percentile([f - TTFT_MS for f in firsts], 0.99)),
        "chunk_delay_p50_ms": _round(percentile(delays, 0.5), 2),
        "chunk_delay_p99_ms": _round(percentile(delays, 0.99), 2),
        "chunk_delay_max_ms": _round(max(delays, default=None), 2),
        "chunks": len(delays),
        "frames": len(per_frame),
        "chunks_per_frame": round(statistics.mean(per_frame), 3) if per_frame else None,
        "first_delta_ms": firsts,
        "provider_ttft_ms": ttfts,
        "overhead_ms": overheads,
        "chunk_delay_ms": delays,
    }


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def run(levels: list[int], seconds: float) -> dict[str, Any]:
    rows = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        provider(TTFT_MS, TOKENS_PER_SECOND, "--stamp") as (provider_url, _),
    ):
        env = server_env(f"sqlite:///{Path(tmp) / 'db.sqlite3'}", provider_url)
        migrate(env)
        with servers(env, 1) as (addresses, processes):
            # One turn first, uncounted: the process's first turn pays for imports and warm caches.
            asyncio.run(scenario(addresses[0], 1, 0.1))
            for visitors in levels:
                row = measure(addresses[0], processes[0].pid, provider_url, visitors, seconds)
                rows.append(row)
                print(_line(row), flush=True)
    return {"provider": {"ttft_ms": TTFT_MS, "tokens_per_second": TOKENS_PER_SECOND}, "scenarios": rows}


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['visitors']:3} visitors: {row['turns']} turns {row['statuses']}, errors {row['errors']},"
        f" server CPU {row['server_cpu_percent']}%; first delta p50/p99 {row['first_delta_p50_ms']}/"
        f"{row['first_delta_p99_ms']} ms, provider TTFT p50 {row['provider_ttft_p50_ms']} ms, overhead p50/p99"
        f" {row['overhead_p50_ms']}/{row['overhead_p99_ms']} ms (over the configured {TTFT_MS} ms:"
        f" {row['over_configured_p50_ms']}/{row['over_configured_p99_ms']} ms); per chunk p50/p99/max"
        f" {row['chunk_delay_p50_ms']}/{row['chunk_delay_p99_ms']}/{row['chunk_delay_max_ms']} ms over"
        f" {row['chunks']} chunks, {row['chunks_per_frame']} chunks per frame"
    )


def section(results: dict[str, Any], charts: Path) -> str:
    """The docs/benchmarks.md section for saved results; renders only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pace = results["provider"]
    rows = results["scenarios"]
    lines = [
        "## 2. Relay overhead",
        "",
        f"One daphne process of the app (SQLite) relays the bench provider, at {pace['ttft_ms']:g} ms to first token"
        f" and {pace['tokens_per_second']:g} tokens/s with every token's text stamped with its send time, to"
        " visitors on the Python `websockets` client asking help questions back to back (a search round, then"
        " the answer), at low load. The overhead is the first delta (message sent to first `delta` received)"
        " minus the provider's own time to first token for that turn's first request; the per-chunk delay is"
        " each token's receive time minus its stamp.",
        "",
        "| visitors | turns | first delta p50 / p99 (ms) | provider TTFT p50 (ms) | overhead p50 / p99 (ms) |"
        " per-chunk delay p50 / p99 (ms) | chunks per frame |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in rows:
        lines.append(
            f"| {row['visitors']} | {row['turns']} | {row['first_delta_p50_ms']:.0f} / {row['first_delta_p99_ms']:.0f}"
            f" | {row['provider_ttft_p50_ms']:.0f} | {row['overhead_p50_ms']:.1f} / {row['overhead_p99_ms']:.1f}"
            f" | {row['chunk_delay_p50_ms']:.2f} / {row['chunk_delay_p99_ms']:.2f} | {row['chunks_per_frame']:.2f} |"
        )
    later = "; ".join(
        f"{row['over_configured_p50_ms']:.0f} ms later at p50 and {row['over_configured_p99_ms']:.0f} ms at p99"
        f" with {_visitors(row['visitors'])} (the server at {row['server_cpu_percent']:g}% of a core)"
        for row in rows
    )
    coalesced = [row for row in rows if row["chunks_per_frame"] and row["chunks_per_frame"] > 1.005]
    coalescing = (
        "Chunks per frame above 1 are tokens that were waiting together and went out in one frame."
        if coalesced
        else "Every frame carried exactly one chunk: no token waited long enough to be coalesced with the next."
    )
    lines += [
        "",
        f"Against the configured {pace['ttft_ms']:g} ms to first token, the first delta came {later}."
        f" The slowest chunk took {max(row['chunk_delay_max_ms'] for row in rows):.0f} ms. {coalescing}"
        " The client runs on the same 2-core machine, so its own event loop is part of every delay measured.",
        "",
        "![Per-chunk delay, provider to visitor](benchmarks/relay_overhead.png)",
        "",
    ]
    figure, axis = plt.subplots(figsize=(7, 3.2), dpi=100)
    for row in rows:
        delays = sorted(d for d in row["chunk_delay_ms"] if d > 0)  # a log axis
        if not delays:
            continue
        fractions = [(i + 1) / len(delays) for i in range(len(delays))]
        label = f"{_visitors(row['visitors'])} ({len(delays):,} chunks)"
        axis.plot(delays, fractions, label=label)
    axis.set_xscale("log")
    axis.set_xlabel("per-chunk delay, provider send to visitor receive (ms, log scale)")
    axis.set_ylabel("fraction of chunks")
    axis.set_ylim(0, 1.01)
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8, frameon=False)
    figure.tight_layout()
    charts.mkdir(parents=True, exist_ok=True)
    figure.savefig(charts / "relay_overhead.png")
    plt.close(figure)
    return "\n".join(lines)


def _visitors(count: int) -> str:
    return f"{count} visitor{'s' if count != 1 else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=SECONDS, help="per scenario")
    parser.add_argument("--visitors", type=int, nargs="+", default=SCENARIOS)
    args = parser.parse_args()
    results = run(args.visitors, args.seconds)
    print(f"saved {save('relay_overhead', results)}")


if __name__ == "__main__":
    main()
