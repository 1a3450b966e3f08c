"""The help center's one door for the rest of the project: search the
published articles, read their titles, and normalise a query as the search
sees it. Everything else in this app is its own business.

A search ranks the articles twice, by words (BM25, helpcenter/ranking.py)
and by meaning (the query's embedding against every passage's,
helpcenter/dense.py), and fuses the two rankings (reciprocal rank fusion).
It returns the best articles, each through its passage closest to the query
(its section's link and text), with a confidence:

- "high" when the article clears the relevance floor of words
  (helpcenter/ranking.py), or when words and meaning agree on it as the best
  article and its passage stands out from the rest of the help center
  (AGREEMENT_STANDOUT standard deviations);
- "low" otherwise. The floor marks; it never hides: a model reads the low
  ones and judges them itself.

When none is high, the result says `no_good_match` (and names the closest,
as before), the verdict that the offline model, the record of searches and
the help pages go by. With embeddings off, or when a query cannot be
embedded, the search is by words alone, and says so (`by_words_only`).
The weights were set on the tuning half of bench/eval/questions.json only
(make eval).
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from helpcenter import embeddings, index, indexer, ranking
from helpcenter.dense import Nearest
from helpcenter.models import language_of
from helpcenter.passages import Passage
from helpcenter.ranking import folded, normalised

__all__ = [
    "HIGH",
    "LOW",
    "NONE",
    "RESULTS",
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
    "sweep",
    "titles",
]

logger = logging.getLogger("kookee.helpcenter")

RESULTS = 3
HIGH, LOW, NONE = "high", "low", "none"
# How deep each ranking is read for the fusion: below it, 1 / (K + rank)
# cannot lift an article into the first few.
CANDIDATES = 100
# Reciprocal rank fusion's constant (score 1 / (K + rank) from each ranking).
FUSION_K = 30
# Words and meaning agree on the best article, and its passage's cosine is
# this many standard deviations above the articles' mean: an answer, even
# when the visitor's words are not the article's.
AGREEMENT_STANDOUT = 2.5

# The indexer's signal, for billing (helpcenter/indexer.py).
embedded = indexer.embedded

# Searches that fell back to words alone, by reason: an operator's figure
# (chat/ops/metrics.py exports it).
fallbacks: dict[str, int] = {"error": 0, "timeout": 0, "dimensions": 0, "not_indexed": 0}


@dataclass(frozen=True)
class Spent:
    """What embedding a query cost: billed with the visitor's turn."""

    model: str
    tokens: int


def search_in(snapshot: index.Snapshot, query: str, near: Nearest | None = None, language: str = "") -> dict[str, Any]:
    """The best articles for the query, those with high confidence first,
    then the others, each with its relevance by words (`score`) and by
    meaning (`similarity`, when the query was embedded); `no_good_match` when
    none is high. An article in several languages is one result, in the
    visitor's `language` when it has a version in it, else as it ranked.
    Raises ValueError for an empty query."""
    _check(query)
    found = snapshot.index
    hits = {hit.document.id: hit for hit in found.hits(query, limit=CANDIDATES)}
    by_words = list(hits)
    fused: dict[int, float] = {}
    for ranked in (by_words, near.ranked if near else []):
        for rank, article in enumerate(ranked, 1):
            fused[article] = fused.get(article, 0.0) + 1 / (FUSION_K + rank)
    if near is not None:
        # An article not embedded yet (just saved, the endpoint down) counts
        # its rank by words twice: no evidence by meaning is not evidence against.
        for rank, article in enumerate(by_words, 1):
            if not near.embedded(article):
                fused[article] += 1 / (FUSION_K + rank)
    best = _one_version_each(snapshot, sorted(fused, key=lambda article: -fused[article]), language)
    agreed = None
    if near is not None and by_words[:1] == near.ranked[:1] and near.standout >= AGREEMENT_STANDOUT:
        agreed = by_words[0]
    articles = []
    for shown, article in best:
        if shown not in found.by_id:
            continue  # not in this snapshot's articles (never, but a vector may outlive one)
        # The version that ranked says how good the match is; the one shown is the visitor's language's.
        hit = hits.get(article)
        good = bool(hit and hit.good) or article == agreed
        passage = near.passage(shown) if near else None
        passage = passage or _by_words(snapshot.passages.get(shown, []), query)
        articles.append(_article(found.by_id[shown], hit, passage, query, good, near))
        articles[-1]["language"] = snapshot.languages.get(shown, "")
    articles.sort(key=lambda a: a["confidence"] != HIGH)  # stable: by fused rank within
    scores = [hit.relevance for hit in hits.values()]
    result: dict[str, Any] = {
        "articles": articles,
        # The search's own: the best of its articles', "none" without any.
        "confidence": articles[0]["confidence"] if articles else NONE,
        "top_score": round(max(scores), 2) if scores else None,
    }
    if not any(a["confidence"] == HIGH for a in articles):
        result["no_good_match"] = True
        result["closest"] = [{"id": a["id"], "title": a["title"], "score": a["score"]} for a in articles]
    return result


