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
- The admin's "Sync now" syncs in a child process under a budget
  (KOOKEE_SYNC_MEMORY_MB, KOOKEE_SYNC_CPU_SECONDS, KOOKEE_SYNC_SECONDS) that
  the child cannot escape (helpcenter/importers/budget.py): no source,
  however hostile, can take the server's memory or CPU. The server takes
  the lease and hands it over; a thread of the server waits for the child
  and says how it ended when the child could not (killed by its budget).

Articles typed in the admin have no source and are never touched.
"""

from __future__ import annotations

import logging
import math
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify

from helpcenter import index, indexer
from helpcenter.importers import Item, Kept, Run, budget, check_settings, location_of, reader_for
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
    skipped: int = 0  # read, but no article (a website's index pages, pages gone)

    def __str__(self) -> str:
        text = f"{self.added} added, {self.updated} updated, {self.unchanged} unchanged, {self.unpublished} unpublished"
        return text + (f", {self.skipped} skipped" if self.skipped else "")


@dataclass(frozen=True)
class Progress:
    """How far a sync is: for the admin's page, and a command's progress line."""

    done: int  # read, whether an article or skipped
    total: int | None  # expected, when known
    skipped: int
    seconds: float  # since the sync began
    growing: bool = False  # the total grows as the reading finds more (a crawl's links)
    finished: bool = False

    @property
    def seconds_left(self) -> float | None:
        if self.growing or not self.total or not self.done or self.done >= self.total:
            return None
        return self.seconds / self.done * (self.total - self.done)

    def __str__(self) -> str:
        if not self.total:
            text = f"read {self.done:,}"
        elif self.growing and not self.finished:
            text = f"read {self.done:,} of {self.total:,} found so far"
        else:
            text = f"read {self.done:,}/{self.total:,}"
        if self.skipped:
            text += f" ({self.skipped:,} skipped)"
        left = self.seconds_left
        if left is not None:
            text += f", ~{math.ceil(left)} s left" if left < 90 else f", ~{math.ceil(left / 60)} min left"
        return text


def acquire(source: Source) -> str:
    """Takes the source's lease, or raises Busy."""
    now = timezone.now()
    run_id = uuid.uuid4().hex
    free = Q(running_since__isnull=True) | Q(running_since__lt=now - timedelta(seconds=LEASE_SECONDS))
    taken = (
        Source.objects.filter(pk=source.pk)
        .filter(free)
        .update(
            running_since=now,
            run_id=run_id,
            progress_done=0,
            progress_total=None,
            progress_embedding=False,
            last_error="",
        )
    )
    if not taken:
        raise Busy(f"a sync of {source.name} is already running")
    return run_id


def sync(
    source: Source,
    run_id: str | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    confined: bool = False,
) -> Result:
    """Syncs the source (taking its lease unless given one); returns the
    counts. Raises Busy, or what stopped the reading (the source's last
    error says it too). Confined (a sync the admin started), a file or
    folder it reads must lie under KOOKEE_IMPORT_ROOT."""
    run_id = run_id or acquire(source)
    try:
        if confined:
            # Checked again at each sync: a row saved before the rule, or a
            # link in the root that points out of it since.
            location_of(source.kind, source.location, confined=True)
        result, state = _Sync(source, run_id, on_progress).run()
    except BaseException as e:
        Source.objects.filter(pk=source.pk, run_id=run_id).update(running_since=None, run_id="", last_error=_why(e))
        raise
    finally:
        # Embedding is the caller's: the command does it in the foreground,
        # the server that started the admin's child once the child is done,
        # servers when a search finds sections without vectors. A kick here
        # would race the command's own.
        index.forget()
    Source.objects.filter(pk=source.pk, run_id=run_id).update(
        running_since=None, run_id="", synced_at=timezone.now(), last_result=asdict(result), last_error="", state=state
    )
    logger.info("help-center sync of source %s: %s", source.pk, result)
    return result


def _why(error: BaseException) -> str:
    if isinstance(error, MemoryError):
        return budget.out_of_memory()
    return str(error)[:2000] or type(error).__name__


