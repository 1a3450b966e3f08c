"""Ranking by meaning: every passage's vector in one matrix, in memory, so
that a query costs one matrix product (about 2 ms for 20,000 passages of 384
dimensions; docs/benchmarks.md). A help center of tens of thousands of
passages needs no vector index; past a few hundred thousand, one would pay.
"""

from __future__ import annotations

import numpy as np

from helpcenter.passages import Passage


class Nearest:
    """Each article's closest passage to a query, and how far the best one
    stands out from the rest of the help center."""

    def __init__(self, dense: Dense, cosines: np.ndarray, limit: int) -> None:
        self._dense = dense
        self._cosines = cosines
        # Each passage's cosine as a share of the way from the passages'
        # mean to the best one: a model's cosines crowd into a narrow band
        # (0.84-0.91 for every page of a manual), so their raw values say
        # little; how far a passage stands above the rest says more.
        top, mean = (float(cosines.max()), float(cosines.mean())) if len(cosines) else (0.0, 0.0)
        self.closeness = np.clip((cosines - mean) / (top - mean), 0.0, 1.0) if top > mean else np.zeros_like(cosines)
        self._best = best = np.maximum.reduceat(cosines, dense.starts)
        # The closest `limit` articles, closest first: all that a fusion of
        # rankings can lift into the first few.
        closest = np.argpartition(-best, limit - 1)[:limit] if limit < len(best) else np.arange(len(best))
        self.ranked = [dense.articles[i] for i in closest[np.lexsort((closest, -best[closest]))]]
        # The best article's cosine in standard deviations above the
        # articles' mean: comparable across models, whose cosines are not.
        spread = float(best.std())
        self.standout = float((best.max() - best.mean()) / spread) if spread > 0 else 0.0

    def standing(self, article: int) -> float:
        """The article's best passage, in standard deviations above the
        mean of every passage's cosine: comparable across queries and models."""
        at = self._dense.position.get(article)
        spread = float(self._cosines.std())
        if at is None or spread == 0:
            return 0.0
        return float((self._best[at] - self._cosines.mean()) / spread)

    def similarity(self, article: int) -> float:
        at = self._dense.position.get(article)
        return 0.0 if at is None else float(self._best[at])

    def embedded(self, article: int) -> bool:
        """Whether any of the article's passages has a vector."""
        return article in self._dense.rows

    def closest_rows(self, limit: int) -> np.ndarray:
        """The rows of the `limit` passages closest to the query, in no order."""
        if limit >= len(self._cosines):
            return np.arange(len(self._cosines))
        return np.argpartition(-self._cosines, limit - 1)[:limit]

    def passage_at(self, row: int) -> Passage:
        return self._dense.passages[int(row)]

    def row(self, passage: Passage) -> int | None:
        """The passage's row in the matrix; None when it is not embedded."""
        return self._dense.row_of.get((passage.article_id, passage.number))

    def passage(self, article: int) -> Passage | None:
        """The article's passage closest to the query; None when none of its
        passages is embedded yet."""
        if article not in self._dense.rows:
            return None
        start, end = self._dense.rows[article]
        return self._dense.passages[start + int(np.argmax(self._cosines[start:end]))]


class Dense:
    def __init__(self, model: str, passages: list[Passage], matrix: np.ndarray) -> None:
        self.model = model
        self.passages = passages  # in article order: each article's rows are together
        self.matrix = matrix
        self.dimensions = int(matrix.shape[1]) if matrix.ndim == 2 and len(passages) else 0
        ids = np.array([p.article_id for p in passages])
        # Where each article's rows start, for a per-article maximum in one call.
        self.starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(passages) else np.array([], dtype=int)
        self.articles = [int(ids[i]) for i in self.starts]
        self.position = {article: i for i, article in enumerate(self.articles)}
        ends = [*self.starts[1:], len(passages)]
        self.rows = {article: (int(s), int(e)) for article, s, e in zip(self.articles, self.starts, ends, strict=True)}
        self.row_of = {(p.article_id, p.number): row for row, p in enumerate(passages)}

    def nearest(self, vector: np.ndarray, limit: int = 100) -> Nearest | None:
        """None when the vector is of another model's size, or nothing is embedded."""
        if not self.passages or vector.shape[-1] != self.dimensions:
            return None
        return Nearest(self, self.matrix @ vector.reshape(-1), limit)
