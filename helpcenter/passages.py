"""An article cut into passages: its sections, split at their headings, each
small enough for an embedding model to read whole and for a search result to
point at (`/help/SLUG/#anchor`).

A passage carries its article's title and its heading: "Refunds" under
"Plans and pricing" means something that "Refunds" alone does not. Its
digest names what the embedding model reads, so a vector stored under it is
reused for as long as that text is the same, in any article, and an edit
re-embeds only the sections that changed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from dataclasses import dataclass

# A few hundred words: what a small embedding model reads whole (512 tokens
# for e5), and a section's worth for a visitor.
MAX_WORDS = 250
HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
FENCE = re.compile(r"^(```|~~~)", re.MULTILINE)


@dataclass(frozen=True)
class Passage:
    article_id: int
    number: int  # its place in the article, from 0
    anchor: str  # the section's id on the article's page; "" for the text before the first heading
    heading: str
    text: str
    title: str

    @property
    def embedded(self) -> str:
        """What an embedding model reads: where the passage sits, then what it says."""
        return "\n".join(part for part in (self.title, self.heading, self.text) if part)

    @property
    def digest(self) -> str:
        return digest(self.embedded)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def split(article_id: int, title: str, body: str) -> list[Passage]:
    """The article's passages, in order: the text before its first heading,
    then each section; a long section in parts of at most MAX_WORDS words,
    cut between paragraphs, each under its section's heading and anchor."""
    passages: list[Passage] = []
    for anchor, heading, text in sections(body):
        for part in _parts(text):
            passages.append(Passage(article_id, len(passages), anchor, heading, part, title))
    return passages


def sections(body: str) -> list[tuple[str, str, str]]:
    """(anchor, heading, text) for each section of a Markdown body. Headings
    inside fenced code are code, not sections."""
    fenced = _fenced_spans(body)
    starts = [m for m in HEADING.finditer(body) if not any(a <= m.start() < b for a, b in fenced)]
    found: list[tuple[str, str, str]] = []
    lead = body[: starts[0].start()] if starts else body
    if lead.strip():
        found.append(("", "", lead.strip()))
    taken: set[str] = set()
    for number, match in enumerate(starts):
        end = starts[number + 1].start() if number + 1 < len(starts) else len(body)
        heading = match.group(2).strip()
        found.append((_unique(anchor_of(heading), taken), heading, body[match.end() : end].strip()))
    return found


def anchor_of(heading: str) -> str:
    """A heading's id, as GitHub makes them: lower case, accents kept as
    their letters, punctuation dropped, spaces as hyphens."""
    decomposed = unicodedata.normalize("NFKD", heading.lower())
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    words = re.sub(r"[^\w\s-]", "", plain).split()
    return "-".join(words) or "section"


def anchors(body: str) -> list[str]:
    """The anchors of the body's headings, in order (for its page)."""
    return [anchor for anchor, heading, _ in sections(body) if heading]


def _unique(anchor: str, taken: set[str]) -> str:
    candidate, number = anchor, 1
    while candidate in taken:
        candidate = f"{anchor}-{number}"
        number += 1
    taken.add(candidate)
    return candidate


def _fenced_spans(body: str) -> list[tuple[int, int]]:
    marks = [m.start() for m in FENCE.finditer(body)]
    spans = list(zip(marks[::2], marks[1::2], strict=False))
    if len(marks) % 2:
        spans.append((marks[-1], len(body)))  # an unclosed fence runs to the end
    return spans


def _parts(text: str) -> list[str]:
    if not text:
        return [""]
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    parts: list[str] = []
    current: list[str] = []
    words = 0
    for paragraph in paragraphs:
        size = len(paragraph.split())
        if current and words + size > MAX_WORDS:
            parts.append("\n\n".join(current))
            current, words = [], 0
        current.append(paragraph)
        words += size
    parts.append("\n\n".join(current))
    return parts
