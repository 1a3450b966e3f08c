"""The help-center commands' last step: embedding what they changed, in the
foreground, and saying so."""

from django.core.management.base import BaseCommand

from helpcenter import embeddings, indexer


def embed_now(command: BaseCommand) -> None:
    """Embeds every section without a vector; an endpoint that fails leaves
    it to the servers' indexers (a search by words meanwhile)."""
    try:
        embedded = indexer.embed_missing()
    except embeddings.EmbeddingError as e:
        command.stderr.write(f"Not embedded yet ({e}): each server process's indexer will retry.")
        return
    if embedded:
        command.stdout.write(f"{embedded} passage(s) embedded with {embeddings.model_name()}.")
