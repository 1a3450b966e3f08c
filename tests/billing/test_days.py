"""One calendar: budgets, the daily chart, the date filter and the monthly
summary cut days (and months) at midnight in TIME_ZONE, never in UTC."""

from datetime import timedelta
from unittest import mock

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from billing import days, reports
from billing.models import LedgerEntry
from billing.services import bill_once
from chat.models import Conversation, DayBudget, Turn
from chat.visitors import limits
from chat.visitors.identity import Visitor, hash_key
from chat.visitors.limits import LimitReached

pytestmark = pytest.mark.django_db

ZONE = "America/Sao_Paulo"  # UTC-3: its midnight is 03:00 UTC


@pytest.fixture(autouse=True)
def sao_paulo(settings):
    settings.TIME_ZONE = ZONE


def entry_at(when, tokens=1000, model="gpt-4o-mini"):
    turn = Turn.objects.create(
        conversation=Conversation.objects.create(visitor_hash="someone"), user_text="q", model=model
    )
    entry = bill_once(turn.id, model=model, input_tokens=tokens, output_tokens=0, estimated=False)
    table = connection.ops.quote_name(LedgerEntry._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET created_at = %s WHERE id = %s",
            [connection.ops.adapt_datetimefield_value(when), entry.pk],
        )
    return LedgerEntry.objects.get(pk=entry.pk)


@pytest.fixture
def around_midnight():
    """An entry half an hour before the site's midnight and one half an hour
    after: the same day in UTC, two days here."""
    midnight = days.start_of_today()
    assert midnight.utcoffset() == timedelta(hours=-3)
    return entry_at(midnight - timedelta(minutes=30)), entry_at(midnight + timedelta(minutes=30))


def test_the_site_day_starts_at_midnight_in_time_zone():
    start = days.start_of_today()
    assert (start.hour, start.minute, str(start.tzinfo)) == (0, 0, ZONE)


@pytest.mark.parametrize("activated", [None, "UTC", "Asia/Tokyo"])
def test_the_daily_chart_cuts_days_at_the_sites_midnight(around_midnight, activated):
    # Whatever time zone a request has activated, the site's calendar holds.
    with timezone.override(activated):
        today = days.today()
        daily = reports.daily(LedgerEntry.objects.all(), today - timedelta(days=1), today)
    assert [row["turns"] for row in daily] == [1, 1]


def test_the_date_filter_cuts_days_at_the_sites_midnight(around_midnight, admin_client: Client):
    _, after = around_midnight
    today = days.today().isoformat()
    url = reverse("admin:billing_ledgerentry_changelist")

    response = admin_client.get(url, {"created_at__date__gte": today, "created_at__date__lte": today})

    assert [e.pk for e in response.context["cl"].result_list] == [after.pk]


@pytest.mark.parametrize("activated", [None, "UTC"])
def test_the_budgets_count_the_sites_day(settings, activated):
    # Held and settled on the site's today, whatever time zone a request has
    # activated: 02:00 UTC is still yesterday in Sao Paulo.
    visitor = Visitor.of(hash_key("visitor"), "203.0.113.9")
    settings.KOOKEE_TOKENS_PER_DAY = 1000
    settings.KOOKEE_NETWORK_SHARE_OF_DAY = 1.0
    late = days.start_of_today() + timedelta(hours=23, minutes=30)  # 02:30 UTC tomorrow
    with timezone.override(activated), freeze_now(late):
        held = limits.reserve(visitor, 600)
        with pytest.raises(LimitReached) as refused:
            limits.reserve(visitor, 600)
    assert held["day"] == days.today().isoformat()
    assert refused.value.code == "network_budget_exhausted"  # the smallest first: the network's
    assert DayBudget.objects.get(key=limits.SITE).day == days.today()


def freeze_now(when):
    return mock.patch.object(timezone, "now", lambda: when)


def test_months_are_cut_at_the_sites_midnight_on_the_first():
    first = days.day_start(days.today().replace(day=1))
    entry_at(first - timedelta(minutes=1))  # the last minute of last month, here (already this month in UTC)
    entry_at(first + timedelta(minutes=1))

    months = reports.monthly(LedgerEntry.objects.all())

    assert [(m["month"], m["total"]["turns"]) for m in months] == [
        (first.date(), 1),
        ((first - timedelta(days=1)).date().replace(day=1), 1),
    ]
