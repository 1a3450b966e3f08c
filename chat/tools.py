"""The tools the model can call."""

from __future__ import annotations

from typing import Any

from chat import help_center
from chat.rounds import Tool

RESULTS = 3


def search_in(snapshot: help_center.Snapshot, query: str) -> dict[str, Any]:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    index = snapshot.index
    return {
        "articles": [
            {"id": d.id, "title": d.title, "url": d.url, "snippet": index.snippet(query, d)}
            for d in index.rank(query, limit=RESULTS)
        ]
    }


def search_help_center_sync(query: str) -> dict[str, Any]:
    return search_in(help_center.current_sync(), query)


async def _search_help_center(query: str) -> dict[str, Any]:
    # Ranking an in-memory index takes well under a millisecond: it runs
    # on the event loop rather than queueing for the database thread.
    return search_in(await help_center.current(), query)


SEARCH_HELP_CENTER = Tool(
    name="search_help_center",
    description=(
        "Search the published help-center articles. Returns the best matches "
        "(id, title, url, snippet), best first. Use it for any question about the product."
    ),
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What to look for."}},
        "required": ["query"],
    },
    run=_search_help_center,
)

TOOLS = [SEARCH_HELP_CENTER]
