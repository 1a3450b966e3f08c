import time

from django.core.management.base import BaseCommand, CommandError

from helpcenter import embeddings, indexer
from helpcenter.management.embedding import Printer, embed_all


class Command(BaseCommand):
    help = (
        "Embeds every published passage that has no vector under the configured model (KOOKEE_EMBEDDINGS_MODEL), "
        "now, in the foreground (a worker process per core with the local model, KOOKEE_INDEXER_PROCESSES), "
        "showing how far it is; then deletes the vectors that nothing uses any more (other models', edited "
        "sections'). Run it after a change of model. A second run embeds nothing."
    )

    def add_arguments(self, parser):
        parser.add_argument("--keep", action="store_true", help="keep unused vectors (to switch models back cheaply)")

    def handle(self, *args, keep: bool = False, **options):
        indexer.ENABLED = False  # this process embeds: no thread beside it
        model = embeddings.model_name()
        if model is None:
            self.stdout.write("KOOKEE_EMBEDDINGS is off: search is by words only, nothing to embed.")
            return
        started = time.monotonic()
        printer = Printer(self)
        try:
            done = embed_all(printer)
        except embeddings.EmbeddingError as e:
            printer.end()
            raise CommandError(f"embedding failed ({e}); what was embedded before it is kept, run it again") from e
        took = time.monotonic() - started
        deleted = 0 if keep else indexer.prune()
        self.stdout.write(
            f"{done} passage(s) embedded with {model} in {took:.1f} s; {deleted} unused vector(s) deleted."
        )
