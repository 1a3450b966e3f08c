"""Sets the credential of one of the actions' security schemes (the
document's components.securitySchemes), read from standard input so that
it never lands in a shell's history or a process list. Stored sealed; never
shown again."""

import sys

from django.core.management.base import BaseCommand, CommandError

from chat.actions import catalog
from chat.models import ActionScheme


class Command(BaseCommand):
    help = "Sets an action credential (a bearer token, user:password, or API key) from standard input."

    def add_arguments(self, parser) -> None:
        parser.add_argument("scheme", help="The security scheme's name in the OpenAPI document.")
        parser.add_argument("--clear", action="store_true", help="Remove the credential instead.")

    def handle(self, *args, scheme: str, clear: bool, **options) -> None:
        known = list(ActionScheme.objects.values_list("name", flat=True))
        if scheme not in known:
            listed = ", ".join(known) or "none: import the document first (manage.py import_actions)"
            raise CommandError(f"No security scheme {scheme!r}. The imported document's: {listed}.")
        secret = "" if clear else sys.stdin.readline().rstrip("\r\n")
        if not clear and not secret:
            raise CommandError(
                'No secret on standard input (e.g. printf %s "$TOKEN" | manage.py set_action_secret NAME).'
            )
        kind = ActionScheme.objects.get(name=scheme).kind
        if kind == ActionScheme.Kind.BASIC and not clear and ":" not in secret:
            raise CommandError("A basic credential is user:password. Nothing changed.")
        if "\r" in secret or "\n" in secret or "\0" in secret:
            raise CommandError("A credential may not hold a line break. Nothing changed.")
        catalog.set_secret(scheme, secret)
        self.stdout.write(f"Credential {scheme} {'removed' if clear else 'set'}.")
