"""A source's sync: its articles made to match what it holds now.

- An article the source has for the first time is added; one whose content
  changed is rewritten (and re-indexed: its changed passages are embedded
  again, by digest); the others are left as they are (unchanged).
- An article the source no longer has is unpublished, never deleted, so
  that old transcripts' sources still resolve. Only after the source was
  read whole: a sync that fails midway unpublishes nothing.
- Two syncs of one source never run at once: each takes the source's lease
  (one conditional UPDATE, the same on SQLite and PostgreSQL), renews it as
  it goes, and gives it back at the end. A lease not renewed for
  LEASE_SECONDS (a killed process) can be taken again.

Articles typed in the admin have no source and are never touched.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta

from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from helpcenter import index, indexer
from helpcenter.importers import Item, Kept, Run, check_settings, reader_for
from helpcenter.models import Article, Source, language_of

logger = logging.getLogger("kookee.helpcenter")

LEASE_SECONDS = 600
BATCH = 250  # articles written per transaction
PROGRESS_EVERY = 0.5  # seconds between progress writes


class Busy(Exception):
    """Another sync of this source holds its lease."""


@dataclass
class Result:
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    unpublished: int = 0

    def __str__(self) -> str:
        return f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, {self.unpublished} unpublished"


def acquire(source: Source) -> str:
    """Takes the source's lease, or raises Busy."""
    now = timezone.now()
    run_id = uuid.uuid4().hex
    free = Q(running_since__isnull=True) | Q(running_since__lt=now - timedelta(seconds=LEASE_SECONDS))
    taken = (
        Source.objects.filter(pk=source.pk)
        .filter(free)
        .update(running_since=now, run_id=run_id, progress_done=0, progress_total=None, last_error="")
    )
    if not taken:
        raise Busy(f"a sync of {source.name} is already running")
    return run_id


def sync(
    source: Source, run_id: str | None = None, on_progress: Callable[[int, int | None], None] | None = None
) -> Result:
    """Syncs the source (taking its lease unless given one); returns the
    counts. Raises Busy, or what stopped the reading (the source's last
    error says it too)."""
    run_id = run_id or acquire(source)
    try:
        result, state = _Sync(source, run_id, on_progress).run()
    except BaseException as e:
        Source.objects.filter(pk=source.pk, run_id=run_id).update(
            running_since=None, run_id="", last_error=str(e)[:2000] or type(e).__name__
        )
        raise
    finally:
        # Embedding is the caller's: the command does it in the foreground,
        # the admin's thread after the sync, servers when a search finds
        # sections without vectors. A kick here would race the command's own.
        index.forget()
    Source.objects.filter(pk=source.pk, run_id=run_id).update(
        running_since=None, run_id="", synced_at=timezone.now(), last_result=asdict(result), last_error="", state=state
    )
    logger.info("help-center sync of source %s: %s", source.pk, result)
    return result


def sync_in_background(source: Source) -> None:
    """Takes the lease now (raising Busy), then syncs in a thread of this
    process: the admin's action, which shows the progress and the result."""
    run_id = acquire(source)

    def run() -> None:
        close_old_connections()
        try:
            sync(source, run_id)
            # This process's one indexer embeds what changed: not a second
            # embedder beside it (both would pay for the same sections).
            indexer.kick()
        except Exception:
            logger.exception("help-center sync of source %s failed", source.pk)
        finally:
            close_old_connections()

    threading.Thread(target=run, name=f"kookee-sync-{source.pk}", daemon=True).start()


def due(hours: float) -> list[Source]:
    cutoff = timezone.now() - timedelta(hours=hours)
    return list(Source.objects.filter(Q(synced_at__isnull=True) | Q(synced_at__lt=cutoff)).order_by("pk"))


class LeaseLost(Exception):
    pass


