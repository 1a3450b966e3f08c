"""Finance's admin (billing/admin.py): who may open what, the read-only
ledger and its list, the calibrations, and no transcript text anywhere
finance can look. Its filters: test_ledger_filters.py; the prices:
test_price_admin.py; the CSV export: test_exports.py; the totals, chart,
monthly summary and usage per conversation: test_reports.py."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from billing.models import Calibration, LedgerEntry, Price
from chat.models import Conversation, Turn
from tests.billing.admin_helpers import (
    ESCAPED_SCRIPT,
    LEDGER,
    MODEL_SECRET,
    SCRIPT,
    VISITOR_SECRET,
    days_ago,
    ledger,
    listed,
    make_entry,
    page_text,
    url,
)

pytestmark = pytest.mark.django_db


# --- who may open what ------------------------------------------------------------------------


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


# --- transcripts stay out of finance's view ---------------------------------------------------


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


# --- the ledger is read-only, for a superuser too ---------------------------------------------


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


def test_the_change_page_shows_the_price_an_entry_used(finance):
    entry = make_entry(model="gpt-4o-mini")

    page = page_text(finance.get(url("billing_ledgerentry_change", entry.pk)))

    assert f"#{entry.price_id}: input 0.15, output 0.60, cached input 0.075 USD per million tokens" in page


# --- the list ---------------------------------------------------------------------------------


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


def test_the_list_runs_the_same_queries_for_3_and_30_entries(finance, django_assert_num_queries):
    for n in range(3):
        make_entry(status="failed" if n % 2 else "completed", at=days_ago(n))
    ledger(finance)  # warm caches (content types, ...)
    # session, user, the user's and its groups' permissions, the filtered and the
    # full count, the page of entries, the chart, the totals, the model filter's
    # values, the models billed lately (for the unpriced warning), the live
    # guidance (chat's readout of what it costs)
    with django_assert_num_queries(12):
        assert len(listed(ledger(finance))) == 3

    for n in range(27):
        make_entry(model=f"model-{n % 4}", estimated=n % 3 == 0, at=days_ago(n))
    with django_assert_num_queries(12):
        assert len(listed(ledger(finance))) == 30


# --- HTML in what the ledger holds is shown as text -------------------------------------------


def test_html_in_a_model_name_is_shown_escaped(finance):
    turn = Turn.objects.create(conversation=Conversation.objects.create(visitor_hash="k"), user_text="q", model="m")
    entry = LedgerEntry.objects.create(
        turn=turn, model=SCRIPT, input_tokens=1, output_tokens=1, estimated=False, cost=Decimal("0.1")
    )

    for page in [url(LEDGER), url("billing_ledgerentry_monthly"), url("billing_ledgerentry_change", entry.pk)]:
        text = page_text(finance.get(page))
        assert ESCAPED_SCRIPT in text, page
        assert SCRIPT not in text, page


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


# --- the conversation lookup ------------------------------------------------------------------


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
