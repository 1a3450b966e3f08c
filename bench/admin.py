"""How the admin holds up on a large history.

Loads 20,000 conversations and 100,000 turns, each with its generations and
its ledger entry (one per turn), spread over 90 days, into a fresh database,
then times the pages support and finance use: each request five times,
median reported, with the query count. Memory of the CSV export is measured
as the peak Python allocation while streaming it.

    .venv/bin/python bench/admin.py              # a fresh SQLite database
    DATABASE_URL=postgres://... bench/admin.py   # or any database you give it
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TMP = tempfile.mkdtemp()
os.environ.setdefault("DATABASE_URL", f"sqlite:///{TMP}/bench.sqlite3")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_ALLOWED_HOSTS", "testserver")  # the test client's host

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import User  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, models, transaction  # noqa: E402
from django.db.models import F  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from billing.models import LedgerEntry  # noqa: E402
from chat.models import Conversation, Generation, Turn  # noqa: E402

CONVERSATIONS = 20_000
TURNS = 100_000
DAYS = 90
BATCH = 5_000


def load() -> None:
    rng = random.Random(7)
    now = timezone.now()
    with transaction.atomic():
        Conversation.objects.bulk_create(Conversation(visitor_hash=f"s{n}") for n in range(CONVERSATIONS))
        conversation_ids = list(Conversation.objects.values_list("id", flat=True))
        statuses = ["completed"] * 8 + ["interrupted", "truncated", "failed"]
        for start in range(0, TURNS, BATCH):
            Turn.objects.bulk_create(
                Turn(
                    conversation_id=rng.choice(conversation_ids),
                    status=rng.choice(statuses),
                    user_text=f"question {n}",
                    assistant_text="An answer of some length. " * rng.randint(1, 20),
                    model=rng.choice(["gpt-4o-mini", "gpt-4.1-mini", "kookee-offline"]),
                )
                for n in range(start, min(start + BATCH, TURNS))
            )
        turns = list(Turn.objects.values_list("id", "model"))
        generations, entries = [], []
        for turn_id, model in turns:
            rounds = rng.choice([1, 1, 2, 2, 3])
            for number in range(1, rounds + 1):
                generations.append(
                    Generation(
                        turn_id=turn_id,
                        round=number,
                        finish_reason="stop" if number == rounds else "tool_calls",
                        input_tokens=rng.randint(300, 3000),
                        output_tokens=rng.randint(10, 400),
                        started_at=now,
                        ended_at=now,
                    )
                )
            input_tokens, output_tokens = rng.randint(300, 9000), rng.randint(10, 1200)
            entries.append(
                LedgerEntry(
                    turn_id=turn_id,
                    model=model,
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    estimated=rng.random() < 0.05,
                    cost=Decimal(input_tokens * 15 + output_tokens * 60) / Decimal(100_000_000),
                )
            )
        Generation.objects.bulk_create(generations, batch_size=BATCH)
        LedgerEntry.objects.bulk_create(entries, batch_size=BATCH)
        # Spread the history over DAYS days. The ledger refuses updates by
        # design; this is a bench setting up its past, through the base class.
        for day in range(DAYS):
            picked = LedgerEntry.objects.annotate(bucket=F("id") % DAYS).filter(bucket=day)
            models.QuerySet.update(picked, created_at=now - timedelta(days=day))
            Turn.objects.annotate(bucket=F("id") % DAYS).filter(bucket=day).update(started_at=now - timedelta(days=day))


def timed(client: Client, url: str, repeat: int = 5) -> tuple[float, int, int]:
    times = []
    for _ in range(repeat):
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            response = client.get(url)
            body = b"".join(response.streaming_content) if response.streaming else response.content
            times.append(time.perf_counter() - start)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(times), len(queries.captured_queries), len(body)


def export_peak_memory(client: Client, url: str) -> tuple[int, int]:
    tracemalloc.start()
    response = client.get(url)
    size = sum(len(chunk) for chunk in response.streaming_content)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return size, peak


def main() -> None:
    call_command("migrate", verbosity=0)
    started = time.perf_counter()
    load()
    print(
        f"loaded {CONVERSATIONS:,} conversations, {TURNS:,} turns and ledger entries, "
        f"{Generation.objects.count():,} generations in {time.perf_counter() - started:.0f} s "
        f"({connection.vendor})"
    )
    admin = User.objects.create_superuser("bench", "bench@example.com", "pw")
    client = Client()
    client.force_login(admin)
    conversation = Conversation.objects.order_by("-id").first()
    pages = [
        ("conversations", "/admin/chat/conversation/"),
        ("conversations, searched", "/admin/chat/conversation/?q=question+4242"),
        ("one conversation", f"/admin/chat/conversation/{conversation.pk}/change/"),
        ("turns", "/admin/chat/turn/"),
        ("turns, wasted generations", "/admin/chat/turn/?wasted=yes"),
        ("turns, by generation count", "/admin/chat/turn/?o=-5"),
        ("ledger (totals and chart)", "/admin/billing/ledgerentry/"),
        ("ledger, one model", "/admin/billing/ledgerentry/?model=gpt-4o-mini"),
        ("monthly summary", "/admin/billing/ledgerentry/monthly/"),
    ]
    print(f"{'page':32} {'median':>9} {'queries':>8} {'bytes':>10}")
    for name, url in pages:
        seconds, queries, size = timed(client, url)
        print(f"{name:32} {seconds * 1000:7.0f} ms {queries:8} {size:10,}")
    seconds, queries, size = timed(client, "/admin/billing/ledgerentry/export/", repeat=1)
    _, peak = export_peak_memory(client, "/admin/billing/ledgerentry/export/")
    print(f"{'CSV export, all rows':32} {seconds * 1000:7.0f} ms {queries:8} {size:10,}")
    print(f"CSV export peak Python memory: {peak / 1024 / 1024:.1f} MiB for {size / 1024 / 1024:.1f} MiB of CSV")


if __name__ == "__main__":
    main()
