import time

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from helpcenter import indexer
from helpcenter.importers import FetchError, SourceError, location_of
from helpcenter.importers.secrets import ENV_PREFIX, TokenError, check_env_name
from helpcenter.importers.sync import Busy, Progress, sync
from helpcenter.management.embedding import embed_now
from helpcenter.models import Source


class Command(BaseCommand):
    help = (
        "Imports a help center, or syncs it again: the same KIND and LOCATION are the same source. "
        "KIND is markdown (a folder), zendesk (a Help Center URL, or saved JSON of its API), intercom (the API's "
        "URL, or its JSON export) or website (a sitemap URL, or a start URL to crawl). See docs/operations.md."
    )

    def add_arguments(self, parser):
        parser.add_argument("kind", choices=Source.Kind.values)
        parser.add_argument("location", help="a URL, or a folder or file on this server")
        parser.add_argument("--name", help="the source's name in the admin (default: the location)")
        parser.add_argument(
            "--token-env",
            metavar="VAR",
            help=f"the environment variable that holds the API token (never stored): {ENV_PREFIX}...",
        )
        parser.add_argument(
            "--locale",
            action="append",
            help=(
                "a language to import (Zendesk: en-us, pt-br...; repeat for several); website: every page's language, "
                "whatever the pages declare; Markdown: the language of files that do not say"
            ),
        )
        parser.add_argument("--max-pages", type=int, help="website: the most pages to read (default 500)")
        parser.add_argument(
            "--scope",
            metavar="PATH",
            help="website: the path a crawl stays under (default: the start URL's folder), such as /docs/",
        )
        parser.add_argument("--section", action="append", help="Zendesk: only this section id (repeatable)")
        parser.add_argument("--no-embed", action="store_true", help="leave the embedding to the servers' indexers")

    def handle(self, *args, kind: str, location: str, **options):
        # This command embeds in the foreground, at its end: the background
        # indexer that saving articles would wake would embed (and bill) the
        # same sections a second time, beside it.
        indexer.ENABLED = False
        try:
            # Any file or folder: whoever runs this has the server's shell already.
            location = location_of(kind, location)
            if options["token_env"]:
                check_env_name(options["token_env"])
        except (SourceError, TokenError) as e:
            raise CommandError(str(e)) from None
        source, created = Source.objects.get_or_create(
            kind=kind, location=location, defaults={"name": options["name"] or location[:200]}
        )
        changed = _configure(source, options)
        if changed and not created:
            self.stdout.write(f"Source {source.name}: settings updated.")
        verb = "Importing" if created or source.synced_at is None else "Syncing"
        self.stdout.write(f"{verb} {source.get_kind_display()} from {location}...")
        started = time.monotonic()
        line = _ProgressLine(self.stdout)
        try:
            result = sync(source, on_progress=line)
        except Busy as e:
            raise CommandError(str(e)) from None
        except (SourceError, FetchError, TokenError) as e:
            raise CommandError(f"{source.name}: {e}. Nothing was unpublished; run it again.") from None
        finally:
            line.end()
        self.stdout.write(f"{source.name}: {result} ({time.monotonic() - started:.1f} s).")
        if options["no_embed"]:
            return
        embed_now(self)


class _ProgressLine:
    """The sync's progress: one line updated in place on a terminal, a line
    every LOG_SECONDS otherwise (a log)."""

    LOG_SECONDS = 5.0

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out
        self.terminal = out.isatty()
        self.shown = 0.0
        self.open = False  # a terminal's line not ended yet

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        if self.terminal:
            self.out.write(f"\r  {progress}\033[K", ending="")
            self.open = True
            self.out.flush()
        elif not progress.finished and now - self.shown >= self.LOG_SECONDS:
            self.shown = now
            self.out.write(f"  {progress}")

    def end(self) -> None:
        """Ends the terminal's line, before what the command says next."""
        if self.open:
            self.out.write("")
            self.open = False


def _configure(source: Source, options: dict) -> bool:
    """What the command's options say about the source: kept for its next syncs."""
    settings = dict(source.settings)
    if options["locale"]:
        locales = [v.strip() for value in options["locale"] for v in value.split(",") if v.strip()]
        settings["locales" if source.kind == Source.Kind.ZENDESK else "locale"] = (
            locales if source.kind == Source.Kind.ZENDESK else locales[0]
        )
    if options["max_pages"]:
        settings["max_pages"] = options["max_pages"]
    if options["scope"]:
        settings["scope"] = options["scope"]
    if options["section"]:
        settings["sections"] = options["section"]
    fields = {"settings": settings}
    if options["token_env"] is not None:
        fields["token_env"] = options["token_env"]
    if options["name"]:
        fields["name"] = options["name"]
    changed = [name for name, value in fields.items() if getattr(source, name) != value]
    for name in changed:
        setattr(source, name, fields[name])
    if changed:
        source.save(update_fields=changed)
    return bool(changed)
