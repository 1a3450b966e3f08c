"""Filters for support's transcripts: answers rendered as the visitor saw
them, tool calls readable."""

from __future__ import annotations

import json

from django import template
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from chat.text import mended

register = template.Library()

# CommonMark with tables and strikethrough, as the chat page renders. Raw
# HTML in the text is shown as text, never run; links with a javascript:,
# vbscript: or data: address are not made links (markdown-it's own check);
# images are not loaded (a model's answer could point at any server).
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])
_markdown.disable("image")


@register.filter
def markdown(text: str) -> SafeString:
    # Safe: markdown-it escapes every text it emits, and html is off.
    return mark_safe(_markdown.render(text or ""))


@register.filter
def answer_markdown(text: str, status: str = "") -> SafeString:
    """An answer as the visitor saw it: one that did not complete ends as
    the chat showed it (chat/text.py, mended)."""
    return markdown(mended(text or "") if status and status != "completed" else text)


@register.filter
def readable_json(value: str) -> str:
    """JSON as a person reads it: "→" rather than "\\u2192". Anything that is
    not JSON is shown as it is."""
    try:
        return json.dumps(json.loads(value), ensure_ascii=False)
    except (TypeError, ValueError):
        return value
