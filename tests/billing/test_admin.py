"""Finance's admin: who may open what, the read-only ledger, totals, chart,
CSV export and monthly summary adding up to the ledger, and no transcript
text anywhere finance can look."""

import csv
import io
from collections import defaultdict
from datetime import datetime, time, timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.db import connection
from django.http import StreamingHttpResponse
from django.test import AsyncClient, Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from billing import exports
from billing.models import Calibration, LedgerEntry, Price
from billing.price_admin import PRICE_HELP
from billing.services import bill_once, price_for
from chat.models import Conversation, Turn
from chat.roles import ensure_roles

pytestmark = pytest.mark.django_db

SCRIPT = "<script>alert(1)</script>"
ESCAPED_SCRIPT = "&lt;script&gt;alert(1)&lt;/script&gt;"
VISITOR_SECRET = "SECRET-VISITOR-TEXT"
MODEL_SECRET = "SECRET-MODEL-TEXT"
PASSWORD = "a-long-test-password"


# --- people --------------------------------------------------------------------------------


@pytest.fixture
def roles():
    ensure_roles()


def staff_client(django_user_model, username: str, group: str) -> Client:
    user = django_user_model.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def finance(roles, django_user_model) -> Client:
    return staff_client(django_user_model, "fiona", "Finance")


@pytest.fixture
def support(roles, django_user_model) -> Client:
    return staff_client(django_user_model, "sam", "Support")


# --- ledger entries ------------------------------------------------------------------------


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


# --- who may open what ---------------------------------------------------------------------


@pytest.fixture
def finance_pages() -> list[str]:
    entry = make_entry()
    price = Price.objects.get(model="gpt-4o-mini")
    return [
        url(LEDGER),
        url("billing_ledgerentry_change", entry.pk),
        url("billing_ledgerentry_monthly"),
        url("billing_ledgerentry_conversations"),
        url("billing_ledgerentry_export"),
        url("billing_calibration_changelist"),
        url("billing_price_changelist"),
        url("billing_price_add"),
        url("billing_price_change", price.pk),
    ]


def test_anonymous_visitors_are_sent_to_log_in(client, finance_pages):
    for page in finance_pages:
        response = client.get(page)

        assert response.status_code == 302, page
        assert response["Location"].startswith(url("login") + "?next="), page


def test_support_is_refused_every_finance_page_and_the_export(support, finance_pages):
    for page in finance_pages:
        assert support.get(page).status_code == 403, page


def test_support_cannot_add_a_price(support):
    before = Price.objects.count()

    response = support.post(url("billing_price_add"), price_form("gpt-5", "1", "2"))

    assert response.status_code == 403
    assert Price.objects.count() == before


def test_finance_opens_every_finance_page_and_the_export(finance, finance_pages):
    for page in finance_pages:
        assert finance.get(page).status_code == 200, page


def test_a_superuser_opens_every_finance_page_and_the_export(admin_client, finance_pages):
    for page in finance_pages:
        assert admin_client.get(page).status_code == 200, page


def test_finance_cannot_open_transcripts(finance):
    turn = make_entry().turn

    for page in [
        url("chat_turn_changelist"),
        url("chat_turn_change", turn.pk),
        url("chat_conversation_changelist"),
        url("chat_conversation_change", turn.conversation_id),
    ]:
        assert finance.get(page).status_code == 403, page


def test_finance_sees_only_the_billing_app_on_the_admin_index(finance):
    apps = {app["app_label"] for app in finance.get(url("index")).context["app_list"]}

    assert apps == {"billing"}


def price_form(model: str, input_price: str, output_price: str, when: datetime | None = None) -> dict:
    when = timezone.localtime(when or timezone.now())
    return {
        "model": model,
        "input_per_million": input_price,
        "output_per_million": output_price,
        "effective_from_0": when.strftime("%Y-%m-%d"),
        "effective_from_1": when.strftime("%H:%M:%S"),
    }


