"""A second reading of a search's best candidates by a model that reads the
question and each passage together (a cross-encoder), through a provider's
rerank endpoint. Off unless KOOKEE_RERANK_MODEL is set.

Words and meaning (helpcenter/search.py) put the right page among the first
fifteen for 46 of 48 tuning questions on the real manuals, but first for 28
(bench/manuals.py): what is missing is a reader of both texts at once. No
such model for English and Portuguese ships in a wheel, so it is a
provider's: POST {KOOKEE_RERANK_BASE_URL}/rerank, through the official
client (its timeouts and errors), with the body that Cohere's, Jina's,
Voyage's, vLLM's, Infinity's, LiteLLM's and llama.cpp's rerank endpoints
share: {"model", "query", "documents": [text, ...]}. The answer lists the
documents' scores under `results` (most) or `data` (Voyage), each with its
`index` and its `relevance_score` (or `score`).
"""

from __future__ import annotations

import asyncio
import math
import threading
import weakref
from dataclasses import dataclass
from typing import Any

import httpx2
import openai
from django.conf import settings


class RerankError(Exception):
    """The endpoint failed, or answered something that is not a ranking."""


@dataclass(frozen=True)
class Reranked:
    scores: list[float]  # one per document, in the order they were sent; -inf for any it left out
    tokens: int | None  # what it says it read, when it says


class Reranker:
    def __init__(self, model: str, base_url: str, api_key: str, timeout: float) -> None:
        self.model = model
        self._options: dict[str, Any] = {
            "api_key": api_key or "not-needed",
            "base_url": base_url or None,
            # A visitor waits: no retries, and a short timeout (the search
            # goes on with its own order).
            "timeout": httpx2.Timeout(timeout),
            "max_retries": 0,
        }
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, openai.AsyncOpenAI] = (
            weakref.WeakKeyDictionary()
        )
        self._sync: openai.OpenAI | None = None

    def _body(self, query: str, documents: list[str]) -> dict[str, Any]:
        return {"model": self.model, "query": query, "documents": documents}

    async def rerank(self, query: str, documents: list[str]) -> Reranked:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            client = self._clients[loop] = openai.AsyncOpenAI(**self._options)
        try:
            body = await client.post("/rerank", cast_to=object, body=self._body(query, documents))
        except openai.OpenAIError as e:
            raise RerankError(f"{type(e).__name__}: {e}") from e
        return ranking_of(body, len(documents))

    def rerank_sync(self, query: str, documents: list[str]) -> Reranked:
        if self._sync is None:
            self._sync = openai.OpenAI(**self._options)
        try:
            body = self._sync.post("/rerank", cast_to=object, body=self._body(query, documents))
        except openai.OpenAIError as e:
            raise RerankError(f"{type(e).__name__}: {e}") from e
        return ranking_of(body, len(documents))


def ranking_of(body: Any, count: int) -> Reranked:
    """The scores in a rerank endpoint's answer, one per document sent."""
    items = body.get("results", body.get("data")) if isinstance(body, dict) else body
    if not isinstance(items, list) or not items:
        raise RerankError("the answer holds no list of results")
    scores = [-math.inf] * count
    for item in items:
        index = item.get("index") if isinstance(item, dict) else None
        score = item.get("relevance_score", item.get("score")) if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise RerankError(f"a result's index is not one of the {count} documents: {index!r}")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise RerankError(f"a result's score is not a number: {score!r}")
        scores[index] = float(score)
    usage = body.get("usage") if isinstance(body, dict) else None
    tokens = (usage.get("total_tokens") or usage.get("prompt_tokens")) if isinstance(usage, dict) else None
    return Reranked(scores, tokens if isinstance(tokens, int) and tokens > 0 else None)


_reranker: tuple[tuple[Any, ...], Reranker | None] | None = None
_lock = threading.Lock()


def reranker() -> Reranker | None:
    """The configured reranker, or None when reranking is off."""
    global _reranker
    config = (
        settings.KOOKEE_RERANK_MODEL,
        settings.KOOKEE_RERANK_BASE_URL,
        settings.KOOKEE_RERANK_API_KEY,
        settings.KOOKEE_RERANK_TIMEOUT,
    )
    with _lock:
        if _reranker is None or _reranker[0] != config:
            _reranker = (config, Reranker(*config) if config[0] else None)
        return _reranker[1]
