"""A duration in seconds as a person reads it, for Support's figures: 7 s,
4 min, 3 h; an en dash for none."""

from django import template
from django.utils.translation import gettext

register = template.Library()
NONE = "\N{EN DASH}"


@register.filter
def duration(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    if seconds < 60:
        return gettext("%(n)s s") % {"n": round(seconds)}
    if seconds < 3600:
        return gettext("%(minutes)s min") % {"minutes": round(seconds / 60)}
    return gettext("%(hours)s h") % {"hours": round(seconds / 3600)}
