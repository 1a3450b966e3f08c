"""What the tests of finance's admin share (test_admin.py, test_ledger_filters.py,
test_price_admin.py, test_exports.py, test_reports.py): ledger entries made
through billing, the admin's pages and what they show. Finance's and
Support's logged-in clients are fixtures of conftest.py."""

import csv
import io
from datetime import datetime, time, timedelta
from decimal import Decimal

from django.db import connection
from django.http import StreamingHttpResponse
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing.models import LedgerEntry
from billing.services import bill_once
from chat.models import Conversation, Turn

SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
VISITOR_SECRET = "SECRET-VISITOR-TEXT"
MODEL_SECRET = "SECRET-MODEL-TEXT"
PASSWORD = "a-long-test-password"


def make_entry(
    *,
    model: str = "gpt-4o-mini",
    input_tokens: int = 1000,
    output_tokens: int = 500,
    estimated: bool = False,
    status: str = "completed",
    at: datetime | None = None,
    user_text: str = "How do I add a board?",
    assistant_text: str = "Open Boards and press New.",
) -> LedgerEntry:
    conversation = Conversation.objects.create(visitor_hash="k")
    turn = Turn.objects.create(
        conversation=conversation, status=status, user_text=user_text, assistant_text=assistant_text, model=model
    )
    entry = bill_once(turn.id, model=model, input_tokens=input_tokens, output_tokens=output_tokens, estimated=estimated)
    if at is not None:
        backdate(entry, at)
    return LedgerEntry.objects.get(pk=entry.pk)


def backdate(entry: LedgerEntry, when: datetime) -> None:
    """Simulates time passing: the entry was written at `when`. The ledger's
    queryset refuses update() by design, so this goes around it in raw SQL."""
    table = connection.ops.quote_name(LedgerEntry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET created_at = %s WHERE id = %s",
            [connection.ops.adapt_datetimefield_value(when), entry.pk],
        )


def days_ago(days: int, hour: int = 12, minute: int = 0) -> datetime:
    day = timezone.localdate() - timedelta(days=days)
    return timezone.make_aware(datetime.combine(day, time(hour, minute)))


def url(name: str, *args) -> str:
    return reverse(f"admin:{name}", args=args)


LEDGER = "billing_ledgerentry_changelist"


def ledger(client: Client, query: str = ""):
    response = client.get(url(LEDGER) + query)
    assert response.status_code == 200
    return response


def listed(response) -> list[int]:
    return [entry.pk for entry in response.context["cl"].result_list]


def sums(entries) -> dict:
    entries = list(entries)
    return {
        "turns": len(entries),
        "input_tokens": sum(e.input_tokens for e in entries),
        "output_tokens": sum(e.output_tokens for e in entries),
        "cost": sum((e.cost for e in entries), Decimal(0)),
        "estimated_turns": sum(e.estimated for e in entries),
    }


def totals_of(response) -> dict:
    totals = response.context["totals"]
    return {key: totals[key] for key in ("turns", "input_tokens", "output_tokens", "cost", "estimated_turns")}


def read_csv(response) -> list[dict[str, str]]:
    assert isinstance(response, StreamingHttpResponse)
    return list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))


def page_text(response) -> str:
    if response.streaming:
        return b"".join(response.streaming_content).decode()
    return response.content.decode()
