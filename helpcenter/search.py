"""The help center's one door for the rest of the project: search the
published articles, read their titles, and normalise a query as the search
sees it. Everything else in this app is its own business.

A search ranks sections, not only articles: each passage by its words and
by its meaning, fused by score (helpcenter/fusion.py, which gathers the
candidates and the evidence for each). When a reranker is configured
(helpcenter/rerank.py), it reads the best candidates with the question,
orders them and judges them; a failure keeps the search's own order.

Each article returned comes through its best passage (its section's link
and text), with a confidence: "high" when the evidence (or the reranker)
says the passage answers the question, "low" when it is only near. Low ones
are returned too: a model reads them and judges them itself.

When none is high, the result says `no_good_match` (and names the closest,
as before), the verdict that the offline model, the record of searches and
the help pages go by. With embeddings off, or when a query cannot be
embedded, the search is by words alone, and says so (`by_words_only`).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.dispatch import Signal

from helpcenter import embeddings, fusion, index, indexer, ranking, rerank
from helpcenter.dense import Nearest
from helpcenter.fusion import RESULTS, Candidate
from helpcenter.passages import Passage
from helpcenter.ranking import folded, normalised

__all__ = [
    "HIGH",
    "LOW",
    "NONE",
    "RESULTS",
    "Passage",
    "Spent",
    "embedded",
    "fallbacks",
    "folded",
    "languages",
    "normalised",
    "search",
    "search_in",
    "search_spending",
    "search_sync",
    "searched",
    "sweep",
    "titles",
]

logger = logging.getLogger("kookee.helpcenter")

HIGH, LOW, NONE = "high", "low", "none"
# Characters of a candidate's passage sent to a reranker (helpcenter/rerank.py).
RERANK_CHARS = 2000
# The indexer's signal, for billing (helpcenter/indexer.py).
embedded = indexer.embedded

# Searches that fell back to words alone, by reason: an operator's figure
# (chat/ops/metrics.py exports it).
# Reranks that failed, by reason, too: the search then kept its own order.
fallbacks: dict[str, int] = {
    "error": 0,
    "timeout": 0,
    "dimensions": 0,
    "not_indexed": 0,
    "rerank_error": 0,
    "rerank_timeout": 0,
}


# Sent by the help pages' search (search_sync) with what it cost: spent (a
# list of Spent). Billing records it, as indexing's (chat connects it).
searched = Signal()


@dataclass(frozen=True)
class Spent:
    """What a search cost a provider's model: embedding the query, or
    reranking the candidates (purpose). Billed with the visitor's turn."""

    model: str
    tokens: int
    purpose: str = "search"  # billing's EmbeddingEntry.Purpose: "search" or "rerank"


def search_in(snapshot: index.Snapshot, query: str, near: Nearest | None = None, language: str = "") -> dict[str, Any]:
    """The best articles for the query, those with high confidence first,
    then the others, each with its relevance by words (`score`) and by
    meaning (`similarity`, when the query was embedded); `no_good_match` when
    none is high. An article in several languages is one result, in the
    visitor's `language` when it has a version in it, else as it ranked.
    Raises ValueError for an empty query."""
    return _result(snapshot, query, fusion.candidates(snapshot, query, near, language), near)


def _result(
    snapshot: index.Snapshot,
    query: str,
    found: list[Candidate],
    near: Nearest | None,
    reranked: list[float] | None = None,
) -> dict[str, Any]:
    """The search's answer for its candidates, in their order. Judged by
    the reranker's scores when there are some (one per candidate), else by
    the evidence (fusion.confident())."""
    articles = []
    for number, candidate in enumerate(found):
        shown = candidate.shown
        passage = _passage_of(snapshot, candidate, query, near)
        if reranked is not None:
            good = reranked[number] >= settings.KOOKEE_RERANK_THRESHOLD
        else:
            # The version that ranked says how good the match is; the one shown is the visitor's language's.
            good = fusion.confident(candidate.evidence, "meaning" in candidate.evidence)
        articles.append(_article(snapshot.index.by_id[shown], candidate.hit, passage, query, good, near))
        articles[-1]["language"] = snapshot.languages.get(shown, "")
    articles.sort(key=lambda a: a["confidence"] != HIGH)  # stable: by fused rank within
    result: dict[str, Any] = {
        "articles": articles,
        # The search's own: the best of its articles', "none" without any.
        "confidence": articles[0]["confidence"] if articles else NONE,
        "top_score": max((a["score"] for a in articles), default=None),
    }
    if not any(a["confidence"] == HIGH for a in articles):
        result["no_good_match"] = True
        result["closest"] = [{"id": a["id"], "title": a["title"], "score": a["score"]} for a in articles]
    return result


