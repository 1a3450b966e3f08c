"""A website: the pages a sitemap lists, or those a crawl from a start URL
finds within its host and path prefix.

LOCATION ending in .xml (or .xml.gz) is a sitemap (a sitemap index too);
anything else is where the crawl starts, and its folder is the prefix:
https://acme.example/docs/ crawls /docs/... only. Either way:

- robots.txt is read first and obeyed (its Disallow lines for our user
  agent, and its Crawl-delay);
- only the source's own host is fetched (helpcenter/importers/fetch.py);
- at most the `max_pages` setting (default 500) pages, `concurrency`
  (default 2) at a time; a sitemap is read as it streams in, only until
  that many pages are queued, at most MAX_SITEMAP_URLS of each sitemap and
  MAX_SITEMAPS in all, never its XML whole in memory, and never with a
  DOCTYPE (a DTD's entities can expand a few bytes into gigabytes);
- a page fetched before is asked for again with its ETag and Last-Modified:
  304 keeps the article as it is (unless the source's `locale` setting or
  the HTML converter changed since: then every page is read again);
- a crawl stays under its start URL's folder (/html/en-US/index.html:
  /html/en-US/...), or under the `scope` setting's path when it has one
  (`--scope /html/`); a sitemap's pages are what it lists;
- each page is read as a reader sees it (helpcenter/importers/html.py): its
  own content, without the site's navigation, titled by its own heading.
  A table of contents, a generated index, a source listing or a search page
  is no article: skipped, though a crawl follows its links;
- its language: the `locale` setting when the source has one (it applies to
  every page); else what the page declares (helpcenter/importers/html.py);
  else a language folder or suffix in its URL (/pt-BR/, /pt_BR/, page.pt.html);
  else the language of the page that linked to it; else English;
- the versions of one page in several languages share a translation key,
  within a source and across sources (each language imported on its own):
  its hreflang alternates' x-default (else the first of them), else its own
  URL, each without its language folder or suffix.
"""

from __future__ import annotations

import gzip
import io
import itertools
import logging
import re
import urllib.robotparser
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit
from xml.parsers import expat

from django.conf.locale import LANG_INFO

from helpcenter.importers import Item, Kept, Run, SourceError, locale
from helpcenter.importers import html as html_converter
from helpcenter.importers.fetch import USER_AGENT, Fetcher, PrivateAddress, Redirected, Response, URLRefused
from helpcenter.importers.html import language_tag, parse, read_page, to_markdown

HTML = ("text/html", "application/xhtml+xml")
MAX_SITEMAPS = 50  # read in one sync, through an index and the indexes it lists
MAX_SITEMAP_URLS = 50_000  # entries of one sitemap (or index): the protocol's own limit
MAX_SITEMAP_BYTES = 50_000_000  # the protocol's own limit, uncompressed
MAX_LOC = 2_048  # characters of a URL in a sitemap: the protocol's own limit
CHUNK = 64 * 1024  # of XML, decompressed and parsed at a time
# Links a crawl does not follow: files, not pages.
NOT_PAGES = (".pdf", ".zip", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".mp4", ".css", ".js", ".json", ".xml")
DEFAULT_LOCALE = "en"
# A language folder or suffix in a URL: en, pt-BR, pt_BR.
URL_LANGUAGE = re.compile(r"^([a-z]{2,3})(?:[-_][a-z0-9]{2,4})?$", re.IGNORECASE)
logger = logging.getLogger("kookee.helpcenter")