def sync_in_background(source: Source) -> threading.Thread | None:
    """The admin's action, which shows the progress and the result. Takes
    the lease now (raising Busy: "already syncing" at once; call it outside
    a transaction, so that the child sees the lease), then syncs in a child
    process (`manage.py sync_help_center --source ID --run-id RUN`), which
    owns the lease from then on. Returns the thread that waits for it."""
    run_id = acquire(source)
    command = [sys.executable, str(settings.BASE_DIR / "manage.py"), "sync_help_center"]
    try:
        child = subprocess.Popen(
            [*command, "--source", str(source.pk), "--run-id", run_id],
            cwd=settings.BASE_DIR,
            env=budget.child_environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # what it logs (stderr) goes to this server's log
        )
    except OSError as e:
        logger.exception("help-center sync of source %s could not start", source.pk)
        _record_end(source.pk, run_id, f"stopped: its process could not start ({e.strerror})")
        return None
    reaper = threading.Thread(target=_reap, args=(child, source.pk, run_id), name=f"kookee-sync-{source.pk}")
    reaper.daemon = True  # a server that stops leaves the child to finish (its own alarm bounds it)
    reaper.start()
    return reaper


def _reap(child: subprocess.Popen, source_pk: int, run_id: str) -> None:
    """Waits for the admin's child (no zombie is left), says how it ended
    when its sync could not, and has this process's indexer embed what it
    wrote."""
    code = child.wait()
    try:
        _record_end(source_pk, run_id, budget.ending(code))
        # Embedded once, by this process's one indexer (as after the command,
        # which embeds in its own foreground): the child has a small budget
        # and would load a second model, and this server's searches would
        # kick its indexer at the same sections anyway. What a failed sync
        # wrote before it stopped is embedded too.
        index.forget()
        indexer.kick()
    except Exception:
        logger.exception("help-center sync of source %s: its end was not recorded", source_pk)
    finally:
        connections.close_all()  # this thread's own


def _record_end(source_pk: int, run_id: str, why: str) -> None:
    """Gives the child's lease back with why it stopped, if the child could not."""
    Source.objects.filter(pk=source_pk, run_id=run_id).update(running_since=None, run_id="", last_error=why)


def due(hours: float) -> list[Source]:
    cutoff = timezone.now() - timedelta(hours=hours)
    return list(Source.objects.filter(Q(synced_at__isnull=True) | Q(synced_at__lt=cutoff)).order_by("pk"))


class LeaseLost(Exception):
    pass


class _Sync:
    def __init__(self, source: Source, run_id: str, on_progress: Callable[[Progress], None] | None) -> None:
        self.source = source
        self.on_progress = on_progress
        self.run_id = run_id
        self.now = timezone.now()
        self.started = time.monotonic()
        self.result = Result()
        self.done = 0
        self.total: int | None = None
        self.reported = 0.0
        self.run_state = Run(source)  # the reader's, once it reads
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
        run = self.run_state = Run(self.source, expect=self._expect, state={}, skip=self._skip)
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

    def _skip(self) -> None:
        self.done += 1
        self.result.skipped += 1
        self._report()

    def _expect(self, total: int) -> None:
        self.total = (self.total or 0) + max(0, int(total))

    def _see(self, key: tuple[str, str], item: Item | None) -> None:
        if key in self.seen:
            return  # listed twice (a page shifted under the pagination): the first counts
        self.seen.add(key)
        self.done += 1
        article = self.existing.get(key)
        if article is None and item is not None and self.run_state.one_locale_per_id:
            article = self._moved(key)
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

    def _moved(self, key: tuple[str, str]) -> Article | None:
        """The id's article under the locale it had (a page now read as
        another language, the source's `locale` setting changed): the same
        article, its slug and links kept, under the new locale."""
        external_id, new_locale = key
        old = next((k for k in self.by_id.get(external_id, []) if k not in self.seen), None)
        if old is None:
            return None
        article = self.existing.pop(old)
        self.by_id[external_id] = [k for k in self.by_id[external_id] if k != old] + [key]
        self.existing[key] = article
        article.locale = new_locale
        article.digest = ""  # rewritten, whatever its content
        return article

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
                    "locale",
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
            growing = self.run_state.total_grows
            self.on_progress(
                Progress(self.done, self.total, self.result.skipped, now - self.started, growing, finished=force)
            )
