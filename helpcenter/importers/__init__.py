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

from helpcenter.importers.fetch import FetchError, Refused

__all__ = [
    "FetchError",
    "Item",
    "Kept",
    "Reader",
    "Refused",
    "Run",
    "SourceError",
    "is_url",
    "locale",
    "location_of",
    "reader_for",
]


class SourceError(Exception):
    """A source that cannot be read as its kind (a bad file, a bad answer)."""


@dataclass(frozen=True)
class Item:
    external_id: str
    locale: str
    title: str
    body: str  # Markdown
    published: bool = True
    url: str = ""  # the article at the source
    slug: str = ""  # wanted, when the source names one
    translation_key: str = ""  # shared by the article's versions in other languages
    section: str = ""
    updated_at: datetime | None = None

    @property
    def digest(self) -> str:
        """The source's content: a sync rewrites an article only when it changes."""
        fields = asdict(self)
        fields["updated_at"] = None  # a touch at the source that changes nothing is not a change
        return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()


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


def locale(value: object, default: str) -> str:
    """A locale as the help center stores it: lower case, with a hyphen (pt-br)."""
    text = str(value or "").strip().replace("_", "-").lower()
    return text[:20] or default


def is_url(location: str) -> bool:
    return location.lower().startswith(("http://", "https://"))


def location_of(kind: str, location: str) -> str:
    """A source's location as it is kept: the same kind and location are the
    same source. A URL as given (a crawl's prefix is its start URL's folder,
    so a website's keeps its slash); a file or folder, absolute."""
    location = location.strip()
    if is_url(location):
        return location if kind == "website" else location.rstrip("/")
    if kind == "website":
        raise SourceError("a website source is a URL (http:// or https://)")
    path = Path(location).expanduser()
    if not path.exists():
        raise SourceError(f"{location}: no such file or folder on this server")
    return str(path.resolve())
