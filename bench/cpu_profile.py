"""Where a server's CPU goes, from a py-spy raw profile (`py-spy record -f raw`).

Each sample's stack is put in the first category whose function it passes
through, in the order below: the database work of a turn runs on Channels'
database thread, everything else on the event loop. py-spy often shows a
coroutine's stack from the coroutine down (without the event loop above
it), so each category also names the functions such a stack starts from.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

CATEGORIES = [
    ("database: start a turn (limits, insert, history)", ("start_turn",)),
    ("database: end a turn (generations, text, ledger)", ("finish_turn",)),
    ("database: record a tool round", ("record_generation", "end_round")),
    ("database: checkpoints", ("checkpoint_turns",)),
    ("database: connect a socket", ("_identify",)),
    ("worker threads: database hand-offs and commits, the rest", ("Thread._bootstrap",)),
    ("provider: send the request (openai client)", ("open_stream",)),
    (
        "provider: read the stream (httpx2, h11)",
        (
            "Stream._read",
            "_receive_event",
            "_receive_response_body",
            "ChunkedReader.__call__",
            "aiter_raw",
            "PoolByteStream.__aiter__",
            "AsyncResponseStream.__aiter__",
            "HTTP11ConnectionByteStream.__aiter__",
            "_Stream.read",
            "Body.read",
        ),
    ),
    ("provider: decode events (orjson)", ("Stream._decode", "EventParser.feed")),
    ("round loop: read chunks", ("RoundLoop._take_chunk",)),
    (
        "frames to the visitor (Channels, daphne, autobahn)",
        (
            "send_json",
            "doWrite",
            "BareRelay.play",
            "handle_reply",
            "Registry.publish",
            "Outbox.send",
            "deliver_quietly",
            "ChatConsumer.deliver",
        ),
    ),
    ("round loop: gather deltas (the window)", ("Coalescer._run", "Coalescer.put")),
    ("search", ("_search_help_center", "search_spending")),
    (
        "round loop, turn task: the rest",
        ("run_turn", "RoundLoop.run", "RoundLoop._run", "RoundLoop._stream", "RoundLoop._read", "Stream.__anext__"),
    ),
    ("frames from the visitor, handshakes", ("doRead", "ChatConsumer.receive")),
    ("event loop: polling", ("select",)),
]


def categorize(raw: Path) -> list[tuple[str, float]]:
    """Each category's share of the samples, largest first."""
    counts: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, number = line.rpartition(" ")
        samples = int(number)
        total += samples
        functions = [frame.split(" (")[0] for frame in stack.split(";")]
        for name, keys in CATEGORIES:
            if any(function.endswith(key) for function in functions for key in keys):
                counts[name] += samples
                break
        else:
            counts["other (event loop, asyncio, Twisted)"] += samples
    return [(name, count / total) for name, count in counts.most_common()] if total else []


def table(profiles: list[tuple[str, Path]]) -> list[str]:
    """Markdown rows: each category's share in each named profile, largest
    first; categories under half a percent everywhere left out."""
    shares = {name: dict(categorize(raw)) for name, raw in profiles}
    kinds = sorted(
        {kind for found in shares.values() for kind in found},
        key=lambda k: -max(found.get(k, 0) for found in shares.values()),
    )
    return [
        "| where | " + " | ".join(name for name, _ in profiles) + " |",
        "| --- |" + " ---: |" * len(profiles),
        *[
            f"| {kind} | " + " | ".join(f"{shares[name].get(kind, 0):.1%}" for name, _ in profiles) + " |"
            for kind in kinds
            if max(found.get(kind, 0) for found in shares.values()) >= 0.005
        ],
    ]
