"""Which library turns help-center HTML into Markdown (issue 24): measured
on the test website's pages (tests/helpcenter/site) and on Zendesk-shaped
article bodies, for what the passages need (headings, links, code blocks,
tables) and what must go (scripts, styles, navigation), and for speed.

    .venv/bin/python bench/import/convert.py   (with the candidates installed)
"""

import re
import time
from pathlib import Path

SITE = Path(__file__).resolve().parents[2] / "tests" / "helpcenter" / "site"
PAGES = [p for p in SITE.rglob("*.html") if "private" not in p.parts and "blog" not in p.parts]


def with_markdownify(html: str) -> str:
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(html, "html.parser")
    main = soup.find("main") or soup.find("article") or soup.body
    for tag in main.find_all(["script", "style", "nav", "header", "footer", "aside", "form", "button"]):
        tag.decompose()
    return MarkdownConverter(heading_style="ATX", code_language_callback=lambda el: None).convert_soup(main)


def with_html2text(html: str) -> str:
    import html2text

    h = html2text.HTML2Text()
    h.body_width = 0
    return h.handle(html)


def with_trafilatura(html: str) -> str:
    import trafilatura

    return (
        trafilatura.extract(
            html, output_format="markdown", include_links=True, include_formatting=True, include_tables=True
        )
        or ""
    )


def _article(html: str) -> str:
    return re.search(r'<article class="doc">(.*?)</article>', html, re.S).group(1)


def with_html2text_on_main(html: str) -> str:
    import html2text

    h = html2text.HTML2Text()
    h.body_width = 0
    return h.handle(_article(html))


CHECKS = {
    "h2 kept": lambda md, html: all(
        re.search(r"^#{2} " + re.escape(h), md, re.M) for h in re.findall(r"<h2[^>]*>([^<]+)</h2>", html)
    ),
    "links kept": lambda md, html: all(f"]({href})" in md for href in re.findall(r'href="([^"]+)"', _article(html))),
    "code kept": lambda md, html: (
        all(
            line.strip() in md
            for code in re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", html, re.S)
            for line in code.replace("&lt;", "<").replace("&gt;", ">").splitlines()
        )
        and ("<pre>" not in html or "```" in md)
    ),
    "lines kept": lambda md, html: "\n\ndef verify" in md or "def verify" not in html,
    "no script": lambda md, html: "dataLayer" not in md and "querySelectorAll" not in md,
    "no nav/footer": lambda md, html: "Privacy" not in md and "Pricing" not in md and "Accept all" not in md,
}


def main() -> None:
    pages = [p.read_text() for p in PAGES]
    for name, convert in [
        ("markdownify", with_markdownify),
        ("html2text", with_html2text),
        ("html2text*", with_html2text_on_main),
        ("trafilatura", with_trafilatura),
    ]:
        passed = {check: 0 for check in CHECKS}
        start = time.perf_counter()
        outputs = [convert(html) for _ in range(20) for html in pages][: len(pages)]
        took = (time.perf_counter() - start) / (20 * len(pages)) * 1000
        for md, html in zip(outputs, pages, strict=True):
            for check, ok in CHECKS.items():
                passed[check] += bool(ok(md, html))
        summary = ", ".join(f"{c} {n}/{len(pages)}" for c, n in passed.items())
        print(f"{name:12} {took:6.2f} ms/page  {summary}")


if __name__ == "__main__":
    main()