class _Sync:
    def __init__(self, source: Source, run_id: str, on_progress: Callable[[int, int | None], None] | None) -> None:
        self.source = source
        self.on_progress = on_progress
        self.run_id = run_id
        self.now = timezone.now()
        self.result = Result()
        self.done = 0
        self.total: int | None = None
        self.reported = 0.0
        self.existing = {
            (a.external_id, a.locale): a
            for a in Article.objects.filter(source=source).only(
                "id", "external_id", "locale", "digest", "published", "slug"
            )
        }
        self.by_id: dict[str, list[tuple[str, str]]] = {}
        for key in self.existing:
            self.by_id.setdefault(key[0], []).append(key)
        self.slugs = set(Article.objects.values_list("slug", flat=True))
        self.seen: set[tuple[str, str]] = set()
        self.creates: list[Article] = []
        self.updates: list[Article] = []

    def run(self) -> tuple[Result, dict]:
        check_settings(self.source.settings)
        run = Run(self.source, expect=self._expect, state={})
        for got in reader_for(self.source.kind)(run):
            if isinstance(got, Kept):
                for key in self.by_id.get(got.external_id, []):
                    self._see(key, None)
            else:
                self._see((got.external_id, got.locale), got)
            self._report()
        self._flush()
        self._unpublish_missing()
        self._report(force=True)
        return self.result, run.state

    def _expect(self, total: int) -> None:
        self.total = (self.total or 0) + max(0, int(total))

    def _see(self, key: tuple[str, str], item: Item | None) -> None:
        if key in self.seen:
            return  # listed twice (a page shifted under the pagination): the first counts
        self.seen.add(key)
        self.done += 1
        article = self.existing.get(key)
        if item is None or (article is not None and article.digest == item.digest):
            self.result.unchanged += 1
            return
        if article is None:
            article = Article(source=self.source, external_id=item.external_id, locale=item.locale)
            article.slug = self._slug(item)
            self._fill(article, item)
            self.creates.append(article)
            self.result.added += 1
        else:
            self._fill(article, item)
            self.updates.append(article)
            self.result.updated += 1
        if len(self.creates) + len(self.updates) >= BATCH:
            self._flush()

    def _fill(self, article: Article, item: Item) -> None:
        article.title = item.title[:200]
        article.body = item.markdown
        article.published = item.published
        article.translation_key = item.translation_key[:500]
        article.source_url = item.url[:1000]
        article.section = item.section[:200]
        article.source_updated_at = item.updated_at
        article.digest = item.digest
        article.synced_at = self.now
        article.updated_at = timezone.now()

    def _slug(self, item: Item) -> str:
        base = (slugify(item.slug) or slugify(item.title) or "article")[:180].strip("-") or "article"
        candidates = [base]
        if language_of(item.locale) != language_of(settings.LANGUAGE_CODE):
            candidates.append(f"{base}-{slugify(item.locale)}")  # another language's version of one slug
        candidates += [f"{base}-{n}" for n in range(2, 10_000)]
        slug = next(c for c in candidates if c not in self.slugs)
        self.slugs.add(slug)
        return slug

    def _flush(self) -> None:
        if not (self.creates or self.updates):
            return
        with transaction.atomic():
            Article.objects.bulk_create(self.creates)
            Article.objects.bulk_update(
                self.updates,
                [
                    "title",
                    "body",
                    "published",
                    "translation_key",
                    "source_url",
                    "section",
                    "source_updated_at",
                    "digest",
                    "synced_at",
                    "updated_at",
                ],
            )
        self.creates, self.updates = [], []

    def _unpublish_missing(self) -> None:
        gone = [a.pk for key, a in self.existing.items() if key not in self.seen and a.published]
        seen = [self.existing[key].pk for key in self.seen if key in self.existing]
        now = timezone.now()
        with transaction.atomic():
            for start in range(0, len(gone), 500):
                # Its digest goes too: when the source has it again, it is
                # rewritten and published, whatever its content.
                Article.objects.filter(pk__in=gone[start : start + 500]).update(
                    published=False, digest="", updated_at=now
                )
            for start in range(0, len(seen), 500):
                Article.objects.filter(pk__in=seen[start : start + 500]).update(synced_at=self.now)
        self.result.unpublished = len(gone)

    def _report(self, force: bool = False) -> None:
        """The progress, for the admin's page; renews the lease."""
        now = time.monotonic()
        if not force and now - self.reported < PROGRESS_EVERY:
            return
        self.reported = now
        renewed = Source.objects.filter(pk=self.source.pk, run_id=self.run_id).update(
            progress_done=self.done, progress_total=self.total, running_since=timezone.now()
        )
        if not renewed:
            raise LeaseLost("this sync's lease was taken by another (it had stalled): stopped")
        if self.on_progress is not None:
            self.on_progress(self.done, self.total)
