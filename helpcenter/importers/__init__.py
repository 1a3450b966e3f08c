"""Bringing a help center in: each kind of source reads its articles as
Items (helpcenter/importers/<kind>.py), and the sync
(helpcenter/importers/sync.py) makes the source's articles match them.

A reader yields an Item per article and language, or Kept when the source
says an article has not changed since the last sync (a website's 304). It
raises SourceError (or FetchError) when the source cannot be read whole: the
sync then changes nothing more, and unpublishes nothing.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urljoin

from helpcenter.importers import html as html_converter
from helpcenter.importers.fetch import FetchError, URLRefused, shown, sync_deadline

__all__ = [
    "FetchError",
    "Item",
    "Kept",
    "Reader",
    "Run",
    "SourceError",
    "URLRefused",
    "api_pages",
    "check_settings",
    "is_url",
    "locale",
    "location_of",
    "parse_json",
    "reader_for",
    "saved_pages",
]


class SourceError(Exception):
    """A source that cannot be read as its kind (a bad file, a bad answer)."""


@dataclass(frozen=True)
class Item:
    external_id: str
    locale: str
    title: str
    body: str  # Markdown; or, from an API that gives HTML, "" and:
    published: bool = True
    url: str = ""  # the article at the source
    slug: str = ""  # wanted, when the source names one
    translation_key: str = ""  # shared by the article's versions in other languages
    section: str = ""
    updated_at: datetime | None = None
    html: str = ""  # converted only when the article is new or changed (a sync compares the source's own text)
    base_url: str = ""  # what the HTML's relative links are relative to

    @property
    def digest(self) -> str:
        """The source's content: a sync rewrites an article only when it changes."""
        fields = asdict(self)
        fields["updated_at"] = None  # a touch at the source that changes nothing is not a change
        fields["converter"] = html_converter.VERSION  # a better conversion applies to every article
        return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def markdown(self) -> str:
        return html_converter.to_markdown(self.html, self.base_url) if self.html else self.body


@dataclass(frozen=True)
class Kept:
    """The source says this article is as it was (every locale of its id)."""

    external_id: str


@dataclass
class Run:
    """What a reader may tell the sync while it reads."""

    source: Any  # helpcenter.models.Source
    expect: Callable[[int], None] = lambda total: None  # how many Items to expect, when known
    state: dict[str, Any] = field(default_factory=dict)  # kept on the source when the sync completes
    # When the sync must stop (time.monotonic()): every reader's Fetcher stops there.
    deadline: float = field(default_factory=sync_deadline)
    pages_read: int = 0  # API pages, against MAX_API_PAGES
    skip: Callable[[], None] = lambda: None  # one expected item that is none (a website's index page, a 404)
    total_grows: bool = False  # the reader expects more as it reads (a crawl finds links)
    # Each id has one locale (a website's page): an article whose locale
    # changed is the same article, moved, not a new one.
    one_locale_per_id: bool = False


class Reader(Protocol):
    def __call__(self, run: Run) -> Iterator[Item | Kept]: ...


READERS = {
    "markdown": "helpcenter.importers.markdown_files",
    "zendesk": "helpcenter.importers.zendesk",
    "intercom": "helpcenter.importers.intercom",
    "website": "helpcenter.importers.website",
}


def reader_for(kind: str) -> Reader:
    if kind not in READERS:
        raise SourceError(f"unknown kind {kind!r}: one of {', '.join(READERS)}")
    return importlib.import_module(READERS[kind]).read  # type: ignore[no-any-return]


# API pages one sync reads at most, whatever its source announces: 200,000
# Zendesk articles (100 a page), 100,000 Intercom ones (50 a page).
MAX_API_PAGES = 2_000


def api_pages(
    run: Run,
    fetcher: Any,
    url: str | None,
    following: Callable[[Any], str | None],
    total: str,
    listed: Callable[[Any, str], list[dict[str, Any]]],
) -> Iterator[list[dict[str, Any]]]:
    """An API's pages, as their articles (`listed`), from url, each page's
    next one (`following`) on the source's own host only. The first page's
    `total` is how many to expect, and how many pages there may be; a next
    page read already (a loop) or one too many stops the sync."""
    seen: set[str] = set()
    limit = MAX_API_PAGES
    while url:
        _check_page(run, url, seen, limit)
        seen.add(url)
        run.pages_read += 1
        page = parse_json(fetcher.get(url).body, url)
        articles = listed(page, url)
        if len(seen) == 1:
            announced = page.get(total) if isinstance(page, dict) else None
            if isinstance(announced, int):
                run.expect(announced)
            limit = _page_limit(announced, len(articles))
        yield articles
        following_url = following(page)
        url = urljoin(url, following_url) if following_url else None
        if url and not fetcher.allowed(url):
            raise URLRefused("the next page is on another host: not followed")


