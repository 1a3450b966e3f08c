"""Number formats for finance's admin pages: money to the cent, token counts
grouped, the same everywhere, and in the page's language (1,234.57 in
English, 1.234,57 in Portuguese)."""

from decimal import ROUND_HALF_UP, Decimal

from django import template
from django.utils import formats
from django.utils.translation import gettext

register = template.Library()

CENT = Decimal("0.01")


@register.filter
def grouped(value: int | Decimal) -> str:
    """Thousands grouped, every decimal place kept: 1,234.00045000."""
    return formats.number_format(value, force_grouping=True)


@register.filter
def money(value: Decimal | None) -> str:
    """USD to the cent: 1,234.57. An amount under a cent keeps two
    significant digits (0.00045), so that it never reads as nothing; None is
    "unpriced", never 0."""
    if value is None:
        return gettext("unpriced")
    value = Decimal(value)
    if value == 0 or abs(value) >= CENT:
        return grouped(value.quantize(CENT, ROUND_HALF_UP))
    rounded = value.quantize(Decimal(1).scaleb(value.adjusted() - 1), ROUND_HALF_UP)
    # In the page's own format, as every other figure: 0,00045 in Portuguese.
    return money(rounded) if abs(rounded) >= CENT else formats.number_format(rounded)


@register.filter
def rate(value: Decimal | None) -> str:
    """A price per million tokens: cents always, further places only when
    they count (2.00, 0.15, 0.075)."""
    if value is None:
        return ""
    if value == round(value, 2):
        return formats.number_format(value, 2, force_grouping=True)
    return formats.number_format(value.normalize(), force_grouping=True)


@register.filter
def percent(value: float) -> str:
    """3.4% in English, 3,4% in Portuguese."""
    return formats.number_format(round(value * 100, 1), 1) + "%"
