"""Database statements per turn, against the answer's length.

Runs whole turns in this process, through the app's own code (records.
start_turn, then turns.run_turn with its checkpointer, ended by finish_turn),
against the bench provider padding every answer to a given number of words,
and counts every SQL statement by kind. Statements the checkpointer issues
are counted apart: it saves every running turn of the process in one UPDATE
per KOOKEE_CHECKPOINT_SECONDS, however many turns run, so it belongs to the
process's clock, not to a turn; so does its merge of what calibration learnt
(every 10 s).

    .venv/bin/python bench/db_writes.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from harness import SERVER_ENV, provider, save

WORDS = [10, 100, 400, 1600]
TOKENS_PER_SECOND = 400  # fast, so long answers take seconds; checkpoints still happen
KINDS = ("SELECT", "INSERT", "UPDATE", "DELETE")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for words in WORDS:
            with provider(0, TOKENS_PER_SECOND, "--words", str(words)) as (url, _):
                rows += _measure(url, Path(tmp) / "db.sqlite3", words)
    for row in rows:
        print(row)
    save("db_writes", rows)


def _measure(provider_url: str, database: Path, words: int) -> list[dict[str, Any]]:
    os.environ.update(
        {
            **SERVER_ENV,
            "DATABASE_URL": f"sqlite:///{database}",
            "OPENAI_BASE_URL": f"{provider_url}/v1",
            "OPENAI_API_KEY": "bench",
            "DJANGO_SETTINGS_MODULE": "kookee.settings",
        }
    )
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.OPENAI_BASE_URL = f"{provider_url}/v1"  # settings outlive the first setup
    call_command("migrate", verbosity=0)
    call_command("load_demo_help_center", verbosity=0)
    return [asyncio.run(_turn(question, words)) for question in ("hi", "How do webhooks work?")]


counts: Counter[str] = Counter()
_in_checkpoint = threading.local()


def _count(execute, sql, params, many, context):
    kind = sql.lstrip().split(None, 1)[0].upper()
    bucket = "checkpoint" if getattr(_in_checkpoint, "on", False) else "turn"
    counts[f"{bucket} {kind if kind in KINDS else 'other'}"] += 1
    return execute(sql, params, many, context)


def _install(connection, **kwargs) -> None:
    if _count not in connection.execute_wrappers:
        connection.execute_wrappers.append(_count)


async def _turn(question: str, words: int) -> dict[str, Any]:
    from channels.db import database_sync_to_async
    from django.db import connections
    from django.db.backends.signals import connection_created

    from billing import calibration
    from chat.engine import hub, records, turns
    from chat.visitors.identity import Visitor, hash_key

    def on_the_process_clock(work):
        def counted(*args):
            _in_checkpoint.on = True
            try:
                work(*args)
            finally:
                _in_checkpoint.on = False

        return counted

    frames: list[dict[str, Any]] = []

    class Tab:
        """The visitor's one tab, as the hub sees a socket."""

        tab_id = "bench"

        async def deliver(self, frame: dict[str, Any]) -> None:
            frames.append(frame)

    visitor = Visitor.of(hash_key(f"bench-{question}-{words}"), "10.0.0.1")
    the_hub, tab = hub.current(), Tab()
    await the_hub.join(tab, visitor.hash, None)  # the socket's connect: not the turn's work
    # The checkpointer's saves, and its merge of what calibration learnt
    # (every 10 s), are the process's, not a turn's.
    original, original_flush = records.checkpoint_turns, calibration.flush
    records.checkpoint_turns = on_the_process_clock(original)
    calibration.flush = on_the_process_clock(original_flush)
    connection_created.connect(_install)
    await database_sync_to_async(connections.close_all)()  # reconnect, with the counter
    counts.clear()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await turns.start(visitor, None, question)
    await the_hub.owned[visitor.hash].task
    seconds = loop.time() - started
    await the_hub.leave(tab, visitor.hash)
    connection_created.disconnect(_install)
    records.checkpoint_turns, calibration.flush = original, original_flush
    await database_sync_to_async(connections.close_all)()
    text = "".join(f["text"] for f in frames if f["type"] == "delta")
    row = {
        "question": question,
        "tools": question != "hi",
        "words": words,
        "answer_chars": len(text),
        "seconds": round(seconds, 2),
        **{key: counts[key] for key in sorted(counts)},
    }
    row["turn_writes"] = sum(counts[f"turn {kind}"] for kind in ("INSERT", "UPDATE", "DELETE"))
    row["turn_statements"] = sum(v for k, v in counts.items() if k.startswith("turn "))
    row["checkpoint_statements"] = sum(v for k, v in counts.items() if k.startswith("checkpoint "))
    return row


def section(results: list[dict[str, Any]], charts: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [
        "## 6. Database writes per turn",
        "",
        "Whole turns run through the app's own code against the bench provider, with every answer padded to a"
        f" given length and streamed at {TOKENS_PER_SECOND} tokens/s; every SQL statement is counted.",
        "The checkpointer's statements are counted apart: it saves all the process's running turns in one"
        " UPDATE per second, so its count follows how long the process streams, not how many turns run.",
        "",
        "| turn | answer characters | seconds | writes by the turn | all statements by the turn |"
        " checkpoint statements (shared) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in results:
        kind = "search, then answer" if row["tools"] else "direct answer"
        lines.append(
            f"| {kind} | {row['answer_chars']:,} | {row['seconds']} | {row['turn_writes']} |"
            f" {row['turn_statements']} | {row['checkpoint_statements']} |"
        )
    by_kind = {}
    for row in results:
        by_kind.setdefault(row["tools"], []).append(row)
    steady = all(len({r["turn_writes"] for r in rows}) == 1 for rows in by_kind.values())
    verdict = (
        "The turn's own writes are the same at every length"
        if steady
        else "**The turn's own writes change with the answer's length**"
    )
    lines += [
        "",
        verdict + ": the turn (and, at a visitor's first message, its conversation), one generation per round"
        " (its tool calls in the same transaction), the final text and status, and the ledger entry. Nothing is"
        " written per token.",
        "",
        "![Writes per turn against answer length](benchmarks/db_writes.png)",
        "",
    ]
    figure, axis = plt.subplots(figsize=(7, 3.2), dpi=100)
    for tools, rows in sorted(by_kind.items()):
        label = "search, then answer" if tools else "direct answer"
        axis.plot([r["answer_chars"] for r in rows], [r["turn_writes"] for r in rows], marker="o", label=label)
    axis.set_xscale("log")
    axis.set_ylim(bottom=0)
    axis.set_xlabel("answer characters")
    axis.set_ylabel("writes by the turn")
    axis.legend()
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(charts / "db_writes.png")
    plt.close(figure)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