def read(run: Run) -> Iterator[Item | Kept]:
    source = run.source
    start = source.location.strip()
    max_pages = int(source.settings.get("max_pages") or 500)
    concurrency = max(1, min(8, int(source.settings.get("concurrency") or 2)))
    explicit = locale(source.settings.get("locale"), "")
    state = source.state if isinstance(source.state, dict) else {}
    # Read every page again, unconditionally, when what reading makes of a
    # page changed: a 304 would keep its article as the last sync made it.
    read_with = {"converter": html_converter.VERSION, "locale": explicit}
    before: dict[str, dict[str, Any]] = state.get("pages", {}) if state.get("read_with") == read_with else {}
    after: dict[str, dict[str, Any]] = {}
    run.state["pages"] = after
    run.state["read_with"] = read_with
    run.one_locale_per_id = True
    with Fetcher(start, deadline=run.deadline) as fetcher:
        robots = _robots(fetcher, start)
        delay = float(robots.crawl_delay(USER_AGENT) or 0)
        sitemap = urlsplit(start).path.lower().endswith((".xml", ".xml.gz"))
        if sitemap:
            # Read lazily: the sitemaps stop being read once max_pages are queued.
            listed = (u for u in _sitemap_pages(fetcher, start) if robots.can_fetch(USER_AGENT, u))
            queue = list(itertools.islice(_unique(listed), max_pages))
            prefix = ""
        else:
            queue = [u for u in [urldefrag(start)[0]] if robots.can_fetch(USER_AGENT, u)]
            prefix = _scope(start, source.settings.get("scope"))
            run.total_grows = True
        run.expect(len(queue))
        queued = set(queue)
        linked_from: dict[str, str] = {}  # a page's URL: the locale of the first page found linking to it
        position = 0
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kookee-crawl") as pool:
            while position < len(queue):
                wave = queue[position : position + concurrency]
                position += len(wave)
                for url, response in zip(wave, pool.map(lambda u: _get(fetcher, u, before.get(u)), wave), strict=True):
                    fallback = explicit or linked_from.get(url) or DEFAULT_LOCALE
                    got, remembered = _page(url, response, before.get(url), explicit, fallback)
                    if remembered is not None:
                        after[url] = remembered
                    if got is None:
                        run.skip()
                    else:
                        yield got
                    if sitemap or remembered is None:
                        continue
                    for link in remembered.get("links", []):
                        if (
                            len(queue) < max_pages
                            and link not in queued
                            and not urlsplit(link).path.lower().endswith(NOT_PAGES)
                            and fetcher.allowed(link)
                            and (urlsplit(link).path + "/").startswith(prefix)
                            and robots.can_fetch(USER_AGENT, link)
                        ):
                            queued.add(link)
                            queue.append(link)
                            linked_from[link] = remembered.get("locale", "")
                            run.expect(1)
                if delay:
                    fetcher.wait(min(delay, 30))


def _scope(start: str, scope: object) -> str:
    """The path a crawl stays under: the `scope` setting's (a path, or a
    URL on the start URL's host), else the start URL's folder: /docs/, or
    /docs (no extension); a page's folder otherwise."""
    if scope:
        parts = urlsplit(urljoin(start, str(scope).strip()))
        if parts.netloc.lower() != urlsplit(start).netloc.lower():
            raise SourceError(f"the scope {scope} is not on the start URL's host")
        path = parts.path or "/"
        return path if path.endswith("/") else path + "/"
    path = urlsplit(start).path or "/"
    last = path.rsplit("/", 1)[1]
    return path + "/" if last and "." not in last else path[: path.rfind("/") + 1]


def _robots(fetcher: Fetcher, start: str) -> urllib.robotparser.RobotFileParser:
    """The site's robots.txt; none (404, 410) allows everything."""
    robots = urllib.robotparser.RobotFileParser()
    response = fetcher.get(urljoin(start, "/robots.txt"), accept_missing=True)
    robots.parse(response.text().splitlines() if response.status == 200 else [])
    return robots


def _sitemap_pages(fetcher: Fetcher, url: str) -> Iterator[str]:
    """The pages a sitemap lists, through a sitemap index's sitemaps, on the
    source's host only, as they are read: stop iterating and the reading
    stops too."""
    pending, seen = deque([url]), {url}
    read = 0
    while pending and read < MAX_SITEMAPS:
        current = pending.popleft()
        read += 1
        sitemap = _Sitemap(current)
        for location in sitemap.read(_xml(fetcher, current)):
            if not fetcher.allowed(location):
                continue
            if sitemap.kind == "urlset":
                yield urldefrag(location)[0]
            elif len(seen) >= MAX_SITEMAPS:
                break  # the rest of this index would not be read
            elif location not in seen:
                seen.add(location)
                pending.append(location)


def _unique(urls: Iterable[str]) -> Iterator[str]:
    seen: set[str] = set()
    for url in urls:
        if url not in seen:
            seen.add(url)
            yield url


