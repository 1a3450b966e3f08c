"""Finance's figures (billing/reports.py), as the ledger's admin shows them:
the totals, the daily chart, the monthly summary and the usage per
conversation each add up to the ledger, follow the list's filters, take
one query, and count unpriced entries apart from the cost."""

from collections import defaultdict
from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import LedgerEntry
from billing.services import bill_once
from chat.models import Conversation, Turn
from tests.billing.admin_helpers import days_ago, ledger, listed, make_entry, page_text, read_csv, sums, totals_of, url

pytestmark = pytest.mark.django_db


# --- totals -----------------------------------------------------------------------------------


def test_totals_equal_the_ledger_for_the_filtered_set(finance):
    for n in range(3):
        make_entry(model="gpt-4o", input_tokens=1000 + n, output_tokens=10 * n, estimated=n == 1)
        make_entry(model="gpt-4o-mini", input_tokens=7777, output_tokens=77)

    response = ledger(finance, "?model=gpt-4o")

    expected = sums(LedgerEntry.objects.filter(model="gpt-4o"))
    assert expected["turns"] == 3
    assert totals_of(response) == expected
    assert response.context["totals"]["estimated_share"] == pytest.approx(1 / 3)
    page = page_text(response)
    assert f"<dd>{expected['input_tokens']:,} <small>(0 cached)</small></dd>" in page
    assert expected["cost"] == Decimal("0.0078075")
    assert "<dd>0.0078</dd>" in page  # under a cent: two significant digits
    assert "33.3%" in page


def test_totals_are_exact_over_many_entries(finance):
    # Amounts a float sum gets wrong in the last decimal place.
    for _ in range(10):
        make_entry(model="gpt-4o-mini", input_tokens=1, output_tokens=1)
        make_entry(model="gpt-4.1-nano", input_tokens=3, output_tokens=7)

    assert totals_of(ledger(finance))["cost"] == sums(LedgerEntry.objects.all())["cost"]


def test_the_totals_take_one_query(finance):
    for _ in range(3):
        make_entry()
    from billing import reports

    queryset = ledger(finance).context["cl"].queryset
    with CaptureQueriesContext(connection) as queries:
        reports.totals(queryset)

    assert len(queries.captured_queries) == 1


# --- the chart --------------------------------------------------------------------------------


def daily_sums(entries) -> dict:
    by_day = defaultdict(list)
    for entry in entries:
        by_day[timezone.localdate(entry.created_at)].append(entry)
    return {day: sums(group) for day, group in by_day.items()}


def charted(response) -> dict:
    keys = ("turns", "input_tokens", "output_tokens", "cost", "estimated_turns")
    return {d["day"]: {k: d[k] for k in keys} for d in response.context["days"] if d["turns"]}


def test_the_chart_shows_the_last_30_days_per_day(finance):
    for n in (0, 0, 1, 5, 29):
        make_entry(model="gpt-4o", input_tokens=100 * n + 1, output_tokens=n, at=days_ago(n, hour=n % 24))
    make_entry(at=days_ago(30))  # a day too old for the chart, but in the list and totals

    response = ledger(finance)

    days = response.context["days"]
    assert [d["day"] for d in days] == [timezone.localdate() - timedelta(days=n) for n in range(29, -1, -1)]
    recent = LedgerEntry.objects.filter(created_at__gte=days_ago(29, hour=0))
    assert recent.count() == 5
    assert charted(response) == daily_sums(recent)
    assert response.context["totals"]["turns"] == 6
    page = page_text(response)
    assert "<svg" in page
    assert "Cost and tokens per day" in page
    assert "Cost (USD)" in page
    assert "Tokens (in + out)" in page


def test_the_chart_follows_the_filters(finance):
    make_entry(model="gpt-4o", at=days_ago(2))
    make_entry(model="gpt-4o", estimated=True, at=days_ago(3))
    make_entry(model="gpt-4o-mini", at=days_ago(2))
    make_entry(model="gpt-4o", at=days_ago(60))
    since, until = timezone.localdate() - timedelta(days=70), timezone.localdate() - timedelta(days=1)

    response = ledger(finance, f"?model=gpt-4o&created_at__date__gte={since}&created_at__date__lte={until}")

    days = response.context["days"]
    assert (days[0]["day"], days[-1]["day"], len(days)) == (since, until, 70)
    assert charted(response) == daily_sums(LedgerEntry.objects.filter(model="gpt-4o"))


def test_the_chart_draws_an_empty_ledger(finance):
    page = page_text(ledger(finance))

    assert "No usage in this period" in page


def test_the_chart_takes_one_query(finance):
    make_entry(at=days_ago(2))
    from billing import reports

    queryset = ledger(finance).context["cl"].queryset
    with CaptureQueriesContext(connection) as queries:
        reports.daily(queryset, timezone.localdate() - timedelta(days=29), timezone.localdate())

    assert len(queries.captured_queries) == 1


# --- the monthly summary ----------------------------------------------------------------------


def at(year: int, month: int, day: int) -> datetime:
    return timezone.make_aware(datetime(year, month, day, 12))


def monthly_rows(response) -> list[tuple]:
    return [
        (m["month"], r["model"], r["turns"], r["input_tokens"], r["output_tokens"], r["cost"], r["estimated_turns"])
        for m in response.context["months"]
        for r in m["models"]
    ]


