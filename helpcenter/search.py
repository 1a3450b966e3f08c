"""The help center's one door for the rest of the project: search the
published articles, read their titles, and normalise a query as the search
sees it. Everything else in this app is its own business.

A search ranks an in-memory index (helpcenter/index.py) with
helpcenter/ranking.py's relevance floor: the articles that clear it, with
their scores, or, when none does, `no_good_match` with the closest ones.
"""

from __future__ import annotations

from typing import Any

from helpcenter import index, ranking
from helpcenter.ranking import folded, normalised

__all__ = ["RESULTS", "folded", "normalised", "search", "search_in", "search_sync", "titles"]

RESULTS = 3


def search_in(snapshot: index.Snapshot, query: str) -> dict[str, Any]:
    """The articles that answer the query, best first, with their relevance;
    when none clears the floor, says so, with the closest ones and their
    scores, and no article to quote. Raises ValueError for an empty query."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    found = snapshot.index
    hits = found.hits(query, limit=RESULTS)
    top_score = round(hits[0].relevance, 2) if hits else None
    good = [hit for hit in hits if hit.good]
    if not good:
        return {
            "articles": [],
            "no_good_match": True,
            "top_score": top_score,
            "closest": [{"id": h.document.id, "title": h.document.title, "score": round(h.relevance, 2)} for h in hits],
        }
    return {
        "articles": [_article(found, query, hit) for hit in good],
        "top_score": top_score,
    }


def _article(found: ranking.Index, query: str, hit: ranking.Hit) -> dict[str, Any]:
    document = hit.document
    return {
        "id": document.id,
        "title": document.title,
        "url": document.url,
        "snippet": found.snippet(query, document),
        "score": round(hit.relevance, 2),
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
