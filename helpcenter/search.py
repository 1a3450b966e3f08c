"""The help center's one door for the rest of the project: search the
published articles, read their titles, and normalise a query as the search
sees it. Everything else in this app is its own business.

A search ranks an in-memory index (helpcenter/index.py) and returns the best
articles, each with its score and a confidence: "high" when it clears
helpcenter/ranking.py's relevance floor, "low" when it does not. The floor
marks; it never hides: a model reads the low ones and judges them itself.
When none clears the floor, the result says `no_good_match` (and names the
closest, as before), the verdict that the offline model, the record of
searches and the help pages go by.
"""

from __future__ import annotations

from typing import Any

from helpcenter import index, ranking
from helpcenter.ranking import folded, normalised

__all__ = ["HIGH", "LOW", "RESULTS", "folded", "normalised", "search", "search_in", "search_sync", "titles"]

RESULTS = 3
HIGH, LOW = "high", "low"


def search_in(snapshot: index.Snapshot, query: str) -> dict[str, Any]:
    """The best articles for the query, those that clear the floor first
    ("high" confidence), then the others ("low"), each with its relevance;
    `no_good_match` when none clears the floor. Raises ValueError for an
    empty query."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    found = snapshot.index
    hits = sorted(found.hits(query, limit=RESULTS), key=lambda hit: not hit.good)  # stable: by relevance within
    result: dict[str, Any] = {
        "articles": [_article(found, query, hit) for hit in hits],
        "top_score": round(max(hit.relevance for hit in hits), 2) if hits else None,
    }
    if not any(hit.good for hit in hits):
        result["no_good_match"] = True
        result["closest"] = [
            {"id": h.document.id, "title": h.document.title, "score": round(h.relevance, 2)} for h in hits
        ]
    return result


def _article(found: ranking.Index, query: str, hit: ranking.Hit) -> dict[str, Any]:
    document = hit.document
    return {
        "id": document.id,
        "title": document.title,
        "url": document.url,
        "snippet": found.snippet(query, document),
        "score": round(hit.relevance, 2),
        "confidence": HIGH if hit.good else LOW,
    }


async def search(query: str) -> dict[str, Any]:
    """search_in, from the event loop. Ranking an in-memory index takes well
    under a millisecond: it runs on the loop rather than queueing for the
    database thread."""
    return search_in(await index.current(), query)


def search_sync(query: str) -> dict[str, Any]:
    """search_in, from sync code."""
    return search_in(index.current_sync(), query)


def titles() -> list[str]:
    """The published articles' titles (for a model's system prompt)."""
    return index.current_sync().titles
