"""Imported HTML to the Markdown our pages render: never trusted, never
stored. BeautifulSoup parses it (html.parser: no C dependency), markdownify
writes the Markdown; chosen on measurement over html2text and trafilatura
(bench/import/convert.py: the only one that kept every heading, link and
code block, blank lines inside code included, of the test site's pages).

What goes: scripts, styles, forms, navigation, headers and footers, and
images (a help article is text here, and an image would load from the
source's host on our pages). Links are made absolute against the page, so
that they still lead somewhere from our help center.

A whole page (`read_page`) is read as a reader sees it: its own content,
not the site around it (menus, breadcrumbs, prev/next links, sidebars,
banners, heading permalinks); its own heading as its title, not the site's
name; the language it declares, wherever it declares it; and whether it is
an article at all, or a table of contents, a generated index, a source
listing or a search form, which a help center leaves out.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import urljoin

from bs4 import BeautifulSoup, NavigableString, Tag
from markdownify import MarkdownConverter

# Part of every imported article's digest: a change here that changes the
# Markdown should bump it, so that the next sync converts every article again.
VERSION = 2
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
# Without those, the document body a generator writes: Sphinx's div.body and
# sections, DocBook's divisions (its XSL stylesheets and Publican).
BODIES = frozenset(
    (
        "body",
        "set",
        "book",
        "part",
        "chapter",
        "preface",
        "appendix",
        "article",
        "reference",
        "refentry",
        "glossary",
        "bibliography",
        "colophon",
        "sect1",
        "sect2",
        "sect3",
        "section",
    )
)
FALLBACK = ["#content", ".content"]
SCHEMES = ("http:", "https:", "mailto:")
# Page chrome, by the roles and the class and id names sites and generators
# give it: dropped wherever it is.
CHROME_ROLES = {"navigation", "banner", "contentinfo", "search", "menubar", "menu", "toolbar"}
CHROME_NAMES = re.compile(
    r"^(?:nav|navbar|navigation|navheader|navfooter|docnav|menu|menubar|breadcrumbs?|headerlink|pagination|pager"
    r"|banner|skip-?links?|related|sphinxsidebar|footer|site-header|site-footer)$"
    r"|^(?:nav|breadcrumbs?|menu)[-_]|[-_](?:nav|navigation|menu|breadcrumbs?)$"
)
# A sidebar may be navigation (a site's) or content (DocBook's boxed asides):
# dropped only when it reads like navigation.
SIDEBAR = re.compile(r"(?:^|[-_])sidebar(?:$|[-_])")
# Tables of contents inside the content: counted to tell an index page, then dropped.
TOC_NAMES = re.compile(r"^(?:toc|toctree-wrapper|table-of-contents)$|^toc[-_]|[-_]toc$")
PERMALINKS = {"¶", "#", "§", "🔗", "\uf0c1"}
TITLE_SEPARATORS = (" · ", " | ", " \u2013 ", " \u2014 ", " - ", " :: ")
# A page whose text is mostly its links is a table of contents or an index;
# so is one whose links come every few words and make much of its text (a
# module index: a link and a line about it, again and again).
INDEX_LINK_SHARE = 0.5
INDEX_MIN_LINKS = 12
INDEX_DENSE_SHARE = 0.35
INDEX_WORDS_PER_LINK = 8
# A page whose text is nearly all code, with a few words around it, is a
# source listing (Sphinx's _modules pages), not an article.
LISTING_CODE_SHARE = 0.9
LISTING_MAX_WORDS = 60
# A form and no more than a few words is a search or login page.
FORM_MAX_WORDS = 30
# A language and its first subtag (zh-Hant-TW: zh-hant), as BCP 47 or POSIX (pt_BR) writes them.
LANGUAGE_TAG = re.compile(r"^([a-z]{2,3})(?:[-_]([a-z0-9]{2,8}))?(?:[-_][a-z0-9]{1,8})*$", re.IGNORECASE)


@dataclass
class Page:
    """What a page holds, as read_page found it."""

    title: str
    content: Tag  # its own content: chrome and tables of contents out, its title's heading too
    language: str  # as it declares it (pt-br), or ""
    skipped: str = ""  # why it is not an article: "index", "listing", "form", "noindex"


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


def read_page(page: BeautifulSoup) -> Page:
    """A whole page as a reader sees it (see the module's docstring). The
    page is changed in place: read its links first."""
    robots = page.find("meta", attrs={"name": re.compile("^robots$", re.I)})
    noindex = bool(robots and "noindex" in str(robots.get("content") or "").lower())
    drop_chrome(page)
    content = main_content(page)
    language = declared_language(page, content)
    title = _title(page, content)
    skipped = "noindex" if noindex else _not_an_article(content)
    _drop([tag for tag in content.find_all(True) if _named(tag, TOC_NAMES)])
    return Page(title=title, content=content, language=language, skipped=skipped)


def main_content(page: BeautifulSoup) -> Tag:
    """The element that holds a page's own content: its <main> or
    <article>; else the document body its generator wrote (Sphinx's,
    DocBook's); else its #content; else its body."""
    for found in _semantic(page):
        if found is not None and found.get_text(strip=True):
            return found
    found = _document_body(page)
    if found is not None:
        return found
    for selector in FALLBACK:
        found = page.select_one(selector)
        if found is not None and found.get_text(strip=True):
            return found
    return page.body or page


def drop_chrome(root: Tag) -> None:
    """Drops a page's navigation, banners, breadcrumbs, prev/next links and
    navigational sidebars, by their elements, roles and names; never an
    element that holds the page's content."""
    _drop([tag for tag in root.find_all(True) if tag.name not in ("html", "body") and _is_chrome(tag)])


def _drop(tags: list[Tag]) -> None:
    """Drops the tags (in document order), but none that holds the page."""
    dropped: set[int] = set()
    for tag in tags:
        if any(id(parent) in dropped for parent in tag.parents) or _holds_the_page(tag):
            continue
        dropped.add(id(tag))
    for tag in tags:
        if id(tag) in dropped:
            tag.extract()


def declared_language(page: BeautifulSoup, content: Tag) -> str:
    """The language the page declares for its content, normalised (pt-br),
    or "": a container around or inside the content that carries `lang` (the
    nearest around it, unless a container inside holds most of its text),
    else <meta http-equiv="content-language">, else og:locale."""
    inner = _inner_language(content)
    if inner:
        return inner
    for tag in [content, *content.parents]:
        if isinstance(tag, Tag) and tag.name != "[document]":
            found = language_tag(tag.get("lang") or tag.get("xml:lang"))
            if found:
                return found
    meta = page.find("meta", attrs={"http-equiv": re.compile("^content-language$", re.I)})
    if meta is not None:
        found = language_tag(str(meta.get("content") or "").split(",")[0])
        if found:
            return found
    og = page.find("meta", attrs={"property": "og:locale"})
    return language_tag(og.get("content")) if og is not None else ""


def language_tag(value: object) -> str:
    """A language tag (en, pt-BR, pt_BR) as the help center stores it
    (pt-br), or "" when the value is none."""
    found = LANGUAGE_TAG.match(str(value or "").strip())
    if not found:
        return ""
    language, region = found.group(1).lower(), (found.group(2) or "").lower()
    return f"{language}-{region}" if region else language


def to_markdown(html: str | bytes | Tag, base_url: str = "") -> str:
    """Clean Markdown for an article's HTML (a fragment, or a page's main
    content), with its headings, lists, tables, links and code."""
    root = html if isinstance(html, Tag) else parse(html)
    for tag in root.find_all(DROPPED):
        tag.decompose()
    for link in root.find_all("a"):
        href = str(link.get("href") or "").strip()
        absolute = urljoin(base_url, href) if base_url else href
        if href.startswith("#") and link.get_text(strip=True) in PERMALINKS:
            link.decompose()  # a heading's permalink (Sphinx's ¶): not words of the page
        elif href.startswith("#") or not absolute.lower().startswith(SCHEMES):
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


def _names(tag: Tag) -> list[str]:
    classes = tag.get("class") or []
    names = [classes] if isinstance(classes, str) else list(classes)
    if tag.get("id"):
        names.append(str(tag["id"]))
    return [name.lower() for name in names]


def _named(tag: Tag, pattern: re.Pattern[str]) -> bool:
    return any(pattern.search(name) for name in _names(tag))


def _is_chrome(tag: Tag) -> bool:
    if tag.name == "nav":
        return True
    if tag.name in ("header", "footer") and tag.find_parent(["article", "main"]) is None:
        return True  # a site's (an article's own header holds its title)
    role = str(tag.get("role") or "").lower()
    if role in CHROME_ROLES or _named(tag, CHROME_NAMES):
        return True
    if tag.name == "aside" or role == "complementary" or _named(tag, SIDEBAR):
        return _navigational(tag)
    return False


def _navigational(tag: Tag) -> bool:
    """Mostly links, or a search box: a menu, not prose."""
    if tag.find(["form", "input"]) is not None or tag.find(attrs={"role": "search"}) is not None:
        return True
    text = _length(tag)
    return text == 0 or _link_length(tag) / text > INDEX_LINK_SHARE


def _holds_the_page(tag: Tag) -> bool:
    """An element that wraps the page's content, whatever its name says (a
    class such as "with-sidebar-nav" on a wrapper): its <main>, its
    <article> or its own heading."""
    if tag.find(["main", "article"]) is not None or tag.find(attrs={"role": "main"}) is not None:
        return True
    return _own_heading(tag.find_all("h1"), set()) is not None


def _semantic(page: BeautifulSoup) -> Iterator[Tag | None]:
    """Where a page says its own content is, most specific first: an
    <article> in its <main> (or role=main), any <article>, its <main>."""
    main = page.find("main")
    role_main = page.find(attrs={"role": "main"})
    yield main.find("article") if main else None
    yield role_main.find("article") if role_main else None
    yield page.find("article")
    yield main
    yield role_main


def _document_body(page: BeautifulSoup) -> Tag | None:
    """The outermost of a generator's document bodies (several side by
    side: what holds them all), widened to an element around it that adds
    prose to it (a page's introduction above its first section)."""
    found = {id(tag): tag for tag in page.find_all("div", class_=_is_body) if tag.get_text(strip=True)}
    outer = [tag for tag in found.values() if not any(id(parent) in found for parent in tag.parents)]
    if not outer:
        return None
    root = outer[0]
    while not all(tag is root or any(parent is root for parent in tag.parents) for tag in outer):
        root = root.parent
    return _widened(root)


def _is_body(classes: str | None) -> bool:
    return bool(classes) and any(name in BODIES for name in str(classes).split())


def _widened(root: Tag) -> Tag:
    best, text, links = root, _length(root), _link_length(root)
    for parent in root.parents:
        if parent.name in ("body", "html", "[document]"):
            break
        extra = _length(parent) - text
        extra_links = _link_length(parent) - links
        if extra >= 20 and extra_links / extra > INDEX_LINK_SHARE:
            break  # the site around it begins
        if extra - extra_links >= 200:
            best = parent
    return best


def _length(tag: Tag) -> int:
    return len(" ".join(tag.get_text(" ").split()))


def _link_length(tag: Tag) -> int:
    return sum(_length(a) for a in tag.find_all("a", href=True))


def _not_an_article(content: Tag) -> str:
    """Why the content is not an article ("" when it is one): mostly
    links (a table of contents, a generated index), nearly all code (a
    source listing), or a form with hardly a word around it (a search)."""
    text, words = _length(content), _words(content)
    links = len(content.find_all("a", href=True))
    share = _link_length(content) / text if text else 0
    if links >= INDEX_MIN_LINKS and (
        share > INDEX_LINK_SHARE or (share > INDEX_DENSE_SHARE and words < INDEX_WORDS_PER_LINK * links)
    ):
        return "index"
    code = content.find_all("pre")
    if code and sum(_length(pre) for pre in code) >= LISTING_CODE_SHARE * text:
        if words - sum(_words(pre) for pre in code) <= LISTING_MAX_WORDS:
            return "listing"
    if words <= FORM_MAX_WORDS and content.find("form") is not None:
        return "form"  # (a page whose whole body is a form, as ASP.NET's are, may be an article)
    return ""


def _words(tag: Tag) -> int:
    return len(tag.get_text(" ").split())


def _inner_language(content: Tag) -> str:
    """The language of a container inside the content that holds most of
    its text (DocBook's <div class="book" lang="pt-BR"> inside a body)."""
    total = _length(content)
    for tag in content.find_all(["div", "section", "article", "main"], lang=True):
        found = language_tag(tag.get("lang"))
        if found and _length(tag) * 2 >= total:
            return found
    return ""


def _title(page: BeautifulSoup, content: Tag) -> str:
    """The page's own title: its content's first <h1> (a heading that is a
    link elsewhere, or the site's name, is the site's), else the content's
    first heading when nothing comes before it (DocBook's sections are
    <h2>), else any such <h1> of the page, else its <title> without the
    site's name. The heading taken, and the site's, leave the content."""
    title_tag = page.find("title")
    full_title = _text(title_tag) if title_tag else ""
    parts = _title_parts(full_title)
    site_names = {part.lower() for part in parts[1:]}
    site = page.find("meta", attrs={"property": "og:site_name"})
    if site is not None and site.get("content"):
        site_names.add(str(site["content"]).strip().lower())
    for heading in content.find_all("h1"):
        if _is_sites(heading, site_names):
            heading.decompose()
    heading = (
        _own_heading(content.find_all("h1"), site_names)
        or _leading_heading(content, site_names)
        or _own_heading(page.find_all("h1"), site_names)
    )
    if heading is None:
        return parts[0] if parts else ""
    title = _text(heading)
    if any(parent is content for parent in heading.parents):
        heading.decompose()  # the page shows its title above the body
    return title


def _own_heading(headings: list[Tag], site_names: set[str]) -> Tag | None:
    return next((h for h in headings if _text(h) and not _is_sites(h, site_names)), None)


def _is_sites(heading: Tag, site_names: set[str]) -> bool:
    """A heading that names the site, not the page: its name, or a link home."""
    if _text(heading).lower() in site_names:
        return True
    links = [a for a in heading.find_all("a", href=True) if not str(a["href"]).startswith("#")]
    return bool(links) and sum(_length(a) for a in links) >= _length(heading)


def _leading_heading(content: Tag, site_names: set[str]) -> Tag | None:
    heading = content.find(re.compile("^h[1-6]$"))
    if heading is None or heading.find_parent(class_="refnamediv") is not None:
        return None  # none, or DocBook's reference page's "Name" label
    for node in content.descendants:
        if node is heading:
            return _own_heading([heading], site_names)
        if isinstance(node, NavigableString) and node.strip():
            return None  # words before it: a section's heading, not the page's
    return None


def _title_parts(title: str) -> list[str]:
    """A <title>'s parts: the page's, then the site's ("Refunds · Acme Help")."""
    for separator in TITLE_SEPARATORS:
        if separator in title:
            return [part.strip() for part in title.split(separator) if part.strip()]
    return [title.strip()] if title.strip() else []


def _text(tag: Tag) -> str:
    return " ".join(tag.get_text().split())
