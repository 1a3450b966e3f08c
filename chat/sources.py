"""The help articles an answer actually used.

A search returns several articles; the visitor should see only those the
answer draws on: the ones it links to or names by title. Articles the search
returned but the answer ignored are not sources.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from chat.vocabulary import SEARCH_TOOL


def used_articles(answer: str, results: Iterable[Any]) -> list[dict[str, str]]:
    """The articles from search results that the answer links to or names, in
    the order the search returned them, each once: [{"title", "url"}]. The
    url leads to the section the answer used: the one it links to, else the
    one the search matched (the result's url, with its #section)."""
    sources: dict[str, dict[str, str]] = {}
    for result in results:
        articles = result.get("articles") if isinstance(result, dict) else None
        for article in articles if isinstance(articles, list) else []:
            if not isinstance(article, dict):
                continue
            title, url = article.get("title"), article.get("url")
            if not isinstance(title, str) or not isinstance(url, str):
                continue
            page = url.split("#", 1)[0]
            if page in sources or not title.strip() or not page.strip("/"):
                continue  # listed already; or a blank title or URL, which would match every answer
            section = _linked_section(answer, page)
            if section is not None or _names(answer, title):
                sources[page] = {"title": title, "url": f"{page}#{section}" if section else url}
    return list(sources.values())


def search_results(calls: Iterable[Any]) -> list[Any]:
    """The results of the help-center searches among tool calls."""
    return results_of(calls, SEARCH_TOOL)


def results_of(calls: Iterable[Any], tool: str) -> list[Any]:
    """The results of one tool's calls among tool calls, in order (the round
    loop's, or stored ones, whose results are JSON text)."""
    found = []
    for call in calls:
        if call.name != tool or not call.result:
            continue
        result = call.result
        if isinstance(result, str):
            try:
                result = json.loads(result)
            except ValueError:
                continue
        found.append(result)
    return found


def _linked_section(answer: str, page: str) -> str | None:
    """The section of the page that the answer links to ("" for the page
    itself), or None when it does not link to the page. "/help/slug/" as a
    relative or absolute link, with or without the trailing slash or a
    section's anchor, but not "/help/slug-two/"."""
    path = re.escape(page.rstrip("/"))
    found = re.search(path + r"(?![\w-])/?(?:#([\w%-]+(?:\.[\w%-]+)*))?", answer)
    if found is None:
        return None
    return found.group(1) or ""


def _names(answer: str, title: str) -> bool:
    return re.search(r"(?<!\w)" + re.escape(title) + r"(?!\w)", answer, re.IGNORECASE) is not None
