"""Intercom Articles: the REST API's article list, or its JSON export.

LOCATION is the API's base URL (https://api.intercom.io, or a regional one
such as https://api.eu.intercom.io), read with the source's token (an access
token, Bearer) through `GET /articles`, page by page (`pages.next`); or a
JSON file of that list (or of its `data`), or a folder of them.

An article's `state` decides whether it is published; its other languages
(`translated_content`) come in as linked versions of it, each with its own
state. `parent_id` (the collection) is kept as its section.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from helpcenter.importers import Item, Run, SourceError, api_pages, is_url, locale, saved_pages
from helpcenter.importers.fetch import Fetcher
from helpcenter.importers.secrets import token_for

PER_PAGE = 50
API_VERSION = "2.11"


def read(run: Run) -> Iterator[Item]:
    default = locale(run.source.settings.get("locale"), "en")
    for article in _articles(run):
        yield from _items(article, default)


def _articles(run: Run) -> Iterator[dict[str, Any]]:
    location = run.source.location.strip()
    if not is_url(location):
        yield from _saved(run, location)
        return
    base = location.rstrip("/").removesuffix("/articles")
    headers = {"Accept": "application/json", "Intercom-Version": API_VERSION}
    with Fetcher(base, token=token_for(run.source), headers=headers, deadline=run.deadline) as fetcher:
        url = f"{base}/articles?per_page={PER_PAGE}"
        following = lambda page: _next(base, page.get("pages") or {}) if isinstance(page, dict) else None  # noqa: E731
        for articles in api_pages(run, fetcher, url, following, "total_count", _listed):
            yield from articles


def _next(base: str, pages: dict[str, Any]) -> str | None:
    """The next page: a URL (pages.next), a cursor (pages.next.starting_after),
    or a page number short of total_pages."""
    after = pages.get("next")
    if isinstance(after, str) and after:
        return after
    if isinstance(after, dict) and after.get("starting_after"):
        return f"{base}/articles?" + urlencode({"per_page": PER_PAGE, "starting_after": after["starting_after"]})
    page, total = pages.get("page"), pages.get("total_pages")
    if isinstance(page, int) and isinstance(total, int) and page < total and after is None and "next" not in pages:
        return f"{base}/articles?" + urlencode({"per_page": PER_PAGE, "page": page + 1})
    return None


def _saved(run: Run, location: str) -> Iterator[dict[str, Any]]:
    found = [article for name, page in saved_pages(location) for article in _listed(page, name)]
    run.expect(len(found))
    yield from found


def _listed(page: Any, where: str) -> list[dict[str, Any]]:
    articles = (
        page if isinstance(page, list) else page.get("data", page.get("articles")) if isinstance(page, dict) else None
    )
    if not isinstance(articles, list) or not all(isinstance(a, dict) for a in articles):
        raise SourceError(f"{where}: not an Intercom article list (no data list)")
    return articles


def _items(article: dict[str, Any], default: str) -> Iterator[Item]:
    if "id" not in article:
        raise SourceError("an Intercom article without an id")
    key = str(article["id"])
    section = str(article.get("parent_id") or "")
    own = locale(article.get("default_locale"), default)
    versions: dict[str, dict[str, Any]] = {own: article}
    translated = article.get("translated_content") or {}
    if isinstance(translated, dict):
        for name, content in translated.items():
            if name != "type" and isinstance(content, dict) and (content.get("title") or content.get("body")):
                versions.setdefault(locale(name, default), content)
    for found_locale, content in versions.items():
        title = str(content.get("title") or "").strip()
        if not title:
            continue
        url = str(content.get("url") or "")
        yield Item(
            external_id=key,
            locale=found_locale,
            title=title,
            body="",
            html=str(content.get("body") or ""),
            base_url=url,
            published=content.get("state", "published") == "published",
            url=url if url.startswith(("http://", "https://")) else "",
            translation_key=key,
            section=section,
            updated_at=_datetime(content.get("updated_at")),
        )


def _datetime(value: object) -> datetime | None:
    if isinstance(value, int | float) and value > 0:
        return datetime.fromtimestamp(value, UTC)
    return None
