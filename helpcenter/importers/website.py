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
  304 keeps the article as it is;
- each page's main content (its <main> or <article>) becomes the article,
  its <h1> (else its <title>) the title, its <html lang> the locale. Pages
  that say they are the same page in other languages (hreflang alternates)
  are linked as versions of one article.
"""

from __future__ import annotations

import gzip
import io
import itertools
import urllib.robotparser
import zlib
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit
from xml.parsers import expat

from helpcenter.importers import Item, Kept, Run, SourceError, locale
from helpcenter.importers.fetch import USER_AGENT, Fetcher, PrivateAddress, Redirected, Refused, Response
from helpcenter.importers.html import main_content, parse, to_markdown

HTML = ("text/html", "application/xhtml+xml")
MAX_SITEMAPS = 50  # read in one sync, through an index and the indexes it lists
MAX_SITEMAP_URLS = 50_000  # entries of one sitemap (or index): the protocol's own limit
MAX_SITEMAP_BYTES = 50_000_000  # the protocol's own limit, uncompressed
MAX_LOC = 2_048  # characters of a URL in a sitemap: the protocol's own limit
CHUNK = 64 * 1024  # of XML, decompressed and parsed at a time
# Links a crawl does not follow: files, not pages.
NOT_PAGES = (".pdf", ".zip", ".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".mp4", ".css", ".js", ".json", ".xml")
TITLE_SEPARATORS = (" · ", " | ", " \u2013 ", " \u2014 ", " - ")


def read(run: Run) -> Iterator[Item | Kept]:
    source = run.source
    start = source.location.strip()
    max_pages = int(source.settings.get("max_pages") or 500)
    concurrency = max(1, min(8, int(source.settings.get("concurrency") or 2)))
    default = locale(source.settings.get("locale"), "en")
    before: dict[str, dict[str, Any]] = source.state.get("pages", {}) if isinstance(source.state, dict) else {}
    after: dict[str, dict[str, Any]] = {}
    run.state["pages"] = after
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
            path = urlsplit(start).path or "/"
            # A folder: /docs/, or /docs (no extension); a page's folder otherwise.
            last = path.rsplit("/", 1)[1]
            prefix = path + "/" if last and "." not in last else path[: path.rfind("/") + 1]
        run.expect(len(queue))
        queued = set(queue)
        position = 0
        with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="kookee-crawl") as pool:
            while position < len(queue):
                wave = queue[position : position + concurrency]
                position += len(wave)
                for url, response in zip(wave, pool.map(lambda u: _get(fetcher, u, before.get(u)), wave), strict=True):
                    found = _page(url, response, before.get(url), default)
                    if found is None:
                        continue
                    got, remembered = found
                    after[url] = remembered
                    yield got
                    if sitemap:
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
                            run.expect(1)
                if delay:
                    fetcher.wait(min(delay, 30))


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
    except (Redirected, Refused):
        return None  # a page that leads away or in circles is not a page of this site


def _page(
    url: str, response: Response | None, before: dict[str, Any] | None, default: str
) -> tuple[Item | Kept, dict[str, Any]] | None:
    if response is None or response.status in (404, 410):
        return None  # gone: its article is unpublished
    if response.status == 304 and before:
        # The article's own id, which a redirect or a canonical link may have made another than the URL's.
        return Kept(before.get("id") or _id(url)), before
    if response.status == 304 or response.headers.get("content-type", "text/html").split(";")[0].strip() not in HTML:
        return None
    page = parse(response.text())
    links = [urldefrag(urljoin(response.url, a["href"]))[0] for a in page.find_all("a", href=True)]
    html = page.find("html")
    page_locale = locale(html.get("lang") if html else "", default)
    alternates = sorted(
        urljoin(response.url, str(link["href"]))
        for link in page.find_all("link", rel="alternate", hreflang=True, href=True)
    )
    title_tag = page.find("title")
    content = main_content(page)
    heading = content.find("h1")
    title = heading.get_text(" ", strip=True) if heading else ""
    if heading:
        heading.decompose()
    if not title and title_tag:
        title = title_tag.get_text(" ", strip=True)
        for separator in TITLE_SEPARATORS:
            title = title.split(separator)[0]
    body = to_markdown(content, base_url=response.url)
    remembered = {
        "etag": response.headers.get("etag", ""),
        "last_modified": response.headers.get("last-modified", ""),
        "links": list(dict.fromkeys(links)),
    }
    if not title.strip() or not body.strip():
        return None
    # A page reached at two addresses (/docs/ and /docs/index.html) is one
    # article: the address it names as canonical, on this site, is its id.
    # So is a page reached through a redirect: its id is where it was found.
    found_at = urldefrag(response.url)[0]
    canonical = page.find("link", rel="canonical", href=True)
    address = urljoin(found_at, str(canonical["href"])) if canonical else found_at
    if urlsplit(address).netloc != urlsplit(url).netloc:
        address = found_at
    remembered["id"] = _id(address)
    item = Item(
        external_id=_id(address),
        locale=page_locale,
        title=title.strip(),
        body=body,
        url=found_at,
        # The versions of one page share the first of their URLs.
        translation_key=_id(min([url, *alternates])) if alternates else "",
    )
    return item, remembered


def _id(url: str) -> str:
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")
