"""The help center as the assistant reads it: one in-memory search index per
process, so that a search costs no database round trip and no re-reading of
every article.

The index is rebuilt when an article changes. Changes made in this process
(the admin, the demo loader) drop it at once, through model signals. Changes
made by another process are seen through a version stamp (how many articles
there are and the latest `updated_at`), read at most once every
KOOKEE_HELP_CENTER_RECHECK_SECONDS: one cheap aggregate, not a re-read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from helpcenter import ranking
from helpcenter.models import Article


@dataclass(frozen=True)
class Snapshot:
    stamp: tuple
    index: ranking.Index
    titles: list[str]
    checked_at: float  # time.monotonic() of the last stamp check

    def fresh(self) -> bool:
        return time.monotonic() - self.checked_at < settings.KOOKEE_HELP_CENTER_RECHECK_SECONDS


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
            snapshot = Snapshot(snapshot.stamp, snapshot.index, snapshot.titles, time.monotonic())
        _current = snapshot
        return snapshot


def _stamp() -> tuple:
    # Unpublished articles count too: publishing one bumps its updated_at.
    found = Article.objects.aggregate(count=Count("id"), latest=Max("updated_at"))
    return (found["count"], found["latest"])


def _build(stamp: tuple) -> Snapshot:
    articles = Article.objects.filter(published=True).only("id", "title", "slug", "body")
    documents = [ranking.Document(a.id, a.title, a.get_absolute_url(), a.body) for a in articles]
    return Snapshot(stamp, ranking.Index(documents), [d.title for d in documents], time.monotonic())


@receiver(post_save, sender=Article)
@receiver(post_delete, sender=Article)
def _article_changed(**kwargs) -> None:
    _forget()
    # Again once the change is committed: a search in another thread before
    # then would rebuild from the old rows and keep them as fresh.
    transaction.on_commit(_forget)


def _forget() -> None:
    global _current
    _current = None
