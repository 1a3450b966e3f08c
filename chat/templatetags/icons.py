"""The thumbs of a rating as inline SVG, for the admin's templates
(chat/text.py draws them)."""

from django import template
from django.utils.safestring import SafeString, mark_safe

from chat.text import thumb_svg

register = template.Library()


@register.simple_tag
def thumb(rating: str) -> SafeString:
    return mark_safe(thumb_svg(rating))  # constants only: see thumb_svg