def _article(
    document: ranking.Document,
    hit: ranking.Hit | None,
    passage: Passage | None,
    query: str,
    good: bool,
    near: Nearest | None,
) -> dict[str, Any]:
    found: dict[str, Any] = {
        "id": document.id,
        "title": document.title,
        "url": f"{document.url}#{passage.anchor}" if passage and passage.anchor else document.url,
        "snippet": ranking.snippet(query, passage.text if passage else document.body),
        "score": round(hit.relevance, 2) if hit else 0.0,
        "confidence": HIGH if good else LOW,
    }
    if passage and passage.heading:
        found["section"] = passage.heading
    if near is not None:
        found["similarity"] = round(near.similarity(document.id), 3)
    return found


def _passage_of(snapshot: index.Snapshot, candidate: Candidate, query: str, near: Nearest | None) -> Passage | None:
    """The passage an article comes through: its best by words and meaning,
    else its closest by meaning, else the one with most of the query's words."""
    shown = candidate.shown
    passage = candidate.passage or (near.passage(shown) if near else None)
    return passage or _by_words(snapshot.passages.get(shown, []), query)


def _by_words(passages: list[Passage], query: str) -> Passage | None:
    """Without meaning, the passage that holds the most of the query's terms
    (the first of equals: an article's opening says what it is about)."""
    wanted = set(ranking.terms(query))
    scored = [(len(wanted & set(ranking.terms(p.heading + " " + p.text))), -p.number, p) for p in passages]
    return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None


async def search_spending(query: str, language: str = "") -> tuple[dict[str, Any], list[Spent]]:
    """search_in, from the event loop, with what the provider's models cost
    (embedding the query, reranking the candidates; nothing for the local
    model). Ranking an in-memory index takes a few milliseconds: it runs on
    the loop rather than queueing for the database thread. A query that
    cannot be embedded is searched by words alone; candidates that cannot be
    reranked keep the search's own order."""
    fusion.check_query(query)
    snapshot = await index.current()
    embedder = _embedder_for(snapshot)
    embedded = None
    if embedder is not None:
        try:
            embedded = await asyncio.wait_for(
                embeddings.query(embedder, _plain_query(query)), settings.KOOKEE_EMBEDDINGS_TIMEOUT
            )
        except (TimeoutError, embeddings.EmbeddingError) as e:
            _failed(e)
    near, spent = _nearest(snapshot, query, embedder, embedded)
    reranker = rerank.reranker()
    found = fusion.candidates(snapshot, query, near, language, _depth(reranker))
    reranked = None
    if reranker is not None and found:
        documents = _documents(snapshot, found, query, near)
        try:
            reranked = await asyncio.wait_for(
                reranker.rerank(_plain_query(query), documents), settings.KOOKEE_RERANK_TIMEOUT
            )
        except (TimeoutError, rerank.RerankError) as e:
            _rerank_failed(e)
        else:
            spent.append(_rerank_spent(reranker, reranked, query, documents))
    return _reranked(snapshot, query, found, near, reranked), spent


async def search(query: str, language: str = "") -> dict[str, Any]:
    """search_spending, without the cost."""
    return (await search_spending(query, language))[0]


def search_sync(query: str, language: str = "") -> dict[str, Any]:
    """search, from sync code (the help pages). What it cost goes out on
    the `searched` signal, for billing."""
    fusion.check_query(query)
    snapshot = index.current_sync()
    embedder = _embedder_for(snapshot)
    embedded = None
    if embedder is not None:
        try:
            embedded = embeddings.query_sync(embedder, _plain_query(query))
        except embeddings.EmbeddingError as e:
            _failed(e)
    near, spent = _nearest(snapshot, query, embedder, embedded)
    reranker = rerank.reranker()
    found = fusion.candidates(snapshot, query, near, language, _depth(reranker))
    reranked = None
    if reranker is not None and found:
        documents = _documents(snapshot, found, query, near)
        try:
            reranked = reranker.rerank_sync(_plain_query(query), documents)
        except rerank.RerankError as e:
            _rerank_failed(e)
        else:
            spent.append(_rerank_spent(reranker, reranked, query, documents))
    result = _reranked(snapshot, query, found, near, reranked)
    if spent:
        searched.send(sender=Spent, spent=spent)
    return result


def articles_by_id() -> dict[int, ranking.Document]:
    """The published articles (id, title, url), by id, as the index has them now."""
    return index.current_sync().index.by_id


async def passages() -> dict[int, list[Passage]]:
    """Every published article's passages, by article id, as the index has them now."""
    return (await index.current()).passages


def answered_by_words(query: str) -> bool:
    """Whether an article now clears the relevance floor for the query by its
    words alone: free and instant (no embedding), for pages that check many
    past questions at once (Support's unanswered questions)."""
    try:
        return "no_good_match" not in search_in(index.current_sync(), query)
    except ValueError:
        return False


