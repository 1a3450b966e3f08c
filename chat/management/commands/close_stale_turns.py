from django.conf import settings
from django.core.management.base import BaseCommand

from chat.engine import sweeper


class Command(BaseCommand):
    help = "Closes and bills the turns a dead server process left streaming (run at start-up)."

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--stale-after",
            type=float,
            default=settings.KOOKEE_STALE_TURN_SECONDS,
            help="Seconds since a turn's last checkpoint after which its process counts as dead.",
        )

    def handle(self, *args, stale_after: float, **options) -> None:
        closed = sweeper.close_stale_turns(stale_after)
        self.stdout.write(f"Closed {len(closed)} stale turn(s).")
