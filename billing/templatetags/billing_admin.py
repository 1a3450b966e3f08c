"""Number formats for finance's admin pages."""

from decimal import Decimal

from django import template
from django.utils import formats

register = template.Library()


@register.filter
def grouped(value: int | Decimal) -> str:
    """Thousands grouped, every decimal place kept: 1,234.00045000."""
    return formats.number_format(value, force_grouping=True)


@register.filter
def percent(value: float) -> str:
    return f"{value:.1%}"