def _embedder_for(snapshot: index.Snapshot) -> embeddings.Embedder | None:
    """The embedder, when the snapshot has vectors of its model (else the
    query is not worth embedding). Asks the indexer for what is missing."""
    if snapshot.missing:
        indexer.kick()
    embedder = embeddings.embedder()
    if embedder is not None and (snapshot.dense is None or snapshot.dense.model != embedder.model):
        _fell_back("not_indexed", "no passage is embedded under %s yet", embedder.model)
        return None
    return embedder


def _failed(error: Exception) -> None:
    if isinstance(error, TimeoutError) or "Timeout" in str(error):
        _fell_back("timeout", "embedding a query timed out")
    else:
        _fell_back("error", "embedding a query failed: %s", error)


def _nearest(
    snapshot: index.Snapshot, query: str, embedder: embeddings.Embedder | None, embedded: embeddings.Embedded | None
) -> tuple[Nearest | None, list[Spent]]:
    """The passages by meaning, when the query has a vector that fits; and
    what embedding it cost."""
    near = None
    if embedder is not None and embedded is not None and snapshot.dense is not None:
        near = snapshot.dense.nearest(embedded.vectors[0])
        if near is None:
            _fell_back("dimensions", "the query's vector is not the size of the passages' (%s)", embedder.model)
    spent = []
    if embedder is not None and embedded is not None and embedder.billed and not embedded.cached:
        spent.append(Spent(embedder.model, embedded.tokens or indexer.estimated_tokens([query])))
    return near, spent


def _finished(
    snapshot: index.Snapshot,
    query: str,
    found: list[Candidate],
    near: Nearest | None,
    reranked: list[float] | None = None,
) -> dict[str, Any]:
    result = _result(snapshot, query, found, near, reranked)
    if near is None and embeddings.embedder() is not None:
        result["by_words_only"] = True
    return result


def _depth(reranker: rerank.Reranker | None) -> int:
    """How many candidates a search reads: those a reranker reads, else the results."""
    return settings.KOOKEE_RERANK_CANDIDATES if reranker is not None else RESULTS


def _documents(snapshot: index.Snapshot, found: list[Candidate], query: str, near: Nearest | None) -> list[str]:
    """What the reranker reads of each candidate: the passage it comes
    through, where it sits (title, heading) and what it says. Capped: a
    reranker reads about 512 tokens of it, and a provider bills what is sent."""
    documents = []
    for candidate in found:
        passage = _passage_of(snapshot, candidate, query, near)
        text = passage.embedded if passage else snapshot.index.by_id[candidate.shown].title
        documents.append(text[:RERANK_CHARS])
    return documents


def _reranked(
    snapshot: index.Snapshot,
    query: str,
    found: list[Candidate],
    near: Nearest | None,
    reranked: rerank.Reranked | None,
) -> dict[str, Any]:
    """The first RESULTS candidates by the reranker's scores (a stable sort:
    equals keep the search's order), judged by them; without scores, the
    search's own first RESULTS, judged by the evidence."""
    if reranked is None:
        return _finished(snapshot, query, found[:RESULTS], near)
    order = sorted(range(len(found)), key=lambda number: -reranked.scores[number])[:RESULTS]
    return _finished(snapshot, query, [found[n] for n in order], near, [reranked.scores[n] for n in order])


def _rerank_spent(reranker: rerank.Reranker, reranked: rerank.Reranked, query: str, documents: list[str]) -> Spent:
    # A server that reports no usage is billed an estimate, never nothing.
    tokens = reranked.tokens or indexer.estimated_tokens([query] * len(documents) + documents)
    return Spent(reranker.model, tokens, "rerank")


def _rerank_failed(error: Exception) -> None:
    reason = "rerank_timeout" if isinstance(error, TimeoutError) or "Timeout" in str(error) else "rerank_error"
    fallbacks[reason] += 1
    logger.warning("help-center search in its own order, not reranked: %s", error or type(error).__name__)


def _plain_query(query: str) -> str:
    return re.sub(r"\s+", " ", query).strip()[:2000]


def _fell_back(reason: str, message: str, *args: Any) -> None:
    fallbacks[reason] += 1
    logger.warning("help-center search by words only: " + message, *args)


def sweep() -> None:
    """For the process's sweeper: embeds what is missing (a change of model,
    an edit made where no indexer ran), in the background."""
    if index.current_sync().missing:
        indexer.kick()


def languages() -> set[str]:
    """The languages the published articles are in (en, pt...)."""
    return set(index.current_sync().in_languages)


def titles() -> list[str]:
    """The published articles' titles (for a model's system prompt)."""
    return index.current_sync().titles
