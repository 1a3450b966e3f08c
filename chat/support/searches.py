"""The record of every help-center search a turn made, for the
unanswered-questions page."""

from __future__ import annotations

import json
import logging
from typing import Any

from django.db import transaction

from chat.models import Search
from chat.sources import search_results, used_articles
from chat.text import storable
from chat.vocabulary import SEARCH_TOOL
from helpcenter import search

logger = logging.getLogger("kookee.generations")
search_log = logging.getLogger("kookee.searches")


def record_searches(turn_id: int, answer: str, calls: Any) -> None:
    """Stores the turn's help-center searches, for the unanswered-questions
    page, and logs each (ids and numbers: never what was searched). `calls`:
    the round loop's tool calls, or stored ones. It runs in the transaction
    that closes and bills the turn: a fault here is logged and costs the
    record, never the bill."""
    try:
        with transaction.atomic():  # a savepoint
            _record_searches(turn_id, answer, calls)
    except Exception:
        logger.exception("turn=%s: its searches were not recorded", turn_id)


def _record_searches(turn_id: int, answer: str, calls: Any) -> None:
    found = []
    for call in calls:
        if call.name != SEARCH_TOOL or call.error:
            continue
        query = _query_of(call.arguments)
        results = search_results([call])
        if query is None or not results:
            continue
        result = results[0]
        # The articles that answer it: those that cleared the floor, not the
        # closest ones returned for the model to judge (confidence "low").
        articles = [
            a for a in result.get("articles") or [] if isinstance(a, dict) and a.get("confidence") != search.LOW
        ]
        cited = bool(used_articles(answer, [{"articles": articles}]))
        found.append(
            Search(
                turn_id=turn_id,
                query=query,
                terms=search.normalised(query)[:200],
                top_score=result.get("top_score") if isinstance(result.get("top_score"), (int, float)) else None,
                matched=bool(articles) and not result.get("no_good_match"),
                article_ids=[a.get("id") for a in articles],
                cited=cited,
            )
        )
        search_log.info(
            "search turn=%s top_score=%s articles=%s matched=%s cited=%s",
            turn_id,
            found[-1].top_score,
            found[-1].article_ids,
            found[-1].matched,
            cited,
        )
    Search.objects.bulk_create(found)


def _query_of(arguments: str) -> str | None:
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    query = parsed.get("query") if isinstance(parsed, dict) else None
    return storable(query) if isinstance(query, str) and query.strip() else None
