"""Finance's and Support's pages in the page's language: numbers, months,
statuses and finish reasons (Portuguese beside English)."""

from datetime import date
from decimal import Decimal

import pytest
from django.template import Context, Template
from django.utils import translation

from billing import charts
from billing.templatetags.billing_admin import money, percent, rate
from chat.models import Conversation, Generation, Handoff, Turn

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("language", "expected"),
    [
        ("en", ["1,234.57", "0.0041", "1.50", "0.075", "3.4%"]),
        ("pt-br", ["1.234,57", "0,0041", "1,50", "0,075", "3,4%"]),
    ],
)
def test_money_rates_and_shares_in_the_pages_language(language, expected):
    with translation.override(language):
        shown = [money(Decimal("1234.567")), money(Decimal("0.00412")), rate(Decimal("1.5"))]
        shown += [rate(Decimal("0.075")), percent(0.034)]
    assert shown == expected


def test_a_month_reads_as_portuguese_writes_it():
    template = Template('{{ day|date:"YEAR_MONTH_FORMAT" }}')
    with translation.override("pt-br"):
        assert template.render(Context({"day": date(2026, 12, 1)})) == "Dezembro de 2026"
    with translation.override("en"):
        assert template.render(Context({"day": date(2026, 12, 1)})) == "December 2026"


def test_title_bars_name_statuses_in_the_pages_language():
    conversation = Conversation.objects.create()
    turn = Turn.objects.create(conversation=conversation, status="interrupted", model="m")
    handoff = Handoff.objects.create(conversation=conversation, source="visitor", status="closed")
    with translation.override("pt-br"):
        assert "interrupted" not in str(turn) and "closed" not in str(handoff)
        assert str(turn) == f"Interação {turn.pk} (interrompida)"
    with translation.override("en"):
        assert str(turn) == f"Turn {turn.pk} (interrupted)"


def test_finish_reasons_read_in_words_with_the_providers_own():
    length = Generation(finish_reason="length")
    with translation.override("pt-br"):
        assert length.finish_reason_label == "limite de tokens (length)"
    with translation.override("en"):
        assert length.finish_reason_label == "token limit (length)"
        assert Generation(finish_reason="eos").finish_reason_label == "eos"  # one we do not know, as it came
        assert Generation(finish_reason="").finish_reason_label == "– (cut short)"  # noqa: RUF001


def test_the_charts_ticks_are_in_the_pages_language():
    with translation.override("pt-br"):
        assert charts._usd(0.0025) == "$0,0025"
        assert charts._tokens(2_500_000) == "2,5 mi"
    with translation.override("en"):
        assert charts._usd(0.0025) == "$0.0025"


def test_the_charts_legend_is_in_the_pages_flow_not_at_fixed_places():
    """Placed by hand in the drawing, a longer (Portuguese) label ran into the next."""
    from pathlib import Path

    template = (
        Path(__file__).resolve().parents[2] / "templates/admin/billing/ledgerentry/daily_chart.html"
    ).read_text()
    assert '<g class="legend"' not in template
    assert '<figcaption class="ledger-chart__legend">' in template
    assert 'date:"M j, Y"' not in template  # the title's two ends in one language's format