def _one_version_each(snapshot: index.Snapshot, ranked: list[int], language: str) -> list[tuple[int, int]]:
    """The first RESULTS articles of the ranking, one per article whatever
    its languages, as (the version shown, the version that ranked)."""
    wanted = language_of(language) if language else ""
    best: list[tuple[int, int]] = []
    taken: set[object] = set()
    for article in ranked:
        versions = snapshot.versions.get(article)
        if versions is None:
            best.append((article, article))
        elif versions not in taken:
            taken.add(versions)
            mine = [v for v in versions if wanted and snapshot.languages.get(v) == wanted]
            best.append((mine[0] if mine and article not in mine else article, article))
        if len(best) == RESULTS:
            break
    return best


def _check(query: str) -> None:
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")


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


def _by_words(passages: list[Passage], query: str) -> Passage | None:
    """Without meaning, the passage that holds the most of the query's terms
    (the first of equals: an article's opening says what it is about)."""
    wanted = set(ranking.terms(query))
    scored = [(len(wanted & set(ranking.terms(p.heading + " " + p.text))), -p.number, p) for p in passages]
    return max(scored, key=lambda s: (s[0], s[1]))[2] if scored else None


async def search_spending(query: str, language: str = "") -> tuple[dict[str, Any], Spent | None]:
    """search_in, from the event loop, with what embedding the query cost
    (None when nothing was billed). Ranking an in-memory index takes a few
    milliseconds: it runs on the loop rather than queueing for the database
    thread. A query that cannot be embedded is searched by words alone."""
    _check(query)
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
    return _searched(snapshot, query, embedder, embedded, language)


async def search(query: str, language: str = "") -> dict[str, Any]:
    """search_spending, without the cost."""
    return (await search_spending(query, language))[0]


def search_sync(query: str, language: str = "") -> dict[str, Any]:
    """search, from sync code (the help pages)."""
    _check(query)
    snapshot = index.current_sync()
    embedder = _embedder_for(snapshot)
    embedded = None
    if embedder is not None:
        try:
            embedded = embeddings.query_sync(embedder, _plain_query(query))
        except embeddings.EmbeddingError as e:
            _failed(e)
    return _searched(snapshot, query, embedder, embedded, language)[0]


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


def _searched(
    snapshot: index.Snapshot,
    query: str,
    embedder: embeddings.Embedder | None,
    embedded: embeddings.Embedded | None,
    language: str = "",
) -> tuple[dict[str, Any], Spent | None]:
    near = None
    if embedder is not None and embedded is not None and snapshot.dense is not None:
        near = snapshot.dense.nearest(embedded.vectors[0])
        if near is None:
            _fell_back("dimensions", "the query's vector is not the size of the passages' (%s)", embedder.model)
    result = search_in(snapshot, query, near, language)
    if near is None and embeddings.embedder() is not None:
        result["by_words_only"] = True
    spent = None
    if embedder is not None and embedded is not None and embedder.billed and not embedded.cached:
        spent = Spent(embedder.model, embedded.tokens or indexer.estimated_tokens([query]))
    return result, spent


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
