"""The thumbs of a rating, drawn as inline SVG: the same drawing as the
chat's (static/chat/chat.js), since an emoji needs an emoji font that many
systems lack. Decorative: the label beside it says what it is."""

from django import template
from django.utils.html import format_html
from django.utils.safestring import SafeString

register = template.Library()

THUMB_PATH = "M7 10v11H3V10h4zm2 11h8.3a2 2 0 0 0 2-1.6l1.4-7A2 2 0 0 0 18.7 10H14V5.5A2.5 2.5 0 0 0 11.5 3L9 10v11z"


@register.simple_tag
def thumb(value: str) -> SafeString:
    turned = ' transform="rotate(180 12 12)"' if value == "down" else ""
    return format_html(
        '<svg class="kk-thumb" viewBox="0 0 24 24" width="14" height="14" aria-hidden="true" focusable="false">'
        '<path d="{}" fill="currentColor"{}></path></svg>',
        THUMB_PATH,
        SafeString(turned),
    )
