"""The fusion: a search's candidates, each article with the evidence that it
answers the query, and the confidence judged on that evidence.

A search ranks sections, not only articles: each passage (an article's
section, helpcenter/passages.py) by its words (BM25 over passages,
helpcenter/ranking.py) and by its meaning (the query's embedding against
every passage's, helpcenter/dense.py). The two are fused by score, not by
rank: a passage's words as a share of the best section's, and its
closeness by meaning as a share of the way from the passages' mean to the
best one, weighed by MEANING. A clear first place in either list keeps its
lead (a rank fusion let pages ranked moderately in both pass it), and a
long page that mentions everything ranks by its best section, not its
whole. An article's score is its best passage's, plus a little of its
words as a whole (a question that spans its sections).

The evidence is how well the words match the section and the article
(relevance and coverage, helpcenter/ranking.py), how far the passage stands
out by meaning, whether words and meaning each put it first, and its lead
over the next; a logistic model of it (confident()) was fitted on the
tuning half of make eval's questions, the demo help center's and the real
manuals', by bench/calibrate.py (which sets these constants by name).

helpcenter/search.py, the app's one door, reads the candidates, reranks
them when a reranker is configured, and says what it found.
"""

from __future__ import annotations

from dataclasses import dataclass

from helpcenter import index, ranking
from helpcenter.dense import Nearest
from helpcenter.models import language_of
from helpcenter.passages import Passage

# How many articles a search returns.
RESULTS = 3
# How deep each ranking is read for the fusion: below it, 1 / (K + rank)
# cannot lift an article into the first few.
CANDIDATES = 100
# Sections read by words, and passages by meaning, for the fusion.
SECTION_CANDIDATES = 200
MEANING_CANDIDATES = 200
# A passage's score: (1 - MEANING) x its words' relevance as a share of the
# best section's + MEANING x its closeness by meaning (helpcenter/dense.py);
# an article's: its best passage's, + WHOLE_ARTICLE x its words' relevance as
# a whole, as a share of the best article's (a question that spans sections).
MEANING = 0.7
WHOLE_ARTICLE = 0.3
# The confidence's logistic weights with meaning (confident()), fitted by
# bench/calibrate.py on the tuning half of make eval's questions (the
# demo's, the Debian FAQ's and GIMP's help); the bias moved by 0.5 from the
# fit's, towards "high": an answerable question flagged as not covered
# costs a visitor their answer, which the model would have judged.
CONFIDENCE_WITH_MEANING = {
    "bias": -2.847,
    "words": -0.065,
    "coverage": 1.112,
    "whole": -0.62,
    "whole_coverage": 0.543,
    "floor": 0.147,
    "unknown": -0.434,
    "first_by_words": 0.406,
    "lead": 1.991,
    "meaning": 0.813,
    "first_by_meaning": 0.59,
}


@dataclass(frozen=True)
class Candidate:
    shown: int  # the version shown: the visitor's language's when there is one
    article: int  # the version that ranked
    passage: Passage | None  # the shown version's best passage by words and meaning, if it had one
    hit: ranking.Hit | None  # the article as a whole, by words
    evidence: dict[str, float]  # what the confidence is judged on (confident())


