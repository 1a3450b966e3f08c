import argparse
import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from helpcenter import embeddings, indexer
from helpcenter.importers import FetchError, SourceError
from helpcenter.importers.budget import OVER_MEMORY, limit_this_process
from helpcenter.importers.secrets import TokenError
from helpcenter.importers.sync import Busy, due, sync
from helpcenter.management.embedding import Progress, embed_all, embed_now
from helpcenter.models import Source


class Command(BaseCommand):
    help = (
        "Syncs every help-center source last synced more than KOOKEE_SYNC_HOURS ago (for cron: "
        "docs/operations.md), or those named. A source whose sync is already running is left to it."
    )

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="every source, due or not")
        parser.add_argument("--source", type=int, action="append", help="this source's id (repeatable)")
        # The admin's "Sync now" (helpcenter/importers/sync.py, sync_in_background):
        # this process takes over the lease the server took, under the sync budget.
        parser.add_argument("--run-id", help=argparse.SUPPRESS)

    def handle(self, *args, **options):
        # This command embeds in the foreground, at its end: the background
        # indexer that saving articles would wake would embed (and bill) the
        # same sections a second time, beside it.
        indexer.ENABLED = False
        if options["run_id"]:
            self._child(options["source"] or [], options["run_id"])
            return
        if options["source"]:
            sources = list(Source.objects.filter(pk__in=options["source"]).order_by("pk"))
        elif options["all"]:
            sources = list(Source.objects.order_by("pk"))
        else:
            sources = due(settings.KOOKEE_SYNC_HOURS)
        failed = 0
        for source in sources:
            try:
                result = sync(source)
            except Busy as e:
                self.stdout.write(f"{source.name}: skipped, {e}.")
                continue
            except (SourceError, FetchError, TokenError) as e:
                failed += 1
                self.stderr.write(f"{source.name}: failed, {e}. Nothing was unpublished.")
                continue
            self.stdout.write(f"{source.name}: {result}.")
        if not sources:
            self.stdout.write("No source is due.")
        embed_now(self)
        if failed:
            raise CommandError(f"{failed} source(s) failed: see above")  # a non-zero exit, for cron's mail

    def _child(self, sources: list[int], run_id: str) -> None:
        """The admin's sync of one source, under its budget. It records its
        own result or error; the server that started it records how it ended
        when it could not, and embeds what it wrote (its one indexer)."""
        if len(sources) != 1:
            raise CommandError("--run-id takes one --source")
        limit_this_process()
        source = Source.objects.get(pk=sources[0])
        try:
            result = sync(source, run_id, confined=True)
        except MemoryError:
            # Nothing more can be trusted to run: the server says why.
            os._exit(OVER_MEMORY)
        except Exception as e:  # on the source's page already
            raise CommandError(f"{source.name}: failed, {e}. Nothing was unpublished.") from None
        self.stdout.write(f"{source.name}: {result}.")
        self._embed(source, run_id)

    def _embed(self, source: Source, run_id: str) -> None:
        """Embeds what the sync wrote, its counts on the source's row as the
        pages' were: the admin shows "Embedding: N of M sections". The lease
        is taken again only if no other sync took it meanwhile."""
        taken = Source.objects.filter(pk=source.pk, running_since__isnull=True).update(
            running_since=timezone.now(), run_id=run_id, progress_done=0, progress_total=None, progress_embedding=True
        )

        def shown(progress: Progress) -> None:
            Source.objects.filter(pk=source.pk, run_id=run_id).update(
                progress_done=progress.done, progress_total=progress.total, running_since=timezone.now()
            )

        try:
            embed_all(shown if taken else None)
        except embeddings.EmbeddingError as e:  # the server's indexer tries again
            self.stderr.write(f"{source.name}: embedding failed, {e}; it is retried in the background.")
        finally:
            Source.objects.filter(pk=source.pk, run_id=run_id).update(
                running_since=None, run_id="", progress_embedding=False
            )
