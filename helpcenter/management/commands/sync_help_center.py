from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from helpcenter import indexer
from helpcenter.importers import FetchError, SourceError
from helpcenter.importers.secrets import TokenError
from helpcenter.importers.sync import Busy, due, sync
from helpcenter.management.embedding import embed_now
from helpcenter.models import Source


class Command(BaseCommand):
    help = (
        "Syncs every help-center source last synced more than KOOKEE_SYNC_HOURS ago (for cron: "
        "docs/operations.md), or those named. A source whose sync is already running is left to it."
    )

    def add_arguments(self, parser):
        parser.add_argument("--all", action="store_true", help="every source, due or not")
        parser.add_argument("--source", type=int, action="append", help="this source's id (repeatable)")

    def handle(self, *args, **options):
        # This command embeds in the foreground, at its end: the background
        # indexer that saving articles would wake would embed (and bill) the
        # same sections a second time, beside it.
        indexer.ENABLED = False
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
