"""The ledger's filters (billing/ledger_filters.py): dates typed in or
picked from common ranges, a date that names no usable day answered with a
400 on every ledger page, the turn's status, the model, and priced or
not; the list and its totals follow them."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.billing.admin_helpers import LEDGER, days_ago, ledger, listed, make_entry, page_text, sums, totals_of, url

pytestmark = pytest.mark.django_db


# --- dates ------------------------------------------------------------------------------------


def test_the_date_range_filter_narrows_the_list_and_totals(finance):
    old = make_entry(at=days_ago(10))
    first_day = make_entry(at=days_ago(6, hour=0, minute=0))
    last_day = make_entry(at=days_ago(1, hour=23, minute=59))
    today = make_entry(at=days_ago(0, hour=0, minute=0))
    since, until = timezone.localdate() - timedelta(days=6), timezone.localdate() - timedelta(days=1)

    both = ledger(finance, f"?created_at__date__gte={since}&created_at__date__lte={until}")
    from_only = ledger(finance, f"?created_at__date__gte={since}")
    to_only = ledger(finance, f"?created_at__date__lte={until}")

    assert sorted(listed(both)) == sorted([first_day.pk, last_day.pk])
    assert totals_of(both) == sums([first_day, last_day])
    assert sorted(listed(from_only)) == sorted([first_day.pk, last_day.pk, today.pk])
    assert sorted(listed(to_only)) == sorted([old.pk, first_day.pk, last_day.pk])
    assert totals_of(to_only) == sums([old, first_day, last_day])


def test_the_date_range_filter_is_a_form_that_keeps_the_other_filters(finance):
    make_entry(model="gpt-4o")

    page = page_text(ledger(finance, "?model=gpt-4o&created_at__date__gte=2024-05-01&o=3"))

    assert '<input type="hidden" name="model" value="gpt-4o">' in page
    assert '<input type="hidden" name="o" value="3">' in page
    assert '<input type="date" name="created_at__date__gte" value="2024-05-01">' in page
    assert '<input type="date" name="created_at__date__lte" value="">' in page


def test_the_quick_date_ranges_filter(finance):
    recent = make_entry(at=days_ago(3))
    make_entry(at=days_ago(40))
    spec = next(s for s in ledger(finance).context["cl"].filter_specs if s.field_path == "created_at")
    last_7_days = next(c for c in spec.choices(ledger(finance).context["cl"]) if c["display"] == "Last 7 days")

    assert listed(ledger(finance, last_7_days["query_string"])) == [recent.pk]


# --- dates that name no usable day ------------------------------------------------------------


LEDGER_PAGES = [
    LEDGER,
    "billing_ledgerentry_monthly",
    "billing_ledgerentry_conversations",
    "billing_ledgerentry_export",
]


DATE_PARAMETERS = ["created_at__date__gte", "created_at__date__lte"]


# Each once raised (ValueError, OverflowError) or was read as a date.
BAD_DATES = [
    "2026-02-30",
    "2026-13-01",
    "9999-12-31",
    "0000-01-01",
    "0001-01-01",
    "10000-01-01",
    "abc",
    "yesterday",
    "2026-1-1",
    "20260101",
    "2026-01-01T00:00",
    "\uff12\uff10\uff12\uff16-01-01",  # full-width digits
    "1" * 5000,
]


def bad_filter_message(response) -> str:
    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/plain")
    return response.content.decode()


@pytest.mark.parametrize("page", LEDGER_PAGES)
@pytest.mark.parametrize("who", ["finance", "admin_client"])
def test_a_date_filter_that_names_no_usable_day_is_a_400_on_every_ledger_page(request, page, who):
    client = request.getfixturevalue(who)
    make_entry()

    for parameter in DATE_PARAMETERS:
        for value in BAD_DATES:
            message = bad_filter_message(client.get(url(page), {parameter: value}))

            assert message.startswith(f"Bad filter: {parameter}: "), (parameter, value)
            assert len(message) < 200, (parameter, value)  # not the whole of a long value


def test_the_400_says_what_a_date_must_look_like_and_which_dates_are_counted(finance):
    malformed = finance.get(url(LEDGER), {"created_at__date__gte": "2026-02-30"})
    out_of_range = finance.get(url(LEDGER), {"created_at__date__lte": "9999-12-31"})

    assert (
        bad_filter_message(malformed) == "Bad filter: created_at__date__gte: '2026-02-30' is not a date (YYYY-MM-DD)."
    )
    assert bad_filter_message(out_of_range) == (
        "Bad filter: created_at__date__lte: '9999-12-31' is out of range (1900-01-01 to 9998-12-31)."
    )


@pytest.mark.parametrize("page", LEDGER_PAGES)
@pytest.mark.parametrize(
    ("query", "counted"),
    [
        ("?created_at__date__gte=1900-01-01", True),
        ("?created_at__date__lte=1900-01-01", False),
        ("?created_at__date__gte=9998-12-31", False),
        ("?created_at__date__lte=9998-12-31", True),
        ("?created_at__date__gte=1900-01-01&created_at__date__lte=9998-12-31", True),
    ],
)
def test_the_first_and_last_days_a_filter_may_name_still_count(finance, page, query, counted):
    entry = make_entry()

    response = finance.get(url(page) + query)

    assert response.status_code == 200
    if page == LEDGER:
        assert listed(response) == ([entry.pk] if counted else [])


@pytest.mark.parametrize("page", LEDGER_PAGES)
@pytest.mark.parametrize(
    "query",
    [
        "?created_at__year=10000",
        "?created_at__year=9999&created_at__month=12&created_at__day=31",
        "?created_at__month=2&created_at__day=30",
        "?created_at__date=2026-02-30",
        "?created_at__date__gt=9999-12-31",
        "?created_at__gte=2026-02-30",
        "?created_at__lt=0000-01-01",
        "?since=2026-02-30",
        "?until=9999-12-31",
        "?month=2026-13",
        "?period=abc",
    ],
)
def test_no_other_date_parameter_reaches_a_ledger_page(admin_client, page, query):
    # The ledger has no date hierarchy, and its pages read no period of their
    # own: every other date-ish parameter is a lookup the list does not offer.
    assert admin_client.get(url(page) + query).status_code == 400


# --- the other filters ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "picks"),
    [
        ("?estimated__exact=1", lambda e: e.estimated),
        ("?estimated__exact=0", lambda e: not e.estimated),
        ("?turn__status__exact=failed", lambda e: e.turn.status == "failed"),
        ("?model=gpt-4o", lambda e: e.model == "gpt-4o"),
        ("?model=gpt-4o&turn__status__exact=completed", lambda e: e.model == "gpt-4o" and e.turn.status == "completed"),
    ],
)
def test_the_filters_narrow_the_list_and_totals(finance, query, picks):
    entries = [
        make_entry(model="gpt-4o", estimated=True, status="completed"),
        make_entry(model="gpt-4o", status="failed", input_tokens=3),
        make_entry(model="gpt-4o-mini", status="completed", output_tokens=9),
        make_entry(model="gpt-4o-mini", estimated=True, status="failed", input_tokens=12345),
        make_entry(model="gpt-4o", status="completed", input_tokens=42),
    ]
    expected = [e for e in entries if picks(e)]
    assert 0 < len(expected) < len(entries)

    response = ledger(finance, query)

    assert sorted(listed(response)) == sorted(e.pk for e in expected)
    assert totals_of(response) == sums(expected)


def test_the_price_filter_lists_the_unpriced_entries(finance):
    make_entry(model="gpt-4o-mini")
    unpriced = make_entry(model="mystery-model")

    response = ledger(finance, "?priced=no")

    assert listed(response) == [unpriced.pk]
    assert response.context["totals"]["unpriced"] == 1