def test_finance_adds_and_changes_a_price_and_past_costs_stay(finance):
    entry = make_entry(model="gpt-4o-mini", input_tokens=1_000_000, output_tokens=0)
    assert entry.cost == Decimal("0.15")

    added = finance.post(url("billing_price_add"), price_form("gpt-4o-mini", "0.30", "1.20"))
    assert added.status_code == 302
    price = Price.objects.get(model="gpt-4o-mini", input_per_million=Decimal("0.30"))

    changed = finance.post(
        url("billing_price_change", price.pk), price_form("gpt-4o-mini", "0.45", "1.80", price.effective_from)
    )
    assert changed.status_code == 302
    price.refresh_from_db()
    assert (price.input_per_million, price.output_per_million) == (Decimal("0.45"), Decimal("1.80"))

    assert LedgerEntry.objects.get(pk=entry.pk).cost == Decimal("0.15")
    assert make_entry(model="gpt-4o-mini", input_tokens=1_000_000, output_tokens=0).cost == Decimal("0.45")


def test_the_price_pages_explain_that_prices_never_rewrite_the_past(finance):
    page = page_text(finance.get(url("billing_price_changelist")))
    form = page_text(finance.get(url("billing_price_add")))

    assert "records the price and rates it was billed at" in PRICE_HELP
    assert "cannot be changed or deleted" in PRICE_HELP
    assert PRICE_HELP in page
    assert PRICE_HELP in form


def test_the_price_list_says_which_price_is_in_force(finance):
    Price.objects.create(
        model="gpt-4o-mini",
        input_per_million=Decimal("0.20"),
        output_per_million=Decimal("0.80"),
        effective_from=timezone.now() - timedelta(days=1),
    )
    Price.objects.create(
        model="gpt-4o-mini",
        input_per_million=Decimal("9"),
        output_per_million=Decimal("9"),
        effective_from=timezone.now() + timedelta(days=7),
    )
    response = finance.get(url("billing_price_changelist") + "?model=gpt-4o-mini")

    admin = response.context["cl"].model_admin
    states = {str(p.input_per_million): admin.state(p) for p in response.context["cl"].result_list}
    assert states == {"0.150000": "superseded", "0.200000": "in force", "9.000000": "scheduled"}


# --- transcripts stay out of finance's view ------------------------------------------------


def test_finance_sees_no_transcript_text(finance):
    entries = [
        make_entry(user_text=f"{VISITOR_SECRET} {n}", assistant_text=f"{MODEL_SECRET} {n}", at=days_ago(n * 20))
        for n in range(3)
    ]
    price = Price.objects.get(model="gpt-4o-mini")
    pages = [
        url("index"),
        url("app_list", "billing"),
        url(LEDGER),
        url(LEDGER) + "?o=-7&_facets=True",
        url("billing_ledgerentry_change", entries[0].pk),
        url("billing_ledgerentry_history", entries[0].pk),
        url("billing_ledgerentry_monthly"),
        url("billing_ledgerentry_conversations"),
        url("billing_ledgerentry_export"),
        url("billing_calibration_changelist"),
        url("billing_price_changelist"),
        url("billing_price_change", price.pk),
    ]

    for page in pages:
        response = finance.get(page)
        assert response.status_code == 200, page
        text = page_text(response)
        assert VISITOR_SECRET not in text, page
        assert MODEL_SECRET not in text, page


def test_the_ledger_pages_never_load_transcript_text(finance):
    entry = make_entry(user_text=VISITOR_SECRET, assistant_text=MODEL_SECRET)
    pages = [
        url(LEDGER),
        url("billing_ledgerentry_change", entry.pk),
        url("billing_ledgerentry_monthly"),
        url("billing_ledgerentry_conversations"),
        url("billing_ledgerentry_export"),
        url("billing_calibration_changelist"),
    ]

    with CaptureQueriesContext(connection) as queries:
        for page in pages:
            page_text(finance.get(page))

    selects = [q["sql"] for q in queries.captured_queries if "chat_turn" in q["sql"]]
    assert selects  # the status comes from the turn...
    assert not [sql for sql in selects if "user_text" in sql or "assistant_text" in sql]  # ...and nothing else


