"""Imported HTML to the Markdown our pages render: never trusted, never
stored. BeautifulSoup parses it (html.parser: no C dependency), markdownify
writes the Markdown; chosen on measurement over html2text and trafilatura
(bench/import/convert.py: the only one that kept every heading, link and
code block, blank lines inside code included, of the test site's pages).

What goes: scripts, styles, forms, navigation, headers and footers, and
images (a help article is text here, and an image would load from the
source's host on our pages). Links are made absolute against the page, so
that they still lead somewhere from our help center.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin

from bs4 import BeautifulSoup, Tag
from markdownify import MarkdownConverter

# Part of every imported article's digest: a change here that changes the
# Markdown should bump it, so that the next sync converts every article again.
VERSION = 1
DROPPED = [
    "script",
    "style",
    "noscript",
    "template",
    "iframe",
    "object",
    "embed",
    "svg",
    "canvas",
    "form",
    "button",
    "input",
    "select",
    "textarea",
    "nav",
    "header",
    "footer",
    "aside",
    "img",
    "picture",
    "video",
    "audio",
]
# Where a page's own content is, most specific first (a site's layout around
# it is navigation).
MAIN = ["main article", "[role=main] article", "article", "main", "[role=main]", "#content", ".content"]
SCHEMES = ("http:", "https:", "mailto:")


class _Converter(MarkdownConverter):
    def convert_pre(self, el, text, parent_tags):  # type: ignore[no-untyped-def]
        # The fence says the code's language when the HTML did (class="language-x").
        code = el.find("code")
        classes = (code.get("class") if isinstance(code, Tag) else None) or el.get("class") or []
        language = next((c.split("-", 1)[1] for c in classes if c.startswith(("language-", "lang-"))), "")
        body = el.get_text().strip("\n")
        fence = "````" if "```" in body else "```"
        return f"\n\n{fence}{language}\n{body}\n{fence}\n\n"


def parse(html: str | bytes) -> BeautifulSoup:
    return BeautifulSoup(html, "html.parser")


def main_content(page: BeautifulSoup) -> Tag:
    """The element that holds a page's own content: its <main> or
    <article>, else its body."""
    for selector in MAIN:
        found = page.select_one(selector)
        if found is not None and found.get_text(strip=True):
            return found
    return page.body or page


def to_markdown(html: str | bytes | Tag, base_url: str = "") -> str:
    """Clean Markdown for an article's HTML (a fragment, or a page's main
    content), with its headings, lists, tables, links and code."""
    root = html if isinstance(html, Tag) else parse(html)
    for tag in root.find_all(DROPPED):
        tag.decompose()
    for link in root.find_all("a"):
        href = str(link.get("href") or "").strip()
        absolute = urljoin(base_url, href) if base_url else href
        if href.startswith("#") or not absolute.lower().startswith(SCHEMES):
            link.unwrap()  # a bare anchor, or javascript:, data:...: the words stay, the link goes
        else:
            link.attrs = {"href": absolute}
    markdown = _Converter(heading_style="ATX", bullets="-", escape_misc=False).convert_soup(root)
    return tidy(markdown)


def tidy(markdown: str) -> str:
    """Trailing spaces off, at most one blank line in a row (outside code
    blocks, which keep theirs), and no blank start or end."""
    lines: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        if not fenced:
            line = line.rstrip()
            if not line and (not lines or not lines[-1]):
                continue
        lines.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"
