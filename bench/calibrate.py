"""Fits the search's confidence (helpcenter/fusion.py, CONFIDENCE_*) on the
tuning half of make eval's questions: the demo help center's and the real
manuals' (bench/manuals.py imports them). Every article a search returns
is one example: its evidence, and whether it is a right page.

A logistic model, weighted so that each corpus and each kind (answerable,
unanswerable) counts alike, then a threshold chosen where the fewest
answerable questions lose their right page's "high" while unanswerable ones
stay flagged. It prints the weights to paste into fusion.py, and what they
do on the tuning half.

    .venv/bin/python bench/calibrate.py [--manuals gimp,debian-faq,django] [--configs words,default]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import manuals  # noqa: E402

FEATURES = (
    "words",
    "coverage",
    "whole",
    "whole_coverage",
    "floor",
    "unknown",
    "first_by_words",
    "lead",
    "meaning",
    "first_by_meaning",
)


def evidence_worker() -> None:
    """Reads [{q, lang}] on stdin; writes each question's candidates (source
    URL and evidence) on stdout, searched as the tool searches."""
    import asyncio

    import django

    sys.path.insert(0, str(ROOT))
    django.setup()
    from helpcenter import embeddings, fusion, index, indexer, search
    from helpcenter.models import Article

    indexer.ENABLED = False
    given = json.load(sys.stdin)
    asked, grid = given["questions"], given["grid"]
    snapshot = index.current_sync()
    urls = dict(Article.objects.values_list("id", "source_url"))
    embedder = search._embedder_for(snapshot)

    async def vectors() -> list[Any]:
        if embedder is None:
            return [None] * len(asked)
        return [(await embeddings.query(embedder, q["q"])).vectors[0] for q in asked]

    found = []
    for vector, question in zip(asyncio.run(vectors()), asked, strict=True):
        near = snapshot.dense.nearest(vector) if vector is not None else None
        each = []
        for point in grid:
            for name, value in point.items():
                _set(name, value)
            each.append(
                [
                    {"url": urls.get(c.shown, ""), "evidence": c.evidence}
                    for c in fusion.candidates(snapshot, question["q"], near, question["lang"])
                ]
            )
        found.append(each)
    json.dump(found, sys.stdout)


def _set(name: str, value: Any) -> None:
    """A constant of the search's: of helpcenter.fusion and helpcenter.search
    (each that has it: RESULTS is both's), or of another of its modules
    ("ranking.TITLE_BONUS")."""
    import importlib

    module, _, constant = name.rpartition(".")
    names = [module] if module else ["fusion", "search"]
    modules = [importlib.import_module(f"helpcenter.{part}") for part in names]
    found = [m for m in modules if module or hasattr(m, constant)]
    if not found:
        raise AttributeError(f"no constant {name} in helpcenter.fusion nor helpcenter.search")
    for found_module in found:
        setattr(found_module, constant, value)


def manual_examples(name: str, config: str, grid: list[dict[str, float]]) -> list[list[dict[str, Any]]]:
    """For each point of the grid, an example per article returned for each tuning question."""
    manual = manuals.load(name)
    tree, _ = manuals.tree(manual)
    kept = sorted((manuals.CACHE / name).glob(f"{config}-*.sqlite3"), key=lambda p: p.stat().st_mtime)
    # The last import, whatever the importer's code since: tuning the search
    # needs no new import (bench/manuals.py --fresh makes one).
    path = kept[-1] if kept else manuals.database(manual, config, tree)["path"]
    asked = [q for q in manual.questions if q["split"] == "tune"]
    done = subprocess.run(
        [sys.executable, __file__, "--evidence-worker"],
        input=json.dumps({"questions": [{"q": q["q"], "lang": q["lang"]} for q in asked], "grid": grid}),
        env=manuals.environment(config, path),
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    examples: list[list[dict[str, Any]]] = [[] for _ in grid]
    for question, each in zip(asked, json.loads(done.stdout), strict=True):
        root = "/" + manual.source(question["lang"])["root"].strip("/") + "/"
        wanted = {manuals.page_of(tree, root + page) for page in question["pages"]}
        for point, found in enumerate(each):
            for rank, candidate in enumerate(found):
                right = manuals.page_of(tree, urlsplit(candidate["url"]).path) in wanted
                examples[point].append(
                    {
                        "corpus": name,
                        "lang": question["lang"],
                        "question": question["q"],
                        "answerable": bool(wanted),
                        "rank": rank,
                        "right": right,
                        "page": urlsplit(candidate["url"]).path.rsplit("/", 1)[-1],
                        "wanted": question["pages"],
                        **candidate["evidence"],
                    }
                )
    return examples


def demo_examples(config: str, grid: list[dict[str, float]]) -> list[list[dict[str, Any]]]:
    import django

    django.setup()
    import eval as demo

    from helpcenter import embeddings, fusion

    snapshot = demo._snapshot(embeddings.Local(embeddings.LOCAL_MODEL) if config == "default" else None)
    embedder = embeddings.Local(embeddings.LOCAL_MODEL) if config == "default" else None
    examples: list[list[dict[str, Any]]] = [[] for _ in grid]
    for question in demo.questions("tune"):
        near = snapshot.dense.nearest(embedder.query_sync(question["text"]).vectors[0]) if embedder else None
        slugs = set(question["slugs"])
        for point, values in enumerate(grid):
            for name, value in values.items():
                _set(name, value)
            for rank, c in enumerate(fusion.candidates(snapshot, question["text"], near, question["lang"])):
                right = demo.slug_of(snapshot.index.by_id[c.shown].url) in slugs
                examples[point].append(
                    {
                        "corpus": "demo",
                        "lang": question["lang"],
                        "question": question["text"],
                        "answerable": bool(slugs),
                        "rank": rank,
                        "right": right,
                        **c.evidence,
                    }
                )
    return examples


def ranking_figures(examples: list[dict[str, Any]]) -> dict[str, float]:
    """Over the answerable questions: the right page first, and in the three."""
    questions: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in examples:
        if e["answerable"]:
            questions.setdefault((e["corpus"], e["question"]), []).append(e)
    count = len(questions) or 1
    first = sum(found[0]["right"] for found in questions.values())
    three = sum(any(e["right"] for e in found) for found in questions.values())
    return {"first": round(first / count, 3), "three": round(three / count, 3), "n": len(questions)}


def fit(examples: list[dict[str, Any]], names: list[str]) -> tuple[np.ndarray, float]:
    x = np.array([[e.get(n, 0.0) for n in names] for e in examples], dtype=np.float64)
    y = np.array([float(e["right"]) for e in examples])
    groups = [(e["corpus"], e["answerable"], e["right"]) for e in examples]
    counts: dict[tuple, int] = {}
    for g in groups:
        counts[g] = counts.get(g, 0) + 1
    w_sample = np.array([1.0 / counts[g] for g in groups])
    w_sample *= len(examples) / w_sample.sum()
    mean, std = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = (x - mean) / std
    w = np.zeros(len(names))
    b = 0.0
    for _ in range(4000):
        p = 1 / (1 + np.exp(-(z @ w + b)))
        g = (p - y) * w_sample
        w -= 0.1 * (z.T @ g / len(y) + 0.01 * w)
        b -= 0.1 * g.mean()
    # Back to the raw features' scale.
    raw = w / std
    return raw, float(b - (w * mean / std).sum())


def judged(examples: list[dict[str, Any]], names: list[str], weights: np.ndarray, bias: float) -> dict[str, Any]:
    questions: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in examples:
        questions.setdefault((e["corpus"], e["question"]), []).append(e)
    out = {"answerable": 0, "flagged": 0, "first_high": 0, "unanswerable": 0, "unanswerable_flagged": 0}
    for found in questions.values():
        high = [bias + sum(w * e.get(n, 0.0) for n, w in zip(names, weights, strict=True)) >= 0 for e in found]
        if found[0]["answerable"]:
            out["answerable"] += 1
            out["flagged"] += not any(high)
            out["first_high"] += found[0]["right"] and high[0]
        else:
            out["unanswerable"] += 1
            out["unanswerable_flagged"] += not any(high)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manuals", default="gimp,debian-faq,django")
    parser.add_argument("--configs", default="words,default")
    parser.add_argument("--grid", default="[{}]", help="JSON: a list of {CONSTANT: value} for the search (_set)")
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--dump", help="write the examples to this file (CONFIG: the configuration's name)")
    parser.add_argument("--evidence-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.evidence_worker:
        evidence_worker()
        return
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
    os.environ.setdefault("DJANGO_DEBUG", "true")
    grid = json.loads(args.grid)
    for config in args.configs.split(","):
        points = demo_examples(config, grid)
        for name in filter(None, args.manuals.split(",")):
            for point, found in enumerate(manual_examples(name, config, grid)):
                points[point] += found
        for values, found in zip(grid, points, strict=True):
            corpora = sorted({e["corpus"] for e in found})
            print(config, values, {c: ranking_figures([e for e in found if e["corpus"] == c]) for c in corpora})
        examples = points[0]
        if args.dump:
            Path(args.dump.replace("CONFIG", config)).write_text(json.dumps(examples))
        if args.misses:
            seen: dict[str, list[dict[str, Any]]] = {}
            for e in examples:
                seen.setdefault(e["question"], []).append(e)
            for question, found in seen.items():
                if found[0]["answerable"] and not found[0]["right"] and found[0]["corpus"] != "demo":
                    print(
                        "  MISS",
                        found[0]["corpus"],
                        repr(question),
                        "want",
                        found[0].get("wanted"),
                        "got",
                        [e.get("page", "") + ("*" if e["right"] else "") for e in found],
                    )
        if config == "words":
            # By words alone the confidence is the relevance floor (helpcenter/ranking.py), not fitted.
            names, weights, bias = ["floor"], np.array([1.0]), -0.5
        else:
            names = list(FEATURES)
            weights, bias = fit(examples, names)
        print(f"\n{config}: {len(examples)} examples")
        print({"bias": round(bias, 3), **{n: round(float(w), 3) for n, w in zip(names, weights, strict=True)}})
        for shift in (-1.5, -1.0, -0.5, 0.0, 0.5):
            print(f"  threshold {shift:+}:", end="")
            for corpus in sorted({e["corpus"] for e in examples}):
                j = judged([e for e in examples if e["corpus"] == corpus], names, weights, bias - shift)
                print(
                    f" {corpus}: answerable flagged {j['flagged']}/{j['answerable']},"
                    f" unanswerable flagged {j['unanswerable_flagged']}/{j['unanswerable']};",
                    end="",
                )
            print()


if __name__ == "__main__":
    main()
