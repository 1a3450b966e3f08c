"""The tools the model can call: search_help_center, and request_human.

A tool runs inside its turn's task; `current_turn` says which turn that is,
for tools that act on the visitor's conversation.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from chat import handoffs, help_center
from chat.rounds import Tool
from chat.sources import SEARCH_TOOL

RESULTS = 3
# What a search that found nothing good tells the model, besides the scores.
NO_GOOD_MATCH = (
    "No published help-center article answers this. Tell the visitor that the help center does not cover it, "
    "and offer to put them in touch with a person (request_human)."
)

current_turn: ContextVar[int] = ContextVar("current_turn")


def search_in(snapshot: help_center.Snapshot, query: str) -> dict[str, Any]:
    """The articles that answer the query, with their relevance
    (chat/search.py); when none clears the floor, says so, with the closest
    ones and their scores, and no article to quote."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
    index = snapshot.index
    hits = index.hits(query, limit=RESULTS)
    top_score = round(hits[0].relevance, 2) if hits else None
    good = [hit for hit in hits if hit.good]
    if not good:
        return {
            "articles": [],
            "no_good_match": True,
            "top_score": top_score,
            "closest": [{"id": h.document.id, "title": h.document.title, "score": round(h.relevance, 2)} for h in hits],
            "note": NO_GOOD_MATCH,
        }
    return {
        "articles": [
            {
                "id": hit.document.id,
                "title": hit.document.title,
                "url": hit.document.url,
                "snippet": index.snippet(query, hit.document),
                "score": round(hit.relevance, 2),
            }
            for hit in good
        ],
        "top_score": top_score,
    }


def search_help_center_sync(query: str) -> dict[str, Any]:
    return search_in(help_center.current_sync(), query)


async def _search_help_center(query: str) -> dict[str, Any]:
    # Ranking an in-memory index takes well under a millisecond: it runs
    # on the event loop rather than queueing for the database thread.
    return search_in(await help_center.current(), query)


async def _request_human(reason: str = "") -> dict[str, Any]:
    if not isinstance(reason, str):
        raise ValueError("reason must be a string")
    handoff = await handoffs.request_for_turn(current_turn.get(), reason)
    return {
        "requested": True,
        **handoff,
        "note": (
            "The support team has the request and the conversation. Tell the visitor that a person will get "
            "back to them, and that they can leave an email address in the form shown under your answer."
        ),
    }


SEARCH_HELP_CENTER = Tool(
    name=SEARCH_TOOL,
    description=(
        "Search the published help-center articles. Returns the articles that answer the query (id, title, url, "
        "snippet, score), best first; or no_good_match with the closest titles when none does. "
        "Use it for any question about the product."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for, in English (the articles' language)."}
        },
        "required": ["query"],
    },
    run=_search_help_center,
)

REQUEST_HUMAN = Tool(
    name="request_human",
    description=(
        "Ask a person from the support team to take over this conversation. Use it when the visitor asks for a "
        "person, or when the help center has no answer and the visitor wants more help. Support is notified and "
        "sees the whole conversation."
    ),
    parameters={
        "type": "object",
        "properties": {"reason": {"type": "string", "description": "Why the visitor needs a person, in one sentence."}},
        "required": ["reason"],
    },
    run=_request_human,
)

TOOLS = [SEARCH_HELP_CENTER, REQUEST_HUMAN]
