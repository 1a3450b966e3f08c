from django.core.management.base import BaseCommand, CommandError

from helpcenter import embeddings, indexer


class Command(BaseCommand):
    help = (
        "Embeds every published passage that has no vector under the configured model (KOOKEE_EMBEDDINGS_MODEL), "
        "now, in the foreground; then deletes the vectors that nothing uses any more (other models', edited "
        "sections'). Run it after a change of model, or let each process's indexer do it in the background."
    )

    def add_arguments(self, parser):
        parser.add_argument("--keep", action="store_true", help="keep unused vectors (to switch models back cheaply)")

    def handle(self, *args, keep: bool = False, **options):
        model = embeddings.model_name()
        if model is None:
            self.stdout.write("KOOKEE_EMBEDDINGS is off: search is by words only, nothing to embed.")
            return
        try:
            done, deleted = indexer.reindex(prune=not keep)
        except embeddings.EmbeddingError as e:
            raise CommandError(f"embedding failed ({e}); what was embedded before it is kept, run it again") from e
        self.stdout.write(f"{done} passage(s) embedded with {model}; {deleted} unused vector(s) deleted.")
