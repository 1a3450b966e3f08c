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
PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
FENCE_LINE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


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
    then each section; a long section in parts of at most MAX_WORDS words
    (_parts), each under its section's heading and anchor."""
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
    """A section's text in parts of at most MAX_WORDS words, cut between
    its blocks (paragraphs, lists, tables, code blocks), and a block longer
    than that within it: a list between its items, a table between its rows
    (each part under its header), code between its lines (each part a fenced
    block of its own), prose between sentences, else words."""
    if not text:
        return [""]
    if _words(text) <= MAX_WORDS:
        # Whole, as passages always were: the same text, the same digest, no vector to compute again.
        return ["\n\n".join(p.strip() for p in PARAGRAPH_BREAK.split(text) if p.strip())]
    parts: list[str] = []
    current: list[str] = []
    words = 0
    for block in (piece for whole in _blocks(text) for piece in _pieces(whole)):
        size = _words(block)
        if current and words + size > MAX_WORDS:
            parts.append("\n\n".join(current))
            current, words = [], 0
        current.append(block)
        words += size
    parts.append("\n\n".join(current))
    return parts


def _words(text: str) -> int:
    return len(text.split())


def _blocks(text: str) -> list[str]:
    """The text's blocks: what lies between blank lines, a fenced code
    block whole (blank lines inside it included)."""
    blocks: list[str] = []
    lines: list[str] = []
    fence = ""
    for line in text.split("\n"):
        opening = FENCE_LINE.match(line)
        if fence:
            lines.append(line)
            if opening and opening.group(1).startswith(fence) and not opening.group(2).strip():
                fence = ""
                blocks.append("\n".join(lines))
                lines = []
            continue
        if opening:
            if lines:
                blocks.append("\n".join(lines))
            lines, fence = [line], opening.group(1)
        elif line.strip():
            lines.append(line)
        elif lines:
            blocks.append("\n".join(lines))
            lines = []
    if lines:
        blocks.append("\n".join(lines))
    return [block.strip("\n") for block in blocks if block.strip()]


def _pieces(block: str) -> list[str]:
    """A block as it is when it fits, else in pieces that each fit."""
    if _words(block) <= MAX_WORDS:
        return [block]
    lines = block.split("\n")
    opening = FENCE_LINE.match(lines[0])
    if opening:
        closed = len(lines) > 1 and lines[-1].strip().startswith(opening.group(1))
        body = lines[1:-1] if closed else lines[1:]
        fence = opening.group(1)
        return [f"{lines[0]}\n{piece}\n{fence}" for piece in _grouped(body, MAX_WORDS - 2, "\n")]
    if lines[0].lstrip().startswith("|") and len(lines) > 2 and set(lines[1].replace(" ", "")) <= set("|:-"):
        header = "\n".join(lines[:2])
        return [f"{header}\n{piece}" for piece in _grouped(lines[2:], MAX_WORDS - _words(header), "\n")]
    items = _items(lines)
    if len(items) > 1:
        return _grouped(items, MAX_WORDS, "\n")
    return _grouped(SENTENCE_END.split(block), MAX_WORDS, " ")


def _items(lines: list[str]) -> list[str]:
    """A list's items (each with the lines under it), at its own depth."""
    depth = len(lines[0]) - len(lines[0].lstrip())
    items: list[str] = []
    for line in lines:
        starts = LIST_ITEM.match(line) and len(line) - len(line.lstrip()) <= depth
        if starts or not items:
            items.append(line)
        else:
            items[-1] += "\n" + line
    return items


def _grouped(units: list[str], limit: int, joiner: str) -> list[str]:
    """Units (lines, items, sentences) joined into pieces of at most
    `limit` words; a unit longer than that is cut: at its sentences, else
    between its words."""
    limit = max(limit, 20)
    pieces: list[str] = []
    current: list[str] = []
    words = 0
    for unit in units:
        size = _words(unit)
        if size > limit:
            smaller = SENTENCE_END.split(unit)
            if len(smaller) == 1:
                tokens = unit.split()
                smaller = [" ".join(tokens[n : n + limit]) for n in range(0, len(tokens), limit)]
            if current:
                pieces.append(joiner.join(current))
                current, words = [], 0
            pieces += _grouped(smaller, limit, " ")
            continue
        if current and words + size > limit:
            pieces.append(joiner.join(current))
            current, words = [], 0
        current.append(unit)
        words += size
    if current:
        pieces.append(joiner.join(current))
    return [piece.strip() for piece in pieces] if joiner == " " else pieces
