"""Text as the database stores it and a browser shows it."""

from __future__ import annotations

import re
import unicodedata


def storable(text: str) -> str:
    """Text any database stores and any browser shows: no NUL, no lone
    surrogate (a provider can send both as JSON escapes)."""
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


# Needed by emoji and some scripts, and they reorder nothing.
_JOINERS = frozenset("\u200c\u200d")


def visible(line: str) -> str:
    """The line without control or format characters: bidi overrides,
    embeddings, isolates and marks could show it reordered, or as part of
    the text around it (a name beside its time, a line of an email)."""
    line = line.replace("\t", " ")
    return "".join(c for c in line if c in _JOINERS or unicodedata.category(c) not in ("Cc", "Cf", "Cs"))


# An answer cut short (a Stop, a limit, a failure) ends mid-markup: "**[Moderating
# posts: merging". The chat's renderer (static/chat/markdown.js, mend) shows
# such an end as it is meant, and so does the transcript, by the same rules.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})", re.MULTILINE)
_OPEN_LINK = re.compile(r"!?\[([^\[\]\n]*)(?:\]\([^()\s]*)?$")


def mended(text: str) -> str:
    """The Markdown of an answer that stopped mid-way, closed as the visitor
    saw it while it streamed: an open code fence closed, an unfinished link
    shown as its text, an open code span, strikethrough or bold closed. Only
    the last line is looked at: what came before it was complete."""
    if len(_FENCE.findall(text)) % 2:
        return text.rstrip("\n") + "\n```"
    head, _, last = text.rpartition("\n")
    last = _OPEN_LINK.sub(lambda m: m.group(1), last.rstrip())
    for marker in ("`", "~~", "**"):
        if _unclosed(last, marker):
            last += marker
    return f"{head}\n{last}" if head or text.startswith("\n") else last


def _unclosed(line: str, marker: str) -> bool:
    """Whether the line's last `marker` opens a span that nothing closes: an
    odd count, the last one followed by text."""
    if marker != "`":
        line = re.sub(r"`[^`]*`", "", line)  # code spans hold no markup
    count = line.count(marker)
    if not count % 2:
        return False
    after = line[line.rindex(marker) + len(marker) :]
    return bool(after) and not after[0].isspace()


# The thumbs of a rating, drawn: an emoji needs an emoji font that many
# systems lack (an empty box). The chat draws the same (static/chat/chat.js).
THUMB_PATH = "M7 10v11H3V10h4zm2 11h8.3a2 2 0 0 0 2-1.6l1.4-7A2 2 0 0 0 18.7 10H14V5.5A2.5 2.5 0 0 0 11.5 3L9 10v11z"


def thumb_svg(rating: str) -> str:
    """Inline SVG of a thumb up, or down for "down": decorative (aria-hidden),
    and made of constants only, so safe to put in a page as it is."""
    turned = ' transform="rotate(180 12 12)"' if rating == "down" else ""
    return (
        '<svg class="kk-thumb" viewBox="0 0 24 24" width="14" height="14" aria-hidden="true" focusable="false">'
        f'<path d="{THUMB_PATH}" fill="currentColor"{turned}></path></svg>'
    )
