"""The price table in the admin (billing/price_admin.py): finance adds and
supersedes prices, which never rewrite the past; a price a ledger entry
used cannot be changed or deleted; models billed without a price are
named in a warning."""

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from billing.models import LedgerEntry, Price
from billing.price_admin import PRICE_HELP
from billing.services import price_for
from tests.billing.admin_helpers import days_ago, ledger, make_entry, page_text, url

pytestmark = pytest.mark.django_db


# --- adding and changing prices ---------------------------------------------------------------


def price_form(model: str, input_price: str, output_price: str, when: datetime | None = None) -> dict:
    when = timezone.localtime(when or timezone.now())
    return {
        "model": model,
        "input_per_million": input_price,
        "output_per_million": output_price,
        "effective_from_0": when.strftime("%Y-%m-%d"),
        "effective_from_1": when.strftime("%H:%M:%S"),
    }


def test_support_cannot_add_a_price(support):
    before = Price.objects.count()

    response = support.post(url("billing_price_add"), price_form("gpt-5", "1", "2"))

    assert response.status_code == 403
    assert Price.objects.count() == before


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


def test_the_price_list_runs_the_same_queries_for_few_and_many_prices(finance, django_assert_num_queries):
    ledger(finance)
    with CaptureQueriesContext(connection) as few:
        finance.get(url("billing_price_changelist"))
    for n in range(20):
        Price.objects.create(model=f"model-{n}", input_per_million=1, output_per_million=2)

    with django_assert_num_queries(len(few.captured_queries)):
        finance.get(url("billing_price_changelist"))


# --- models in use without a price ------------------------------------------------------------


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


# --- prices in use ----------------------------------------------------------------------------


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
