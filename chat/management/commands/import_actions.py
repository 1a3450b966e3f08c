"""Imports the customer's OpenAPI document as actions (chat/actions/): each
operation with an operationId becomes an action of that name. Run again, it
syncs: changed operations are updated, removed ones disabled. A bad
document changes nothing, and the error names what is wrong."""

from django.core.management.base import BaseCommand, CommandError

from chat.actions import catalog, openapi


class Command(BaseCommand):
    help = "Imports (or syncs) the actions the assistant may call from an OpenAPI 3.0/3.1 document (JSON or YAML)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("file", help="The OpenAPI document: a .json, .yaml or .yml file.")
        parser.add_argument(
            "--disabled", action="store_true", help="Import new operations switched off (switch them on in the admin)."
        )
        parser.add_argument(
            "--base-url",
            default="",
            help="The API's address, instead of the document's servers (a relative server URL is read against it).",
        )

    def handle(self, *args, file: str, disabled: bool, base_url: str, **options) -> None:
        try:
            document = openapi.load(file)
            report = catalog.import_document(document, enabled=not disabled, base_url=base_url)
        except (openapi.BadDocument, catalog.ImportRefused) as bad:
            raise CommandError(f"{file}: {bad}. Nothing imported.") from bad
        self.stdout.write(f"{document.title or file}: {report.summary()}.")
        for label, names in (("added", report.added), ("updated", report.updated), ("disabled", report.disabled)):
            for name in names:
                self.stdout.write(f"  {label}: {name}")
        for skipped in report.skipped:
            self.stdout.write(f"  skipped (no operationId, or a body that is not JSON): {skipped}")
        unset = catalog.schemes_without_secret(report.schemes)
        if unset:
            self.stdout.write(
                f"Credentials to set: {', '.join(unset)} "
                "(manage.py set_action_secret NAME, the secret on standard input)."
            )
        if not disabled and report.added:
            self.stdout.write("The new actions are live for visitors from the next message on.")
