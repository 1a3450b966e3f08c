"""The tools the model can call."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from chat import search
from chat.models import HelpArticle
from chat.rounds import Tool

RESULTS = 3


def search_help_center_sync(query: str) -> dict[str, Any]:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    articles = HelpArticle.objects.filter(published=True).only("id", "title", "slug", "body")
    documents = [search.Document(a.id, a.title, a.get_absolute_url(), a.body) for a in articles]
    found = search.rank(query, documents, limit=RESULTS)
    return {
        "articles": [
            {"id": d.id, "title": d.title, "url": d.url, "snippet": search.snippet(query, d.body)} for d in found
        ]
    }


async def _search_help_center(query: str) -> dict[str, Any]:
    return await database_sync_to_async(search_help_center_sync)(query)


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
