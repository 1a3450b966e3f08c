"""What the limits cost a turn's start, on a busy day.

Loads a day of 20,000 billed turns (4,000 visitors on 1,000 networks) into a
fresh database, then times, median of 200 runs each:
- each query the start of a turn runs for the limits: the visitor's day,
  summed from their turns, and the hold in the site's and network's day
  counters (which replaced summing the day's ledger: timed too);
- `start_turn` as a whole (limits, the turn's insert, the history read).

    .venv/bin/python bench/limits.py              # a fresh SQLite database
    DATABASE_URL=postgres://... bench/limits.py   # or any database you give it
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TMP = tempfile.mkdtemp()
os.environ.setdefault("DATABASE_URL", f"sqlite:///{TMP}/bench.sqlite3")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")
# One visitor starts every timed turn: lift the rates that would refuse it.
os.environ["KOOKEE_TURNS_PER_MINUTE"] = os.environ["KOOKEE_TURNS_PER_MINUTE_PER_ADDRESS"] = "1000000"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.db.models import F, Sum  # noqa: E402

from billing.models import LedgerEntry  # noqa: E402
from chat.engine import records  # noqa: E402
from chat.models import Conversation, Turn  # noqa: E402
from chat.visitors import limits  # noqa: E402
from chat.visitors.identity import Visitor  # noqa: E402

TURNS = 20_000
VISITORS = 4_000
NETWORKS = 1_000
RUNS = 200


def load() -> None:
    with transaction.atomic():
        Conversation.objects.bulk_create(Conversation(visitor_hash=f"v{n}") for n in range(VISITORS))
        conversations = list(Conversation.objects.order_by("id").values_list("id", flat=True))
        Turn.objects.bulk_create(
            Turn(
                conversation_id=conversations[n % VISITORS],
                user_text="q",
                model="gpt-4o-mini",
                status="completed",
                client_network=f"10.0.{n % NETWORKS // 256}.{n % 256}/32",
            )
            for n in range(TURNS)
        )
        LedgerEntry.objects.bulk_create(
            LedgerEntry(
                turn_id=turn_id, model="gpt-4o-mini", input_tokens=900, output_tokens=50, estimated=False, cost=0
            )
            for turn_id in Turn.objects.values_list("id", flat=True)
        )


def median_ms(work) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    call_command("migrate", verbosity=0)
    load()
    visitor = Visitor.of("v7", "10.0.0.7")
    today = LedgerEntry.objects.filter(created_at__gte=limits._start_of_day())

    def tokens(entries) -> int:
        return entries.aggregate(total=Sum(F("input_tokens") + F("output_tokens")))["total"] or 0

    def hold() -> None:
        with transaction.atomic():
            limits.reserve(visitor, 2000)
            transaction.set_rollback(True)

    queries = {
        "the site's day, summed (before holds)": lambda: tokens(today),
        "the visitor's day, summed": lambda: tokens(today.filter(turn__conversation__visitor_hash=visitor.hash)),
        "the network's day, summed (before holds)": lambda: tokens(today.filter(turn__client_network=visitor.network)),
        "a hold in the site's and network's day": hold,
    }
    print(f"{TURNS:,} turns billed today, {VISITORS:,} visitors, {NETWORKS:,} networks")
    for label, query in queries.items():
        print(f"{label:45} {median_ms(query):7.2f} ms")
    conversation = Conversation.objects.get(visitor_hash=visitor.hash).id

    def start_turn() -> None:
        # Undone each time: a conversation runs one turn at a time (the database holds it).
        with transaction.atomic():
            records.start_turn(visitor, conversation, "hi", "m")
            transaction.set_rollback(True)

    print(f"{'start_turn, whole':45} {median_ms(start_turn):7.2f} ms")


if __name__ == "__main__":
    main()
