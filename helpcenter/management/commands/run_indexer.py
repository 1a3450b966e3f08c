import argparse
import os
import random
import signal
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from django.db.models import Count, Max

from helpcenter import embeddings, indexer
from helpcenter.models import Article

POLL_SECONDS = 2.0  # between looks at the help center for changes
RESCAN_SECONDS = 600.0  # a full look even without one (vectors deleted, say)


class Command(BaseCommand):
    help = (
        "Embeds the help center's sections that have no vector, as they appear: a service beside the web "
        "processes (docs/deploy.md), which then leave it to it with KOOKEE_WEB_INDEXER=false. It claims each "
        "batch, so that any number of indexers embed each section once. --once: what is missing now, then exit."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="embed what is missing now, then exit")
        # The commands' worker processes (helpcenter/management/embedding.py):
        # wait for the sections other workers hold, until all are embedded.
        parser.add_argument("--wait", action="store_true", help=argparse.SUPPRESS)
        # A web process's child (helpcenter/indexer.py): below its visitors.
        parser.add_argument("--nice", type=int, default=0, help=argparse.SUPPRESS)

    def handle(self, *args, once: bool = False, wait: bool = False, nice: int = 0, **options):
        # Stopped (systemd, a command's Ctrl-C): its claims are given back
        # on the way out, not left to their lease.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        if nice:
            os.nice(nice)
        indexer.ENABLED = False  # no thread of its own beside it
        embedder = embeddings.embedder()
        if embedder is None:
            self.stdout.write("KOOKEE_EMBEDDINGS is off: search is by words only, nothing to embed.")
            return
        if once:
            try:
                done = self._pass(embedder, wait)[0]
            except embeddings.EmbeddingError as e:
                raise CommandError(f"embedding failed ({e}); what was embedded before it is kept") from e
            self.stdout.write(f"{done} passage(s) embedded with {embedder.model}.")
            return
        self._serve(embedder)

    def _pass(self, embedder: embeddings.Embedder, wait: bool) -> tuple[int, int]:
        """Embeds what is missing (from a random place in the list: workers
        started together claim apart); returns (embedded, were missing)."""
        pending = indexer.missing(embedder.model)
        if pending:
            start = random.randrange(len(pending))
            pending = pending[start:] + pending[:start]
        return indexer.work(embedder, pending, wait=wait), len(pending)

    def _serve(self, embedder: embeddings.Embedder) -> None:
        self.stdout.write(f"Indexing the help center with {embedder.model}: waiting for sections to embed.")
        seen, looked, leftover, failures = None, 0.0, False, 0
        while True:
            close_old_connections()
            stamp = _stamp()
            due = looked + (settings.KOOKEE_INDEXER_LEASE_SECONDS if leftover else RESCAN_SECONDS)
            if stamp != seen or time.monotonic() >= due:
                started = time.monotonic()
                try:
                    done, were = self._pass(embedder, wait=False)
                except Exception as e:  # the endpoint down, or the database: later
                    failures += 1
                    delay = indexer.BACKOFF_SECONDS[min(failures, len(indexer.BACKOFF_SECONDS)) - 1]
                    self.stderr.write(f"Embedding failed ({type(e).__name__}: {e}); retrying in {delay} s.")
                    time.sleep(delay)
                    continue
                failures = 0
                seen, looked = stamp, time.monotonic()
                # Some held by another worker: looked at again once a dead one's lease is over.
                leftover = done < were
                if done:
                    took = time.monotonic() - started
                    self.stdout.write(f"{done} passage(s) embedded with {embedder.model} in {took:.1f} s.")
            time.sleep(POLL_SECONDS)


def _stamp() -> tuple:
    found = Article.objects.aggregate(count=Count("id"), latest=Max("updated_at"))
    return (found["count"], found["latest"])
