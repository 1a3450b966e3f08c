"""Which library turns help-center HTML into Markdown (issue 24), measured
for what the passages need (headings, links, code blocks kept whole, blank
lines in code included) and what must go (navigation, scripts), and for
speed.

Two sets of pages, as a choice should be made and then checked:
- chosen on: the test website's pages (tests/helpcenter/site), which the
  importer's tests also use;
- held out: documentation sites this machine happens to hold, never looked at
  while choosing (the Rust toolchain's mdBook guides: the Cargo book, the
  edition guide, the rustdoc book; skipped where they are not installed).

What a page holds is read from its main element with BeautifulSoup, the
same for every library; markdownify runs as the importer runs it
(helpcenter/importers/html.py), the others as they come.

    .venv/bin/python bench/import/convert.py   (bench/requirements.txt installed)
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from urllib.parse import urljoin

from bs4 import BeautifulSoup

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
SITE = ROOT / "tests" / "helpcenter" / "site"
RUST_DOCS = Path.home() / ".rustup/toolchains/stable-x86_64-unknown-linux-gnu/share/doc/rust/html"
BASE = "https://docs.example/"


def chosen_on() -> list[str]:
    return [p.read_text() for p in sorted(SITE.rglob("*.html")) if "private" not in p.parts and "blog" not in p.parts]


def held_out(count: int = 40) -> list[str]:
    pages = sorted(
        p
        for book in ("cargo", "edition-guide", "rustdoc")
        for p in (RUST_DOCS / book).rglob("*.html")
        if p.name not in ("print.html", "404.html", "toc.html")
    )
    step = max(1, len(pages) // count)
    return [p.read_text(errors="replace") for p in pages[::step][:count]]


def with_markdownify(html: str) -> str:
    from helpcenter.importers.html import main_content, parse, to_markdown

    return to_markdown(main_content(parse(html)), BASE)


def with_html2text(html: str) -> str:
    import html2text

    h = html2text.HTML2Text()
    h.body_width = 0
    h.baseurl = BASE
    return h.handle(html)


def with_trafilatura(html: str) -> str:
    import trafilatura

    found = trafilatura.extract(
        html, output_format="markdown", include_links=True, include_formatting=True, include_tables=True
    )
    return found or ""


def expected(html: str) -> dict:
    """What a page's main element holds."""
    soup = BeautifulSoup(html, "html.parser")
    main = soup.select_one("main article") or soup.select_one("main") or soup.select_one("article") or soup.body
    outside = [
        a.get_text(" ", strip=True)
        for nav in soup.find_all(["nav", "header", "footer"])
        for a in nav.find_all("a")
        if len(a.get_text(strip=True)) >= 12 and not (main and nav in main.parents)
    ]
    in_main = {a.get_text(" ", strip=True) for a in main.find_all("a")} if main else set()
    return {
        "headings": [h.get_text(" ", strip=True) for h in main.find_all(["h2", "h3"])] if main else [],
        "links": [a["href"] for a in main.find_all("a", href=True) if not a["href"].startswith("#")] if main else [],
        "code": [pre.get_text().strip("\n") for pre in main.find_all("pre")] if main else [],
        "nav": [text for text in outside if text not in in_main],
    }


def score(markdown: str, page: dict) -> dict[str, tuple[int, int]]:
    lines = {line.strip().lstrip("#").strip() for line in markdown.splitlines() if line.lstrip().startswith("#")}
    plain = re.sub(r"\s+", " ", markdown)
    return {
        "headings": (
            sum(h in lines or any(h in line for line in lines) for h in page["headings"]),
            len(page["headings"]),
        ),
        "links": (
            sum(f"]({href}" in markdown or f"]({urljoin(BASE, href)}" in markdown for href in page["links"]),
            len(page["links"]),
        ),
        "code whole": (sum(code in markdown for code in page["code"]), len(page["code"])),
        "navigation dropped": (sum(text not in plain for text in page["nav"]), len(page["nav"])),
    }


def measure(name: str, pages: list[str]) -> None:
    truths = [expected(html) for html in pages]
    print(f"\n{name}: {len(pages)} pages")
    for library, convert in [
        ("markdownify", with_markdownify),
        ("html2text", with_html2text),
        ("trafilatura", with_trafilatura),
    ]:
        convert(pages[0])  # imports and first-call set-up, not timed
        started = time.perf_counter()
        outputs = [convert(html) for html in pages]
        took = (time.perf_counter() - started) / len(pages) * 1000
        totals: dict[str, list[int]] = {}
        for markdown, truth in zip(outputs, truths, strict=True):
            for check, (kept, of) in score(markdown, truth).items():
                totals.setdefault(check, [0, 0])
                totals[check][0] += kept
                totals[check][1] += of
        shown = ", ".join(
            f"{check} {kept / of:.0%} of {of}" if of else f"{check} -" for check, (kept, of) in totals.items()
        )
        print(f"  {library:12} {took:6.2f} ms/page  {shown}")


def main() -> None:
    measure("chosen on (tests/helpcenter/site)", chosen_on())
    pages = held_out()
    if pages:
        measure("held out (the Rust toolchain's mdBook guides)", pages)
    else:
        print("\nheld out: no Rust toolchain documentation on this machine")


if __name__ == "__main__":
    main()