# --- the ledger is read-only, for a superuser too ------------------------------------------


def row(entry: LedgerEntry) -> dict:
    return LedgerEntry.objects.filter(pk=entry.pk).values().get()


@pytest.fixture(params=["superuser", "finance"])
def reader(request, admin_client) -> Client:
    return admin_client if request.param == "superuser" else request.getfixturevalue("finance")


def test_no_one_adds_a_ledger_entry(reader):
    turn = Turn.objects.create(conversation=Conversation.objects.create(visitor_hash="k"), user_text="q", model="m")
    form = {"turn": turn.pk, "model": "x", "input_tokens": 1, "output_tokens": 1, "cost": "1", "_save": "Save"}

    assert reader.get(url("billing_ledgerentry_add")).status_code == 403
    assert reader.post(url("billing_ledgerentry_add"), form).status_code == 403
    assert not LedgerEntry.objects.exists()


def test_no_one_changes_a_ledger_entry(reader):
    entry = make_entry()
    before = row(entry)
    page = reader.get(url("billing_ledgerentry_change", entry.pk))
    assert page.status_code == 200
    assert 'name="_save"' not in page_text(page)
    assert page.context["adminform"].form.fields == {}  # every field is shown read-only

    response = reader.post(
        url("billing_ledgerentry_change", entry.pk),
        {"model": "gpt-4o", "input_tokens": 1, "output_tokens": 1, "estimated": "on", "cost": "99", "_save": "Save"},
    )

    assert response.status_code == 403
    assert row(entry) == before


def test_no_one_deletes_a_ledger_entry(reader):
    entry = make_entry()
    before = row(entry)

    assert reader.get(url("billing_ledgerentry_delete", entry.pk)).status_code == 403
    assert reader.post(url("billing_ledgerentry_delete", entry.pk), {"post": "yes"}).status_code == 403
    assert row(entry) == before


