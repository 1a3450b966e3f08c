"""Help-center search, measured on questions it was not built on (make eval).

The questions (bench/eval/questions.json) are customers' ways of asking:
paraphrases, typos, slang, Portuguese, and questions the help center does not
answer. Each has a split: thresholds and weights may be set on `tune` only;
`test` is what we report. The search runs as the assistant's tool does
(helpcenter.search.search_in), over the demo help center read from its
fixture, so the figures are the tool's result as the model receives it:

- recall@1: the right article first, and the result not marked no_good_match;
- recall@3: the right article among those returned, whatever their confidence;
- MRR: the mean of 1/rank of the right article among those returned;
- ranked@1: the right article first, whatever the floor said;
- unanswerable flagged: the share of unanswerable questions marked no_good_match;
- answerable flagged: the share of answerable questions marked no_good_match;
- answerable hidden: marked no_good_match with no article at all: a model
  could only say the help center does not cover it;
- p50 / p99: one search's time, in milliseconds.

    .venv/bin/python bench/eval.py [--split test|tune|all] [--json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "bench" / "eval" / "questions.json"
FIXTURE = ROOT / "helpcenter" / "fixtures" / "help_center.json"

sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")

Search = Callable[[str], dict[str, Any]]


def questions(split: str = "all") -> list[dict[str, Any]]:
    found = json.loads(QUESTIONS.read_text())["questions"]
    return [q for q in found if split == "all" or q["split"] == split]


@functools.cache
def demo_articles() -> list[dict[str, Any]]:
    return [
        {"id": item["pk"], **item["fields"]}
        for item in json.loads(FIXTURE.read_text())
        if item["fields"].get("published", True)
    ]


def lexical() -> Search:
    """Today's search: BM25 over whole articles, with its relevance floor."""
    import django

    django.setup()
    from helpcenter import index, ranking, search

    documents = [ranking.Document(a["id"], a["title"], f"/help/{a['slug']}/", a["body"]) for a in demo_articles()]
    snapshot = index.Snapshot((len(documents), None), ranking.Index(documents), [d.title for d in documents], 0.0)
    return lambda query: search.search_in(snapshot, query)


def offline_lexical() -> Search:
    """Today's search, asked as the built-in offline model asks it (the
    default set-up): Portuguese put into English words first, a question of
    two parts searched as two. Results of several searches are merged in
    order; the merged result is below the floor only when each one is."""
    search = lexical()
    from chat.engine import offline
    from chat.vocabulary import SEARCH_TOOL

    def searched(question: str) -> dict[str, Any]:
        queries = offline.respond([{"role": "user", "content": question}], [SEARCH_TOOL], "auto").queries
        results = [search(query) for query in queries if query.strip()]
        merged: dict[str, Any] = {"articles": [a for r in results for a in r["articles"]]}
        if all(r.get("no_good_match") for r in results):
            merged["no_good_match"] = True
            merged["closest"] = [c for r in results for c in r.get("closest", [])]
        return merged

    return searched


CONFIGS: dict[str, Callable[[], Search]] = {"lexical": lexical, "lexical, offline model's queries": offline_lexical}


def slug_of(url: str) -> str:
    return url.split("#")[0].strip("/").split("/")[-1]


def measure(search: Search, asked: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [q for q in asked if q["slugs"]]
    unanswerable = [q for q in asked if not q["slugs"]]
    times, first, top3, reciprocal, ranked, hidden, marked, flagged, misses = [], 0, 0, 0.0, 0, 0, 0, 0, []
    for question in asked:
        started = time.perf_counter()
        result = search(question["text"])
        times.append((time.perf_counter() - started) * 1000)
        returned = [slug_of(a["url"]) for a in result["articles"]]
        if not question["slugs"]:
            flagged += bool(result.get("no_good_match"))
            continue
        expected = set(question["slugs"])
        rank = next((i for i, slug in enumerate(returned, 1) if slug in expected), None)
        best = _best(result)
        no_good_match = bool(result.get("no_good_match"))
        first += rank == 1 and not no_good_match
        top3 += rank is not None and rank <= 3
        reciprocal += 1 / rank if rank else 0.0
        ranked += best in expected
        marked += no_good_match
        hidden += no_good_match and not returned
        if rank != 1 or no_good_match:
            misses.append({"id": question["id"], "text": question["text"], "want": question["slugs"], "got": returned})
    times.sort()
    count = len(answerable) or 1
    return {
        "questions": len(asked),
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "recall@1": first / count,
        "recall@3": top3 / count,
        "mrr": reciprocal / count,
        "ranked@1": ranked / count,
        "unanswerable_flagged": flagged / (len(unanswerable) or 1),
        "answerable_flagged": marked / count,
        "answerable_hidden": hidden / count,
        "p50_ms": times[len(times) // 2] if times else 0.0,
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] if times else 0.0,
        "misses": misses,
    }


def _best(result: dict[str, Any]) -> str | None:
    """The article ranked first, returned or only "closest" (which carry ids)."""
    if result["articles"]:
        return slug_of(result["articles"][0]["url"])
    closest = result.get("closest") or []
    return {a["id"]: a["slug"] for a in demo_articles()}.get(closest[0]["id"]) if closest else None


def table(rows: dict[str, dict[str, Any]]) -> str:
    columns = ["configuration", "questions", "recall@1", "recall@3", "MRR", "ranked@1"]
    columns += ["unanswerable flagged", "answerable flagged", "answerable hidden", "p50 ms", "p99 ms"]
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    for name, m in rows.items():
        lines.append(
            f"| {name} | {m['answerable']} + {m['unanswerable']} | {m['recall@1']:.2f} | {m['recall@3']:.2f} "
            f"| {m['mrr']:.2f} | {m['ranked@1']:.2f} | {m['unanswerable_flagged']:.2f} | {m['answerable_flagged']:.2f} "
            f"| {m['answerable_hidden']:.2f} "
            f"| {m['p50_ms']:.2f} | {m['p99_ms']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="test", choices=["test", "tune", "all"])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--misses", action="store_true", help="list the questions not answered first")
    args = parser.parse_args()
    asked = questions(args.split)
    rows = {}
    for name, make in CONFIGS.items():
        search = make()
        rows[name] = measure(search, asked)
        for lang in ("en", "pt"):
            rows[f"{name} ({lang} only)"] = measure(search, [q for q in asked if q["lang"] == lang])
    if args.json:
        print(json.dumps({k: {n: v for n, v in m.items() if n != "misses"} for k, m in rows.items()}, indent=2))
        return
    print(f"split: {args.split} ({len(asked)} questions)\n")
    print(table(rows))
    if args.misses:
        for name, m in rows.items():
            if "only)" in name:
                continue
            print(f"\n{name}: not answered first")
            for miss in m["misses"]:
                print(f"  {miss['id']}: {miss['text']!r} want {miss['want']} got {miss['got']}")


if __name__ == "__main__":
    main()
