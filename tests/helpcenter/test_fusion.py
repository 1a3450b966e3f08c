"""How the search fuses words and meaning, ranks sections, and judges its
confidence: on small help centers built in memory, with vectors chosen by
hand, so that each rule is seen alone."""

import numpy as np
import pytest

from helpcenter import fusion, index, passages, ranking
from helpcenter.dense import Dense

FILLER = "Read this page about the network of the office and its machines. " * 3


def snapshot(articles, closeness=None):
    """A snapshot of (id, title, body) articles; `closeness` maps an article id
    to its passages' cosine with the query vector [1, 0, ...]."""
    documents = [ranking.Document(i, title, f"/help/a{i}/", body) for i, title, body in articles]
    split = {i: passages.split(i, title, body) for i, title, body in articles}
    dense = None
    if closeness is not None:
        rows = [p for found in split.values() for p in found]
        vectors = []
        for p in rows:
            cosine = closeness[p.article_id]
            vectors.append([cosine, np.sqrt(1 - cosine**2), 0.0, 0.0])
        dense = Dense("test", rows, np.array(vectors, dtype=np.float32))
    return index.Snapshot((len(articles),), ranking.Index(documents), [a[1] for a in articles], 0.0, split, dense, 0)


QUERY_VECTOR = np.array([1.0, 0.0, 0.0, 0.0], dtype=np.float32)


def ranked(snap, query, near=True):
    near = snap.dense.nearest(QUERY_VECTOR) if near and snap.dense is not None else None
    return [c.article for c in fusion.candidates(snap, query, near)]


def test_a_clear_first_by_words_keeps_its_place_when_meaning_ranks_it_low():
    # Article 1 is the only one with the query's words; by meaning it is
    # 18th of 20. Three others are close in meaning and share one common word.
    articles = [(1, "Firewall", "## Rules\n\nDrop all incoming traffic except ssh with iptables.")]
    articles += [(i, f"Gateway {i}", f"## Routing\n\nThe gateway forwards traffic. {FILLER}") for i in (2, 3, 4)]
    articles += [(i, f"Printer {i}", f"## Paper\n\nLoad paper in tray {i}. {FILLER}") for i in range(5, 21)]
    closeness = {1: 0.86, 2: 0.91, 3: 0.905, 4: 0.90}
    closeness.update({i: 0.88 - i / 1000 for i in range(5, 21)})
    closeness[1] = 0.855  # below most printers: 18th or so by meaning
    snap = snapshot(articles, closeness)

    assert snap.dense.nearest(QUERY_VECTOR).ranked.index(1) >= 15
    assert 1 in ranked(snap, "drop incoming traffic except ssh")


def test_an_article_not_embedded_yet_is_judged_by_its_words():
    articles = [
        (1, "Bitcoin payments", "## Paying in bitcoin\n\nWe take bitcoin for every plan."),
        (2, "Plans", FILLER),
    ]
    snap = snapshot(articles, {1: 0.5, 2: 0.9})
    # Drop article 1's vectors: as if it were saved a moment ago.
    rows = [p for p in snap.dense.passages if p.article_id != 1]
    dense = Dense("test", rows, snap.dense.matrix[[i for i, p in enumerate(snap.dense.passages) if p.article_id != 1]])
    snap = index.Snapshot(snap.stamp, snap.index, snap.titles, 0.0, snap.passages, dense, 1)

    [found] = [c for c in fusion.candidates(snap, "pay with bitcoin", dense.nearest(QUERY_VECTOR)) if c.article == 1]
    assert "meaning" not in found.evidence
    assert fusion.confident(found.evidence, "meaning" in found.evidence) is True


@pytest.mark.parametrize(
    ("evidence", "high"),
    [
        # Words and meaning both put it first, by a lead, with its words covered.
        (
            {
                "words": 1.5,
                "coverage": 1.0,
                "whole": 1.5,
                "whole_coverage": 1.0,
                "floor": 1.0,
                "unknown": 0.0,
                "first_by_words": 1.0,
                "lead": 0.5,
                "meaning": 3.0,
                "first_by_meaning": 1.0,
            },
            True,
        ),
        # Near by meaning, few of its words, behind another.
        (
            {
                "words": 0.3,
                "coverage": 0.2,
                "whole": 0.3,
                "whole_coverage": 0.2,
                "floor": 0.0,
                "unknown": 0.5,
                "first_by_words": 0.0,
                "lead": -0.3,
                "meaning": 1.0,
                "first_by_meaning": 0.0,
            },
            False,
        ),
    ],
)
def test_the_confidence_with_meaning(evidence, high):
    assert fusion.confident(evidence, True) is high


def test_by_words_alone_the_confidence_is_the_relevance_floor():
    assert fusion.confident({"floor": 1.0, "lead": -5.0}, False) is True
    assert fusion.confident({"floor": 0.0, "lead": 5.0, "coverage": 1.0}, False) is False
