"""Help-center ranking: BM25 over whole articles, plus a bonus for query terms
found in the title (a title says what an article is about; a body mentions
many things in passing).

A help center holds tens to a few hundred articles, so ranking in memory is
fast and needs no search engine; it works the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass

STOPWORDS = frozenset(
    """a about after all also am an and any are as at be been but by can could do does
    doing don for from get got had has have how i if in into is it its just let lot lots
    many me more most much my need no not now of on one or our out please really should so
    some than that the their them
    then there these they this to too up us use using want was way we were what when
    where which who why will with would you your yours kookee""".split()
)
TITLE_BONUS = 1.5
K1 = 1.2
B = 0.75
SNIPPET_CHARS = 280


@dataclass(frozen=True)
class Document:
    id: int
    title: str
    url: str
    body: str


def terms(text: str) -> list[str]:
    words = re.findall(r"[a-z0-9]+", text.lower())
    return [_stem(w) for w in words if w not in STOPWORDS]


def _stem(word: str) -> str:
    """A light suffix strip, enough to match "invoices" with "invoice"."""
    for suffix, keep in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)] + keep
    return word


def rank(query: str, documents: list[Document], limit: int = 3) -> list[Document]:
    """The documents that best match the query, best first."""
    wanted = set(terms(query))
    if not wanted or not documents:
        return []
    bags = [Counter(terms(d.title) + terms(d.body)) for d in documents]
    average_length = sum(sum(b.values()) for b in bags) / len(bags)
    idf = {term: _idf(term, bags) for term in wanted}
    scores = []
    for document, bag in zip(documents, bags, strict=True):
        score = _bm25(idf, bag, average_length)
        score += TITLE_BONUS * sum(idf[t] for t in wanted & set(terms(document.title)))
        if score > 0:
            scores.append((score, document))
    scores.sort(key=lambda pair: (-pair[0], pair[1].id))
    return [document for _, document in scores[:limit]]


def _idf(term: str, bags: list[Counter]) -> float:
    containing = sum(1 for bag in bags if term in bag)
    return math.log(1 + (len(bags) - containing + 0.5) / (containing + 0.5))


def _bm25(idf: dict[str, float], bag: Counter, average_length: float) -> float:
    length = sum(bag.values())
    score = 0.0
    for term, weight in idf.items():
        frequency = bag.get(term, 0)
        if frequency:
            norm = frequency + K1 * (1 - B + B * length / average_length)
            score += weight * frequency * (K1 + 1) / norm
    return score


def snippet(query: str, body: str) -> str:
    """The paragraph of the body that matches the query best, as plain text."""
    wanted = set(terms(query))
    paragraphs = [_plain(p) for p in re.split(r"\n\s*\n", body) if p.strip()]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        return ""
    best = max(paragraphs, key=lambda p: (len(wanted & set(terms(p))), -paragraphs.index(p)))
    if len(best) <= SNIPPET_CHARS:
        return best
    return best[:SNIPPET_CHARS].rsplit(" ", 1)[0] + "…"


def _plain(markdown: str) -> str:
    text = re.sub(r"```.*?```", " ", markdown, flags=re.DOTALL)
    text = re.sub(r"^\s*(#+|[-*]|\d+\.)\s+", "", text, flags=re.MULTILINE)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_`>#]", "", text)
    return " ".join(text.split())
