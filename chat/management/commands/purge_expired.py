from django.core.management import call_command
from django.core.management.base import BaseCommand

from chat.support import erasure


class Command(BaseCommand):
    help = (
        "Clears expired sessions and drops client addresses older than KOOKEE_ADDRESS_RETENTION_DAYS "
        "(personal data). Run it daily; `make run` runs it at start."
    )

    def handle(self, *args, **options) -> None:
        call_command("clearsessions")
        purged = erasure.purge_expired()
        self.stdout.write(
            f"Cleared expired sessions; dropped the client addresses of {purged['addresses']} turn(s) "
            f"and {purged['revoked_keys']} revoked key(s) past use."
        )