def _check_page(run: Run, url: str, seen: set[str], limit: int) -> None:
    """Raises SourceError for a page not to read: one read already (the
    pages loop), or one past the listing's or the sync's page limit."""
    if url in seen:
        raise SourceError(
            f"the next page after page {len(seen)} is {shown(url)}, read already in this sync (the pages loop): stopped"
        )
    if len(seen) >= limit:
        raise SourceError(f"{shown(url)}: more than {limit} pages, more than its first page announced: stopped")
    if run.pages_read >= MAX_API_PAGES:
        raise SourceError(f"{shown(url)}: more than {MAX_API_PAGES} pages in one sync: stopped")


def _page_limit(announced: object, size: int) -> int:
    """The pages a listing may take: those its announced articles fill at
    its first page's size, a tenth more (articles added while it is read)."""
    if not isinstance(announced, int) or isinstance(announced, bool) or announced < 0 or size < 1:
        return MAX_API_PAGES
    pages = -(-announced // size)
    return min(MAX_API_PAGES, pages + pages // 10 + 1)


def saved_pages(location: str) -> list[tuple[str, Any]]:
    """Saved answers of an API: a JSON file, or a folder of them (in name
    order), as (file name, its JSON). Only files inside the folder: a link
    to a file elsewhere is skipped, as the Markdown reader skips it (the
    folder may be the only place KOOKEE_IMPORT_ROOT lets a source read)."""
    path = Path(location).expanduser()
    if path.is_dir():
        folder = path.resolve()
        files = sorted(p for p in path.rglob("*.json") if p.is_file() and p.resolve().is_relative_to(folder))
    elif path.is_file():
        files = [path]
    else:
        raise SourceError(f"{path} is neither a URL, a JSON file nor a folder")
    return [(p.name, parse_json(p.read_bytes(), p.name)) for p in files]


def parse_json(body: bytes, where: str) -> Any:
    try:
        found = json.loads(body)
    except ValueError:
        raise SourceError(f"{where}: not JSON") from None
    if not isinstance(found, dict | list):
        raise SourceError(f"{where}: not a JSON object or list")
    return found


# A source's settings (docs/operations.md), and what each may be.
SETTINGS: dict[str, tuple[type, ...]] = {
    "locale": (str,),
    "locales": (list, str),
    "sections": (list, str, int),
    "include_restricted": (bool,),
    "max_pages": (int,),
    "concurrency": (int,),
    "scope": (str,),
}


def check_settings(settings: object) -> None:
    """Raises SourceError for settings a reader would trip on (a typo, a
    number as text), naming the setting."""
    if not isinstance(settings, dict):
        raise SourceError("the settings are a JSON object, such as {}")
    for key, value in settings.items():
        if key not in SETTINGS:
            raise SourceError(f"unknown setting {key!r}: one of {', '.join(SETTINGS)}")
        allowed = SETTINGS[key]
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise SourceError(f"the setting {key!r} must be {' or '.join(t.__name__ for t in allowed)}")
        if allowed == (int,) and value < 1:
            raise SourceError(f"the setting {key!r} must be at least 1")


def locale(value: object, default: str) -> str:
    """A locale as the help center stores it: lower case, with a hyphen (pt-br)."""
    text = str(value or "").strip().replace("_", "-").lower()
    return text[:20] or default


def is_url(location: str) -> bool:
    return location.lower().startswith(("http://", "https://"))


def location_of(kind: str, location: str, confined: bool = False) -> str:
    """A source's location as it is kept: the same kind and location are the
    same source. A URL as given (a crawl's prefix is its start URL's folder,
    so a website's keeps its slash); a file or folder, absolute, its links
    and `..` resolved. Confined (a source named in the admin), a file or
    folder must lie under KOOKEE_IMPORT_ROOT (a relative one is taken from
    it), and none may while it is unset; from a shell, anywhere."""
    location = location.strip()
    if is_url(location):
        return location if kind == "website" else location.rstrip("/")
    if kind == "website":
        raise SourceError("a website source is a URL (http:// or https://)")
    path = Path(location).expanduser()
    if confined:
        from django.conf import settings

        if not settings.KOOKEE_IMPORT_ROOT:
            raise SourceError("a file or folder on the server is accepted here only when KOOKEE_IMPORT_ROOT is set")
        root = Path(settings.KOOKEE_IMPORT_ROOT).expanduser().resolve()
        # Resolved before the check (`root/../etc`, a link in the root that
        # points out), and checked before it is looked for: nothing outside
        # the root is read, nor found to exist.
        path = (root / path).resolve()
        if not path.is_relative_to(root):
            raise SourceError(f"{location} is not under KOOKEE_IMPORT_ROOT ({root})")
    if not path.exists():
        raise SourceError(f"{location}: no such file or folder on this server")
    return str(path.resolve())