def _xml(fetcher: Fetcher, url: str) -> Iterator[bytes]:
    """A sitemap's XML, CHUNK by CHUNK, ungzipped as it is read (a gzip
    sitemap whose XML is larger than MAX_SITEMAP_BYTES is refused there),
    within the sync's deadline."""
    body = fetcher.get(url).body  # at most KOOKEE_IMPORT_MAX_BYTES
    stream = gzip.GzipFile(fileobj=io.BytesIO(body)) if body[:2] == b"\x1f\x8b" else io.BytesIO(body)
    size = 0
    while True:
        fetcher.time_left()
        try:
            chunk = stream.read(CHUNK)
        except (OSError, EOFError, zlib.error):
            raise SourceError(f"{url} is not a sitemap (its gzip is broken)") from None
        if not chunk:
            return
        size += len(chunk)
        if size > MAX_SITEMAP_BYTES:
            raise SourceError(f"the sitemap {url} is larger than {MAX_SITEMAP_BYTES} bytes")
        yield chunk


class _Sitemap:
    """One sitemap (or index) parsed as its XML streams in, by expat, with
    no tree kept: the <loc>s in its own namespace, the first
    MAX_SITEMAP_URLS of them. A DOCTYPE is refused: a sitemap needs none,
    and a DTD's entities are how a few bytes of XML expand into gigabytes
    (expat 2.4 and later bound that too, but a system's may be older)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.kind = ""
        self.namespace = ""
        self.count = 0
        self._found: list[str] = []
        self._text: list[str] | None = None  # inside a <loc>
        self._length = 0
        self._parser = expat.ParserCreate(namespace_separator="}")
        self._parser.StartDoctypeDeclHandler = self._doctype
        self._parser.StartElementHandler = self._start
        self._parser.EndElementHandler = self._end
        self._parser.CharacterDataHandler = self._characters

    def read(self, chunks: Iterable[bytes]) -> Iterator[str]:
        """Its locations, chunk by chunk, until MAX_SITEMAP_URLS."""
        for chunk in chunks:
            yield from self._feed(chunk, final=False)
            if self.count >= MAX_SITEMAP_URLS:
                return
        yield from self._feed(b"", final=True)

    def _feed(self, chunk: bytes, final: bool) -> list[str]:
        try:
            self._parser.Parse(chunk, final)
        except expat.ExpatError as e:
            raise SourceError(f"{self.url} is not a sitemap (not XML: {expat.ErrorString(e.code)})") from None
        found, self._found = self._found, []
        return found

    def _doctype(self, *args: object) -> None:
        raise SourceError(f"{self.url}: a sitemap with a DOCTYPE is refused (its entities could expand without bound)")

    def _start(self, name: str, attributes: dict[str, str]) -> None:
        namespace, _, tag = name.rpartition("}")
        if not self.kind:
            if tag not in ("urlset", "sitemapindex"):
                raise SourceError(f"{self.url} is not a sitemap (<{tag}>)")
            self.kind, self.namespace = tag, namespace
        elif tag == "loc" and namespace == self.namespace:  # not an image's <image:loc>
            self._text, self._length = [], 0

    def _characters(self, data: str) -> None:
        if self._text is not None:
            self._length += len(data)
            if self._length <= MAX_LOC:
                self._text.append(data)

    def _end(self, name: str) -> None:
        if self._text is None or name.rpartition("}")[2] != "loc":
            return
        text, self._text = "".join(self._text).strip(), None
        if self.count >= MAX_SITEMAP_URLS:
            return  # the rest of the chunk that reached it
        self.count += 1
        if text and self._length <= MAX_LOC:
            self._found.append(text)


def _get(fetcher: Fetcher, url: str, before: dict[str, Any] | None) -> Response | None:
    headers = {}
    if before and before.get("etag"):
        headers["If-None-Match"] = before["etag"]
    if before and before.get("last_modified"):
        headers["If-Modified-Since"] = before["last_modified"]
    try:
        return fetcher.get(url, headers=headers, accept_missing=True)
    except PrivateAddress:
        raise  # the site's own host, at an address it may not be: the sync stops
    except (Redirected, URLRefused):
        return None  # a page that leads away or in circles is not a page of this site


def _page(
    url: str, response: Response | None, before: dict[str, Any] | None, explicit: str, fallback: str
) -> tuple[Item | Kept | None, dict[str, Any] | None]:
    """The page's article (None: no article), and what to remember of it
    for the next sync (None: nothing, as for a page that is gone)."""
    if response is None or response.status in (404, 410):
        return None, None  # gone: its article is unpublished
    if response.status == 304 and before:
        if before.get("skipped"):
            return None, before
        # The article's own id, which a redirect or a canonical link may have made another than the URL's.
        return Kept(before.get("id") or _id(url)), before
    if response.status == 304 or response.headers.get("content-type", "text/html").split(";")[0].strip() not in HTML:
        return None, None
    page = parse(response.text())
    found_at = urldefrag(response.url)[0]
    links = [urldefrag(urljoin(response.url, a["href"]))[0] for a in page.find_all("a", href=True)]
    alternates = {
        str(link["hreflang"]).strip().lower(): urldefrag(urljoin(response.url, str(link["href"])))[0]
        for link in page.find_all("link", rel="alternate", hreflang=True, href=True)
    }
    # A page reached at two addresses (/docs/ and /docs/index.html) is one
    # article: the address it names as canonical, on this site, is its id.
    # So is a page reached through a redirect: its id is where it was found.
    canonical = page.find("link", rel="canonical", href=True)
    address = urljoin(found_at, str(canonical["href"])) if canonical else found_at
    if urlsplit(address).netloc != urlsplit(url).netloc:
        address = found_at
    read = read_page(page)
    page_locale = explicit or read.language or url_language(found_at) or fallback
    remembered = {
        "etag": response.headers.get("etag", ""),
        "last_modified": response.headers.get("last-modified", ""),
        "links": list(dict.fromkeys(links)),
        "locale": page_locale,
        "id": _id(address),
    }
    body = to_markdown(read.content, base_url=response.url)
    if read.skipped or not read.title or not body.strip():
        logger.debug("website page %s skipped: %s", found_at, read.skipped or "no title or no text")
        return None, {**remembered, "skipped": read.skipped or "empty"}
    item = Item(
        external_id=_id(address),
        locale=page_locale,
        title=read.title,
        body=body,
        url=found_at,
        translation_key=translation_key(address, alternates),
    )
    return item, remembered


def url_language(url: str) -> str:
    """The language a URL names: its first language folder (/pt-BR/,
    /pt_BR/, /en/), else a language suffix on its file (faq.pt.html)."""
    segments = urlsplit(url).path.split("/")
    for segment in segments:
        if _is_language(segment):
            return language_tag(segment)
    stem = segments[-1].rsplit(".", 1)[0]
    suffix = stem.rpartition(".")[2] if "." in stem else ""
    return language_tag(suffix) if _is_language(suffix) else ""


def translation_key(url: str, alternates: dict[str, str]) -> str:
    """What a page's versions in other languages share, whichever source
    imported each: the URL its hreflang alternates name as x-default (else
    the first of them and its own), else its own, each on its host and
    without its language folder or suffix (so /html/en-US/a.html,
    /html/pt-BR/a.html and /help/a.pt.html are /html/a.html and /help/a.html)."""
    if alternates:
        url = alternates.get("x-default") or min([url, *alternates.values()])
    parts = urlsplit(url)
    segments = parts.path.split("/")
    folder = next((n for n, segment in enumerate(segments) if _is_language(segment)), None)
    if folder is not None:
        del segments[folder]
    stem, dot, extension = segments[-1].rpartition(".")
    if stem and "." in stem and _is_language(stem.rpartition(".")[2]):
        segments[-1] = f"{stem.rpartition('.')[0]}{dot}{extension}"
    path = "/".join(segments) or "/"
    return parts.netloc.lower() + path + (f"?{parts.query}" if parts.query else "")


def _is_language(name: str) -> bool:
    """A language Django knows (en, pt-BR, pt_BR), not any short name (api, faq)."""
    found = URL_LANGUAGE.match(name)
    return bool(found) and found.group(1).lower() in LANG_INFO


def _id(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
