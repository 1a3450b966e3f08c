"""The ledger as CSV (billing/exports.py, from the ledger's admin): the
filtered list, plain decimals, formulas neutralised, streamed in chunks,
under WSGI and ASGI."""

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.http import StreamingHttpResponse
from django.test import AsyncClient
from django.utils import timezone

from billing import exports
from billing.models import LedgerEntry
from billing.services import price_for
from chat.models import Conversation, Turn
from tests.billing.admin_helpers import PASSWORD, days_ago, ledger, make_entry, page_text, read_csv, totals_of, url

pytestmark = pytest.mark.django_db


def test_the_export_is_the_filtered_list(finance):
    for n in range(3):
        make_entry(model="gpt-4o", input_tokens=1000 + n, output_tokens=n, estimated=n == 2, status="failed")
        make_entry(model="gpt-4o-mini", input_tokens=5)
    list_page = ledger(finance, "?model=gpt-4o")
    assert list_page.context["export_url"].endswith("?model=gpt-4o")
    assert list_page.context["export_url"].replace("&", "&amp;") in page_text(list_page)

    rows = read_csv(finance.get(list_page.context["export_url"]))

    expected = LedgerEntry.objects.filter(model="gpt-4o").order_by("-created_at", "-id")
    assert rows == [
        {
            "created_at": e.created_at.isoformat(),
            "turn_id": str(e.turn_id),
            "model": "gpt-4o",
            "input_tokens": str(e.input_tokens),
            "output_tokens": str(e.output_tokens),
            "estimated": "true" if e.estimated else "false",
            "cost": f"{e.cost.normalize():f}",
            "turn_status": "failed",
            "cached_input_tokens": "0",
            "reasoning_tokens": "0",
            "conversation": str(e.turn.conversation.public_id),
            "price_id": str(price_for("gpt-4o").pk),
            "input_per_million": "2.5",
            "cached_input_per_million": "1.25",
            "output_per_million": "10",
        }
        for e in expected
    ]
    assert {
        "turns": len(rows),
        "input_tokens": sum(int(r["input_tokens"]) for r in rows),
        "output_tokens": sum(int(r["output_tokens"]) for r in rows),
        "cost": sum(Decimal(r["cost"]) for r in rows),
        "estimated_turns": sum(r["estimated"] == "true" for r in rows),
    } == totals_of(list_page)


def test_the_export_writes_plain_decimals_and_unpriced_as_empty(finance):
    free = make_entry(model="kookee-offline")
    unpriced = make_entry(model="mystery-model")
    tiny = make_entry(model="gpt-4o-mini", input_tokens=1, output_tokens=0)

    rows = {int(r["turn_id"]): r for r in read_csv(finance.get(url("billing_ledgerentry_export")))}

    assert free.cost == 0
    assert rows[free.turn_id]["cost"] == "0"  # not 0E-8
    assert rows[unpriced.turn_id]["cost"] == ""  # unpriced, not free
    assert rows[unpriced.turn_id]["price_id"] == ""
    assert rows[tiny.turn_id]["cost"] == "0.00000015"  # 1 x 0.15 per million
    assert all("E" not in r["cost"] for r in rows.values())


def test_the_export_follows_the_date_range(finance):
    make_entry(at=days_ago(10))
    inside = make_entry(at=days_ago(2))
    since = timezone.localdate() - timedelta(days=3)

    rows = read_csv(finance.get(url("billing_ledgerentry_export") + f"?created_at__date__gte={since}"))

    assert [int(r["turn_id"]) for r in rows] == [inside.turn_id]


def test_the_export_is_a_dated_csv_attachment(finance):
    make_entry()

    response = finance.get(url("billing_ledgerentry_export"))

    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == (
        f'attachment; filename="kookee-ledger-{timezone.localdate():%Y-%m-%d}.csv"'
    )


def test_the_export_streams_in_chunks(finance):
    conversation = Conversation.objects.create(visitor_hash="k")
    count = exports.CHUNK_ROWS + 50
    turns = Turn.objects.bulk_create(
        Turn(conversation=conversation, user_text="q", model="gpt-4o-mini", status="completed") for _ in range(count)
    )
    LedgerEntry.objects.bulk_create(
        LedgerEntry(turn=t, model="gpt-4o-mini", input_tokens=1, output_tokens=2, estimated=False, cost=1)
        for t in turns
    )

    response = finance.get(url("billing_ledgerentry_export"))

    assert isinstance(response, StreamingHttpResponse)
    chunks = list(response.streaming_content)
    assert len(chunks) == 2  # header and CHUNK_ROWS rows, then the rest
    assert b"".join(chunks).decode().count("\r\n") == count + 1


@pytest.mark.parametrize(
    ("model", "written"),
    [
        ('=HYPERLINK("http://x","y")', '\'=HYPERLINK("http://x","y")'),
        ("+1+2", "'+1+2"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
        ("gpt-4o-mini", "gpt-4o-mini"),
    ],
)
def test_the_export_neutralises_formulas(finance, model, written):
    make_entry(model=model)

    rows = read_csv(finance.get(url("billing_ledgerentry_export")))

    assert [r["model"] for r in rows] == [written]


@pytest.fixture
def superuser_with_entries(transactional_db, django_user_model):
    for n in range(3):
        make_entry(input_tokens=n)
    return django_user_model.objects.create_superuser("root", "root@example.com", PASSWORD)


@pytest.mark.django_db(transaction=True)
async def test_the_export_streams_under_asgi(superuser_with_entries):
    """Django's ASGI handler would read a plain iterator to the end before
    sending a byte (and warn, which fails the test): the export hands it an
    async one."""
    client = AsyncClient()
    await client.aforce_login(superuser_with_entries)

    response = await client.get(url("billing_ledgerentry_export"))

    assert response.status_code == 200
    assert response.is_async
    body = b"".join([chunk async for chunk in response.streaming_content]).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert sorted(int(r["input_tokens"]) for r in rows) == [0, 1, 2]
