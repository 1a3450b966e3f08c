"""Zendesk Help Center: the public Help Center API, or saved pages of it.

LOCATION is the help center's base URL (https://acme.zendesk.com), read
through `GET /api/v2/help_center/{locale}/articles.json` page by page
(`next_page`), once per locale of the source's `locales` setting (default
en-us); or a JSON file of that API's answer, or a folder of them.

An article's `id` is the same in every language, so the versions are
linked by it. `draft` articles come in unpublished; `html_url`,
`section_id`, `updated_at` and `locale` are kept. Articles restricted to a
user segment (`user_segment_id`) are left out: the assistant answers anyone,
and a token may see what the public may not (setting `include_restricted`
to bring them anyway). The `sections` setting keeps only those sections.

A token (optional, for a private help center): `email/token:API_TOKEN` for
an API token (Basic), or an OAuth access token (Bearer).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import datetime
from typing import Any
from urllib.parse import quote, urlsplit

from helpcenter.importers import Item, Run, SourceError, api_pages, is_url, locale, saved_pages
from helpcenter.importers.fetch import Fetcher
from helpcenter.importers.secrets import token_for

PER_PAGE = 100


def read(run: Run) -> Iterator[Item]:
    source = run.source
    wanted = [
        locale(value, "en-us") for value in _list(source.settings.get("locales") or source.settings.get("locale"))
    ]
    sections = {str(s) for s in _list(source.settings.get("sections"))}
    restricted = bool(source.settings.get("include_restricted"))
    for article in _articles(run, wanted):
        item = _item(article, wanted[0] if wanted else "en-us")
        if item is None:
            continue
        if article.get("user_segment_id") is not None and not restricted:
            continue
        if sections and item.section not in sections:
            continue
        yield item


def _articles(run: Run, locales: list[str]) -> Iterator[dict[str, Any]]:
    location = run.source.location.strip()
    if not is_url(location):
        # Saved pages: every locale in them, unless the source names some.
        yield from _saved(run, location, set(locales))
        return
    base, given = _base(location)
    token = token_for(run.source)
    scheme, credentials = "Bearer", token
    if ":" in token:  # email/token:API_TOKEN
        scheme, credentials = "Basic", base64.b64encode(token.encode()).decode()
    headers = {"Accept": "application/json"}
    with Fetcher(base, token=credentials, scheme=scheme, headers=headers, deadline=run.deadline) as fetcher:
        for wanted in [given] if given else locales or ["en-us"]:
            url = wanted if given else f"{base}/api/v2/help_center/{quote(wanted)}/articles.json?per_page={PER_PAGE}"
            for articles in api_pages(run, fetcher, url, _next, "count", _listed):
                yield from articles


def _base(location: str) -> tuple[str, str]:
    """The help center's base URL, and the articles endpoint when LOCATION
    is one already. A help center's page (…/hc/en-us/...) gives its base; a
    path before /api/ or /hc/ (a proxy's prefix) is kept."""
    location = location.rstrip("/")
    path = urlsplit(location).path
    if "/api/v2/help_center" in path:
        return location.split("/api/v2/help_center", 1)[0], location
    if "/hc/" in path + "/":
        return location.split("/hc", 1)[0], ""
    return location, ""


def _next(page: dict[str, Any]) -> str | None:
    """The next page: `next_page` (offset pagination), or `links.next` while
    `meta.has_more` (cursor pagination, `page[size]`)."""
    if page.get("next_page"):
        return str(page["next_page"])
    meta, links = page.get("meta") or {}, page.get("links") or {}
    if isinstance(meta, dict) and meta.get("has_more") and isinstance(links, dict) and links.get("next"):
        return str(links["next"])
    return None


def _saved(run: Run, location: str, locales: set[str]) -> Iterator[dict[str, Any]]:
    pages = [(name, _listed(page, name)) for name, page in saved_pages(location)]
    run.expect(sum(len(articles) for _, articles in pages))
    for _, articles in pages:
        for article in articles:
            if not locales or locale(article.get("locale"), "") in locales:
                yield article


def _listed(page: Any, where: str) -> list[dict[str, Any]]:
    # An API page, or a plain list of its articles (what some exports save).
    articles = page.get("articles") if isinstance(page, dict) else page
    if not isinstance(articles, list) or not all(isinstance(a, dict) for a in articles):
        raise SourceError(f"{where or 'the file'}: not a Zendesk articles page (no articles list)")
    return articles


def _item(article: dict[str, Any], default: str) -> Item | None:
    if "id" not in article:
        raise SourceError("a Zendesk article without an id")
    title = str(article.get("title") or article.get("name") or "").strip()
    if not title:
        return None
    url = str(article.get("html_url") or "")
    return Item(
        external_id=str(article["id"]),
        locale=locale(article.get("locale"), default),
        title=title,
        body="",
        html=str(article.get("body") or ""),
        base_url=url,
        published=not article.get("draft", False),
        url=url if url.startswith(("http://", "https://")) else "",
        translation_key=str(article["id"]),
        section=str(article.get("section_id") or ""),
        updated_at=_datetime(article.get("updated_at")),
    )


def _list(value: object) -> list[Any]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    return list(value) if isinstance(value, list | tuple) else [value]


def _datetime(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None
