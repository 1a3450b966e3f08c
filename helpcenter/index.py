"""The help center as the assistant reads it: one in-memory search index per
process, so that a search costs no database round trip and no re-reading of
every article.

It holds the articles (for words: helpcenter/ranking.py), their passages,
and the passages' vectors under the configured embedding model (for
meaning: helpcenter/dense.py). Passages not yet embedded are searched by
words only until the indexer (helpcenter/indexer.py) has embedded them:
a search that finds some missing asks it to (a change of model, too).

The index is rebuilt when an article changes, or vectors are added. Changes made in this process
(the admin, the demo loader) drop it at once, through model signals. Changes
made by another process are seen through a version stamp (how many articles
there are, the latest `updated_at`, and how many vectors the model has), read at most once every
KOOKEE_HELP_CENTER_RECHECK_SECONDS: one cheap aggregate, not a re-read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from typing import Any

import numpy as np
from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from helpcenter import embeddings, passages, ranking
from helpcenter.dense import Dense
from helpcenter.models import Article, PassageVector, Source, language_of


@dataclass(frozen=True)
class Snapshot:
    stamp: tuple[Any, ...]  # what the help center was built from (_stamp)
    index: ranking.Index
    titles: list[str]
    checked_at: float  # time.monotonic() of the last stamp check
    passages: dict[int, list[passages.Passage]] = dataclass_field(default_factory=dict)  # by article id
    dense: Dense | None = None
    missing: int = 0  # passages with no vector under the model
    languages: dict[int, str] = dataclass_field(default_factory=dict)  # by article id: en, pt...
    in_languages: frozenset[str] = frozenset()  # all of them, for each turn's system prompt
    # An imported article's published versions in every language, by the id of each.
    versions: dict[int, tuple[int, ...]] = dataclass_field(default_factory=dict)

    def fresh(self) -> bool:
        return time.monotonic() - self.checked_at < settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS

    # Built on first use, then carried by replace() at each recheck: one
    # build per change of the help center, not per recheck.
    _sections: Sections | None = dataclass_field(default=None, repr=False, compare=False)

    @property
    def sections(self) -> Sections:
        """Every passage as a document of its own, for ranking sections by
        their words: a long page that mentions everything ranks by its best
        section, not by its whole."""
        sections = self._sections
        if sections is None:
            sections = Sections(self.passages)
            object.__setattr__(self, "_sections", sections)  # frozen: a cache, not a change
        return sections


class Sections:
    """The passages in one list (a passage's number in it is its document's
    id in the ranking), each titled by its article's title and its heading."""

    def __init__(self, by_article: dict[int, list[passages.Passage]]) -> None:
        self.passages = [p for found in by_article.values() for p in found]
        self.number_of = {(p.article_id, p.number): n for n, p in enumerate(self.passages)}
        self.index = ranking.Index(
            [ranking.Document(number, f"{p.title}\n{p.heading}", "", p.text) for number, p in enumerate(self.passages)]
        )


_current: Snapshot | None = None
_lock = threading.Lock()  # one rebuild at a time (sync callers run in threads)


async def current() -> Snapshot:
    """The index, from the event loop: no thread hop while it is fresh."""
    snapshot = _current
    if snapshot is not None and snapshot.fresh():
        return snapshot
    return await database_sync_to_async(current_sync)()


def current_sync() -> Snapshot:
    """The index, from sync code; checks the stamp when it is due."""
    global _current
    snapshot = _current
    if snapshot is not None and snapshot.fresh():
        return snapshot
    with _lock:
        stamp = _stamp()
        snapshot = _current
        if snapshot is None or snapshot.stamp != stamp:
            snapshot = _build(stamp)
        else:
            snapshot = replace(snapshot, checked_at=time.monotonic())
        _current = snapshot
    return snapshot


def _stamp() -> tuple[Any, ...]:
    # Unpublished articles count too: publishing one bumps its updated_at.
    found = Article.objects.aggregate(count=Count("id"), latest=Max("updated_at"))
    model = embeddings.model_name()
    vectors = PassageVector.objects.filter(model=model).count() if model else 0
    return (found["count"], found["latest"], model, vectors)


def published_passages() -> dict[int, list[passages.Passage]]:
    """Every published article's passages, by article id."""
    articles = Article.objects.filter(published=True).only("id", "title", "body").order_by("id")
    return {a.id: passages.split(a.id, a.title, a.body) for a in articles}


def _build(stamp: tuple[Any, ...]) -> Snapshot:
    articles = (
        Article.objects.filter(published=True)
        .select_related("source")
        .only("id", "title", "slug", "body", "locale", "source_id", "translation_key", "source__kind")
    )
    documents = [ranking.Document(a.id, a.title, a.get_absolute_url(), a.body) for a in articles]
    split = {a.id: passages.split(a.id, a.title, a.body) for a in articles}
    dense, missing = _dense(stamp[2], split)
    groups: dict[tuple[object, str], list[int]] = {}
    for a in articles:
        if a.source is not None and a.translation_key:
            # A website's key is its page's address without the language
            # (helpcenter/importers/website.py): the same page whichever
            # source imported each language. Other sources' keys are their ids.
            owner = "website" if a.source.kind == Source.Kind.WEBSITE else a.source_id
            groups.setdefault((owner, a.translation_key), []).append(a.id)
    versions = {member: tuple(ids) for ids in groups.values() if len(ids) > 1 for member in ids}
    return Snapshot(
        stamp,
        ranking.Index(documents),
        [d.title for d in documents],
        time.monotonic(),
        split,
        dense,
        missing,
        (by_language := {a.id: language_of(a.locale) for a in articles}),
        frozenset(by_language.values()),
        versions,
    )


def _dense(model: str | None, split: dict[int, list[passages.Passage]]) -> tuple[Dense | None, int]:
    """The vectors of the passages embedded under the model, and how many
    passages are not. Vectors of another size than most are a model that
    changed under the same name: left for the indexer to replace."""
    if model is None:
        return None, 0
    wanted = {p.digest for found in split.values() for p in found}
    stored = {
        digest: (size, vector)
        for digest, size, vector in PassageVector.objects.filter(model=model).values_list(
            "digest", "dimensions", "vector"
        )
        if digest in wanted
    }
    sizes = [size for size, _ in stored.values()]
    size = max(set(sizes), key=sizes.count) if sizes else 0
    rows, vectors = [], []
    for found in split.values():
        for passage in found:
            at = stored.get(passage.digest)
            if at is not None and at[0] == size:
                rows.append(passage)
                vectors.append(np.frombuffer(bytes(at[1]), dtype="<f4"))
    missing = sum(len(found) for found in split.values()) - len(rows)
    if not rows:
        return None, missing
    return Dense(model, rows, np.vstack(vectors)), missing


@receiver(post_save, sender=Article)
@receiver(post_delete, sender=Article)
def _article_changed(**kwargs: Any) -> None:
    forget()
    # Again once the change is committed: a search in another thread before
    # then would rebuild from the old rows and keep them as fresh. (The
    # indexer embeds the changed passages: helpcenter/indexer.py.)
    transaction.on_commit(forget)


def forget() -> None:
    global _current
    _current = None