def test_the_monthly_summary_equals_the_ledger_by_month_and_model(finance):
    make_entry(model="gpt-4o", input_tokens=100, at=at(2025, 1, 1))
    make_entry(model="gpt-4o", input_tokens=200, estimated=True, at=at(2025, 1, 31))
    make_entry(model="gpt-4o-mini", input_tokens=300, at=at(2025, 1, 15))
    make_entry(model="gpt-4o", input_tokens=400, at=at(2025, 2, 1))

    response = finance.get(url("billing_ledgerentry_monthly"))

    assert response.status_code == 200
    groups = defaultdict(list)
    for entry in LedgerEntry.objects.all():
        groups[(timezone.localdate(entry.created_at).replace(day=1), entry.model)].append(entry)
    expected = [
        (month, model, *sums(groups[(month, model)]).values())
        for month, model in sorted(groups, key=lambda key: (-key[0].toordinal(), key[1]))
    ]
    assert monthly_rows(response) == expected
    totals = {m["month"]: m["total"] for m in response.context["months"]}
    for month in totals:
        in_month = [e for (m, _), group in groups.items() if m == month for e in group]
        assert {k: totals[month][k] for k in sums([]).keys()} == sums(in_month)
    assert totals[at(2025, 1, 1).date()]["estimated_share"] == pytest.approx(1 / 3)
    page = page_text(response)
    assert "January 2025" in page
    assert "February 2025" in page


def test_the_monthly_summary_follows_the_list_filters(finance):
    make_entry(model="gpt-4o", at=at(2025, 1, 1))
    make_entry(model="gpt-4o-mini", at=at(2025, 1, 2))

    list_page = ledger(finance, "?model=gpt-4o")
    response = finance.get(list_page.context["monthly_url"])

    assert [r[1] for r in monthly_rows(response)] == ["gpt-4o"]
    assert list_page.context["monthly_url"] in page_text(list_page)


def test_the_monthly_summary_takes_one_query(finance):
    make_entry(at=at(2025, 1, 1))
    make_entry(at=at(2025, 2, 1))
    from billing import reports

    queryset = ledger(finance).context["cl"].queryset
    with CaptureQueriesContext(connection) as queries:
        reports.monthly(queryset)

    assert len(queries.captured_queries) == 1


# --- unpriced entries -------------------------------------------------------------------------


def test_unpriced_entries_are_counted_apart_from_the_cost(finance):
    priced = make_entry(model="gpt-4o-mini", input_tokens=1_000_000, output_tokens=0)
    for _ in range(2):
        make_entry(model="mystery-model", input_tokens=1_000_000, output_tokens=0)

    response = ledger(finance)

    totals = response.context["totals"]
    assert (totals["turns"], totals["unpriced"], totals["cost"]) == (3, 2, priced.cost)
    page = page_text(response)
    assert "0.15" in page
    assert "plus <a href=" in page and ">2 unpriced</a>" in page
    assert ">unpriced<" in page  # the entries' own cost column


def test_the_monthly_summary_says_how_many_are_unpriced(finance):
    make_entry(model="mystery-model")
    make_entry(model="gpt-4o-mini")

    page = page_text(finance.get(url("billing_ledgerentry_monthly")))

    assert '<span class="unpriced">unpriced</span>' in page  # the model's row
    assert "plus 1 unpriced" in page  # the month's total


# --- cached and reasoning tokens, per conversation --------------------------------------------


def test_totals_monthly_and_export_carry_cached_and_reasoning_tokens(finance):
    turn_ids = []
    for cached, reasoning in ((300, 40), (500, 0)):
        conversation = Conversation.objects.create(visitor_hash="k")
        turn = Turn.objects.create(conversation=conversation, status="completed", user_text="q", model="gpt-4o-mini")
        bill_once(
            turn.id,
            model="gpt-4o-mini",
            input_tokens=1000,
            cached_input_tokens=cached,
            output_tokens=100,
            reasoning_tokens=reasoning,
            estimated=False,
        )
        turn_ids.append(turn.id)

    totals = ledger(finance).context["totals"]
    months = finance.get(url("billing_ledgerentry_monthly")).context["months"]
    rows = read_csv(finance.get(url("billing_ledgerentry_export")))

    assert (totals["cached_input_tokens"], totals["reasoning_tokens"]) == (800, 40)
    assert (months[0]["total"]["cached_input_tokens"], months[0]["total"]["reasoning_tokens"]) == (800, 40)
    assert {int(r["turn_id"]): (r["cached_input_tokens"], r["reasoning_tokens"]) for r in rows} == {
        turn_ids[0]: ("300", "40"),
        turn_ids[1]: ("500", "0"),
    }


def test_usage_per_conversation_adds_up_and_links_to_its_entries(finance):
    first = make_entry(model="gpt-4o", input_tokens=1_000_000, output_tokens=0)
    conversation = first.turn.conversation
    turn = Turn.objects.create(conversation=conversation, status="completed", user_text="q", model="gpt-4o")
    bill_once(turn.id, model="gpt-4o", input_tokens=1_000_000, output_tokens=0, estimated=False)
    cheap = make_entry(model="gpt-4o-mini", input_tokens=10, output_tokens=0)

    response = finance.get(url("billing_ledgerentry_conversations"))

    rows = response.context["rows"]
    assert [(r["conversation"], r["turns"], r["cost"]) for r in rows] == [
        (conversation.public_id, 2, Decimal("5")),
        (cheap.turn.conversation.public_id, 1, cheap.cost),
    ]
    entries = ledger(finance, "?" + rows[0]["entries_url"].split("?", 1)[1])
    assert sorted(listed(entries)) == sorted([first.pk, LedgerEntry.objects.get(turn=turn).pk])
    assert "5.00" in page_text(response)


def test_usage_per_conversation_follows_the_filters(finance):
    make_entry(model="gpt-4o")
    kept = make_entry(model="gpt-4o-mini")

    rows = finance.get(url("billing_ledgerentry_conversations") + "?model=gpt-4o-mini").context["rows"]

    assert [r["conversation"] for r in rows] == [kept.turn.conversation.public_id]
