"""Text as the database stores it and a browser shows it."""

from __future__ import annotations

import re


def storable(text: str) -> str:
    """Text any database stores and any browser shows: no NUL, no lone
    surrogate (a provider can send both as JSON escapes)."""
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


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