def candidates(
    snapshot: index.Snapshot, query: str, near: Nearest | None = None, language: str = "", limit: int = 0
) -> list[Candidate]:
    """The best articles (RESULTS, or `limit`), best first, with the evidence for each."""
    limit = limit or RESULTS
    check_query(query)
    found = snapshot.index
    hits = {hit.document.id: hit for hit in found.hits(query, limit=CANDIDATES)}
    sections = snapshot.sections
    section_hits = sections.index.hits(query, limit=SECTION_CANDIDATES)
    fused: dict[int, float] = {}
    chosen: dict[int, Passage] = {}
    for passage, score in _passages_scored(sections, section_hits, near):
        article = passage.article_id
        if score > fused.get(article, -1.0):
            fused[article], chosen[article] = score, passage
    whole = max((hit.relevance for hit in hits.values()), default=0.0)
    for article, hit in hits.items():
        fused[article] = fused.get(article, 0.0) + WHOLE_ARTICLE * hit.relevance / whole
    ranked = sorted(fused, key=lambda article: -fused[article])
    by_section: dict[int, ranking.Hit] = {}
    for hit in section_hits:
        by_section.setdefault(sections.passages[hit.document.id].article_id, hit)
    first_by_words = next(iter(by_section), None)
    unknown = sections.index.unknown(query)
    first_by_meaning = near.ranked[0] if near is not None and near.ranked else None
    found_ranked = []
    for shown, article in _one_version_each(snapshot, ranked, language, limit):
        if shown not in found.by_id:
            continue  # not in this snapshot's articles (never, but a vector may outlive one)
        section_hit, article_hit = by_section.get(article), hits.get(article)
        others = [fused[other] for other in ranked[: RESULTS + 1] if other != article]
        evidence = {
            "words": section_hit.relevance if section_hit else 0.0,
            "coverage": section_hit.coverage if section_hit else 0.0,
            "whole": article_hit.relevance if article_hit else 0.0,
            "whole_coverage": article_hit.coverage if article_hit else 0.0,
            # The relevance floor of words (helpcenter/ranking.py), set on whole articles.
            "floor": float(bool(article_hit and article_hit.good)),
            "first_by_words": float(article == first_by_words),
            "unknown": unknown,
            "lead": fused[article] - max(others, default=0.0),
        }
        if near is not None and near.embedded(article):
            # Not embedded yet (just saved, the endpoint down): judged by its
            # words, as without meaning. No evidence is not evidence against.
            evidence["meaning"] = near.standing(article)
            evidence["first_by_meaning"] = float(article == first_by_meaning)
        found_ranked.append(Candidate(shown, article, chosen.get(shown), article_hit, evidence))
    return found_ranked


def confident(evidence: dict[str, float], by_meaning: bool) -> bool:
    """Whether the evidence says the article answers the query. By words
    alone, when the article clears the relevance floor
    (helpcenter/ranking.py); with meaning too, by a logistic model of all
    of it (CONFIDENCE_WITH_MEANING), fitted on the tuning half of make
    eval's questions by bench/calibrate.py."""
    if not by_meaning:
        return evidence["floor"] > 0
    weights = CONFIDENCE_WITH_MEANING
    z = weights["bias"] + sum(weight * evidence.get(name, 0.0) for name, weight in weights.items() if name != "bias")
    return z >= 0.0


def _passages_scored(
    sections: index.Sections, section_hits: list[ranking.Hit], near: Nearest | None
) -> list[tuple[Passage, float]]:
    """The candidate passages (the best by words, the closest by meaning),
    each scored by both: its words' relevance as a share of the best
    section's, and its closeness by meaning, weighed by MEANING. A passage
    not embedded yet counts its words for both: no evidence by meaning is
    not evidence against."""
    top = max((hit.relevance for hit in section_hits), default=0.0)
    words = {hit.document.id: hit.relevance / top for hit in section_hits} if top > 0 else {}
    rows: dict[int, int | None] = {}
    if near is not None:
        for row in near.closest_rows(MEANING_CANDIDATES):
            passage = near.passage_at(row)
            number = sections.number_of.get((passage.article_id, passage.number))
            if number is not None:
                rows[number] = int(row)
        for number in words:
            if number not in rows:
                rows[number] = near.row(sections.passages[number])
    scored = []
    for number in {**words, **rows}:
        by_words = words.get(number, 0.0)
        row = rows.get(number)
        if near is None or row is None:
            scored.append((sections.passages[number], by_words))
        else:
            scored.append((sections.passages[number], (1 - MEANING) * by_words + MEANING * float(near.closeness[row])))
    return scored


def _one_version_each(snapshot: index.Snapshot, ranked: list[int], language: str, limit: int) -> list[tuple[int, int]]:
    """The first `limit` articles of the ranking, one per article whatever
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
        if len(best) == limit:
            break
    return best


def check_query(query: str) -> None:
    """Raises ValueError for a query that is not a non-empty string."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError("query must be a non-empty string")
