import json
from pathlib import Path

from django.core.management.base import BaseCommand

from helpcenter import indexer
from helpcenter.management.embedding import embed_now
from helpcenter.models import Article

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "help_center.json"


class Command(BaseCommand):
    help = "Adds the demo help-center articles that are missing (by slug); never overwrites edits."

    def handle(self, *args, **options) -> None:
        # This command embeds in the foreground, at its end: the background
        # indexer that saving articles would wake would embed (and bill) the
        # same sections a second time, beside it.
        indexer.ENABLED = False
        created = 0
        for item in json.loads(FIXTURE.read_text()):
            fields = item["fields"]
            _, was_created = Article.objects.get_or_create(
                slug=fields["slug"],
                defaults={k: fields[k] for k in ("title", "body", "published")},
            )
            created += was_created
        self.stdout.write(f"Demo help center: {created} article(s) added.")
        # Embedded now, so that the first visitor's search is by meaning too
        # (a server's indexer would do it in the background, on first use).
        embed_now(self)