def test_the_ledger_list_offers_no_actions(reader):
    entry = make_entry()
    before = row(entry)

    page = ledger(reader)
    assert page.context["action_form"] is None
    assert "delete_selected" not in page_text(page)
    reader.post(url(LEDGER), {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"})

    assert row(entry) == before


def test_the_change_page_shows_the_entry(finance):
    entry = make_entry(model="gpt-4o", input_tokens=1234, output_tokens=567, status="truncated", estimated=True)

    page = page_text(finance.get(url("billing_ledgerentry_change", entry.pk)))

    for shown in ["gpt-4o", "1,234", "567", "truncated", f"{entry.cost}", str(entry.turn_id)]:
        assert shown in page


# --- the list, its filters and totals ------------------------------------------------------


def test_the_list_shows_each_entry_with_its_turn_status(finance):
    entry = make_entry(model="gpt-4o", input_tokens=1234, output_tokens=56, estimated=True, status="interrupted")

    response = ledger(finance)
    shown = response.context["cl"].result_list[0]
    page = page_text(response)

    assert listed(response) == [entry.pk]
    assert shown.turn_status == "interrupted"
    # 1,234 x 2.50 + 56 x 10.00 per million: to the cent it would read 0.00.
    assert entry.cost == Decimal("0.003645")
    for text in ["gpt-4o", "1,234", "56", "interrupted", "0.0036", "yes"]:
        assert f">{text}<" in page


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


def test_the_list_runs_the_same_queries_for_3_and_30_entries(finance, django_assert_num_queries):
    for n in range(3):
        make_entry(status="failed" if n % 2 else "completed", at=days_ago(n))
    ledger(finance)  # warm caches (content types, ...)
    # session, user, the user's and its groups' permissions, the filtered and the
    # full count, the page of entries, the chart, the totals, the model filter's
    # values, the models billed lately (for the unpriced warning)
    with django_assert_num_queries(11):
        assert len(listed(ledger(finance))) == 3

    for n in range(27):
        make_entry(model=f"model-{n % 4}", estimated=n % 3 == 0, at=days_ago(n))
    with django_assert_num_queries(11):
        assert len(listed(ledger(finance))) == 30


def test_the_price_list_runs_the_same_queries_for_few_and_many_prices(finance, django_assert_num_queries):
    ledger(finance)
    with CaptureQueriesContext(connection) as few:
        finance.get(url("billing_price_changelist"))
    for n in range(20):
        Price.objects.create(model=f"model-{n}", input_per_million=1, output_per_million=2)

    with django_assert_num_queries(len(few.captured_queries)):
        finance.get(url("billing_price_changelist"))


# --- the chart -----------------------------------------------------------------------------


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


# --- the monthly summary -------------------------------------------------------------------


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


# --- HTML in what the ledger holds is shown as text ----------------------------------------


def test_html_in_a_model_name_is_shown_escaped(finance):
    turn = Turn.objects.create(conversation=Conversation.objects.create(visitor_hash="k"), user_text="q", model="m")
    entry = LedgerEntry.objects.create(
        turn=turn, model=SCRIPT, input_tokens=1, output_tokens=1, estimated=False, cost=Decimal("0.1")
    )

    for page in [url(LEDGER), url("billing_ledgerentry_monthly"), url("billing_ledgerentry_change", entry.pk)]:
        text = page_text(finance.get(page))
        assert ESCAPED_SCRIPT in text, page
        assert SCRIPT not in text, page


# --- the CSV export ------------------------------------------------------------------------


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


# --- unpriced entries ----------------------------------------------------------------------


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


def test_the_price_filter_lists_the_unpriced_entries(finance):
    make_entry(model="gpt-4o-mini")
    unpriced = make_entry(model="mystery-model")

    response = ledger(finance, "?priced=no")

    assert listed(response) == [unpriced.pk]
    assert response.context["totals"]["unpriced"] == 1


def test_a_warning_names_the_models_in_use_that_have_no_price(finance):
    make_entry(model="mystery-model")
    make_entry(model="GPT-4o-mini")  # priced: names match in any case
    make_entry(model="old-model", at=days_ago(40))  # not in use lately

    for page in (ledger(finance), finance.get(url("billing_price_changelist"))):
        warnings = [str(m) for m in page.context["messages"]]
        assert len(warnings) == 1, warnings
        assert "mystery-model" in warnings[0]
        assert "GPT-4o-mini" not in warnings[0] and "old-model" not in warnings[0]


def test_no_warning_when_every_model_in_use_has_a_price(finance):
    make_entry(model="gpt-4o-mini")

    assert list(ledger(finance).context["messages"]) == []


def test_the_monthly_summary_says_how_many_are_unpriced(finance):
    make_entry(model="mystery-model")
    make_entry(model="gpt-4o-mini")

    page = page_text(finance.get(url("billing_ledgerentry_monthly")))

    assert '<span class="unpriced">unpriced</span>' in page  # the model's row
    assert "plus 1 unpriced" in page  # the month's total


# --- prices in use -----------------------------------------------------------------------------


def test_a_used_price_cannot_be_edited_in_the_admin(finance):
    make_entry(model="gpt-4o-mini")
    price = Price.objects.get(model="gpt-4o-mini")
    before = Price.objects.filter(pk=price.pk).values().get()

    page = finance.get(url("billing_price_change", price.pk))
    posted = finance.post(url("billing_price_change", price.pk), price_form("gpt-4o-mini", "9", "9"))
    deleted = finance.post(url("billing_price_delete", price.pk), {"post": "yes"})
    bulk = finance.post(
        url("billing_price_changelist"), {"action": "delete_selected", "_selected_action": [price.pk], "post": "yes"}
    )

    assert page.status_code == 200
    assert 'name="_save"' not in page_text(page)  # shown, read-only
    assert "Supersede with a new price" in page_text(page)
    assert posted.status_code == 403
    assert deleted.status_code == 403
    assert bulk.status_code == 200  # the confirmation page, refusing
    assert Price.objects.filter(pk=price.pk).values().get() == before


def test_superseding_a_used_price_fills_in_its_rates(finance):
    make_entry(model="gpt-4o-mini")
    price = Price.objects.get(model="gpt-4o-mini")
    supersede = finance.get(url("billing_price_change", price.pk)).context["supersede_url"]

    form = finance.get(supersede).context["adminform"].form

    assert (form.initial["model"], form.initial["input_per_million"], form.initial["output_per_million"]) == (
        "gpt-4o-mini",
        "0.15",
        "0.60",
    )
    later = timezone.now() + timedelta(days=1)
    added = finance.post(supersede, price_form("gpt-4o-mini", "0.20", "0.80", later))
    assert added.status_code == 302
    assert Price.objects.filter(model="gpt-4o-mini").count() == 2
    assert price_for("gpt-4o-mini", later + timedelta(seconds=1)).input_per_million == Decimal("0.20")


def test_a_price_name_in_another_case_on_the_same_date_is_refused(finance):
    price = Price.objects.get(model="gpt-4o-mini")

    response = finance.post(url("billing_price_add"), price_form("GPT-4o-MINI", "1", "1", price.effective_from))

    assert response.status_code == 200
    assert "already takes effect at that moment" in page_text(response)
    assert Price.objects.filter(model__iexact="gpt-4o-mini").count() == 1


def test_the_price_list_says_which_prices_were_used(finance):
    make_entry(model="gpt-4o-mini")

    page = page_text(finance.get(url("billing_price_changelist")))

    assert page.count("used: supersede to change") == 1
    assert "not used yet" in page


def test_the_change_page_shows_the_price_an_entry_used(finance):
    entry = make_entry(model="gpt-4o-mini")

    page = page_text(finance.get(url("billing_ledgerentry_change", entry.pk)))

    assert f"#{entry.price_id}: input 0.15, output 0.60, cached input 0.075 USD per million tokens" in page


# --- cached and reasoning tokens, per conversation -----------------------------------------------


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


# --- calibration ------------------------------------------------------------------------------


def test_finance_reads_each_models_calibration(finance):
    Calibration.objects.create(model="llama-3", input_chars_per_token=2.5, input_samples=12, output_samples=1)

    response = finance.get(url("billing_calibration_changelist"))

    page = page_text(response)
    assert response.status_code == 200
    for shown in ("llama-3", ">2.50<", ">12<", ">4.00<", "learnt input ratio"):
        assert shown in page
    assert finance.get(url("billing_calibration_change", Calibration.objects.get().pk)).status_code == 200
    assert finance.post(url("billing_calibration_change", Calibration.objects.get().pk), {}).status_code == 403


def test_support_cannot_read_calibrations(support):
    assert support.get(url("billing_calibration_changelist")).status_code == 403


@pytest.mark.parametrize("value", ["not-a-uuid", "' OR 1=1 --"])
def test_a_conversation_filter_that_is_no_id_is_refused(finance, value):
    make_entry()
    query = f"?turn__conversation__public_id={value}"

    listing = finance.get(url(LEDGER) + query)
    report = finance.get(url("billing_ledgerentry_conversations") + query)
    export = finance.get(url("billing_ledgerentry_export") + query)

    assert listing.status_code == 302 and listing["Location"].endswith("?e=1")  # Django's bad-filter page
    assert (report.status_code, export.status_code) == (400, 400)


def test_only_the_exact_conversation_lookup_is_offered(finance):
    entry = make_entry()
    prefix = str(entry.turn.conversation.public_id)[:4]

    response = finance.get(url(LEDGER) + f"?turn__conversation__public_id__startswith={prefix}")

    assert response.status_code == 400  # refused: no lookup may probe ids one character at a time
